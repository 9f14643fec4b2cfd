// IP addresses as values, CIDR ranges, and the rule that decides which addresses are global.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace airlock::egress {

struct IpAddress {
  enum class Family : std::uint8_t { v4, v6 };

  Family family = Family::v4;
  std::array<std::uint8_t, 16> bytes{};  // network order; an IPv4 address uses the first 4

  // Strict literal forms only (inet_pton): "192.0.2.1", "2001:db8::1". No brackets, no zone id,
  // none of inet_aton's shorthands ("127.1", "0x7f.0.0.1", "017.0.0.1").
  static std::optional<IpAddress> parse(std::string_view text);
  static IpAddress v4(std::uint8_t a, std::uint8_t b, std::uint8_t c, std::uint8_t d);
  // nullopt for a family other than AF_INET / AF_INET6.
  static std::optional<IpAddress> from_sockaddr(const sockaddr* address);

  std::size_t size() const noexcept { return family == Family::v4 ? 4 : 16; }
  // Canonical text: dotted quad, or RFC 5952 IPv6 without brackets.
  std::string to_string() const;
  // "192.0.2.1:443" or "[2001:db8::1]:443".
  std::string to_string(std::uint16_t port) const;
  // The socket address for connect(); returns its length.
  socklen_t to_sockaddr(std::uint16_t port, sockaddr_storage& out) const;

  // An IPv4-mapped IPv6 address (::ffff:a.b.c.d) as the IPv4 address it names; other
  // addresses unchanged. Everything downstream sees one spelling per destination.
  IpAddress unmapped() const;

  friend bool operator==(const IpAddress&, const IpAddress&) = default;
};

// A CIDR range such as "10.0.0.0/8" or "fc00::/7". A bare address is a single-host range.
struct IpRange {
  IpAddress base;  // host bits cleared
  unsigned prefix_length = 0;

  // Refuses (InvalidArgument, naming `what`) anything that is not a strict literal with an
  // in-range prefix; set host bits are refused too, because "10.0.0.1/8" is usually a typo.
  static IpRange parse(std::string_view text, std::string_view what);
  bool contains(const IpAddress& address) const noexcept;
  std::string to_string() const;
};

// Why `address` is not globally reachable ("loopback", "private (RFC 1918)", "link-local (cloud
// metadata)", …), or nullopt when it is. Deliberately wider than "private": documentation,
// benchmarking, reserved and protocol-assignment blocks are refused too, and an IPv6 address that
// embeds an IPv4 one (mapped, NAT64, 6to4) is judged by the IPv4 address it embeds. Every IPv6
// address outside 2000::/3 (global unicast) is refused.
std::optional<std::string> nonglobal_reason(const IpAddress& address);

}  // namespace airlock::egress
