#include "egress/address.hpp"

#include <arpa/inet.h>

#include <cstring>

#include "airlock/errors.hpp"

namespace airlock::egress {
namespace {

// Prefix match over the first `bits` bits of two byte strings.
bool prefix_equal(const std::uint8_t* a, const std::uint8_t* b, unsigned bits) noexcept {
  const unsigned whole = bits / 8;
  if (std::memcmp(a, b, whole) != 0) return false;
  const unsigned rest = bits % 8;
  if (rest == 0) return true;
  const auto mask = static_cast<std::uint8_t>(0xFF << (8 - rest));
  return (a[whole] & mask) == (b[whole] & mask);
}

struct Block {
  IpAddress base;
  unsigned prefix_length;
  const char* reason;
};

IpAddress literal(const char* text) {
  return *IpAddress::parse(text);
}

// IANA's special-purpose registries, read conservatively: a block whose sub-blocks are partly
// global (192.0.0.0/24, 2001::/23) is refused whole — a tunnel to one of those is never what an
// allowlisted agent needs.
const std::vector<Block>& v4_blocks() {
  static const std::vector<Block> blocks = {
      {literal("0.0.0.0"), 8, "this network (0.0.0.0/8)"},
      {literal("10.0.0.0"), 8, "private (RFC 1918)"},
      {literal("100.64.0.0"), 10, "shared address space (CGNAT, 100.64.0.0/10)"},
      {literal("127.0.0.0"), 8, "loopback"},
      {literal("169.254.169.254"), 32, "link-local (cloud metadata endpoint)"},
      {literal("169.254.0.0"), 16, "link-local"},
      {literal("172.16.0.0"), 12, "private (RFC 1918)"},
      {literal("192.0.0.0"), 24, "IETF protocol assignments (192.0.0.0/24)"},
      {literal("192.0.2.0"), 24, "documentation (TEST-NET-1)"},
      {literal("192.88.99.0"), 24, "6to4 relay anycast (deprecated)"},
      {literal("192.168.0.0"), 16, "private (RFC 1918)"},
      {literal("198.18.0.0"), 15, "benchmarking (198.18.0.0/15)"},
      {literal("198.51.100.0"), 24, "documentation (TEST-NET-2)"},
      {literal("203.0.113.0"), 24, "documentation (TEST-NET-3)"},
      {literal("224.0.0.0"), 4, "multicast"},
      {literal("255.255.255.255"), 32, "limited broadcast"},
      {literal("240.0.0.0"), 4, "reserved (240.0.0.0/4)"},
  };
  return blocks;
}

const std::vector<Block>& v6_blocks() {
  static const std::vector<Block> blocks = {
      {literal("::"), 128, "unspecified"},
      {literal("::1"), 128, "loopback"},
      {literal("64:ff9b:1::"), 48, "NAT64 local use (64:ff9b:1::/48)"},
      {literal("100::"), 64, "discard-only (100::/64)"},
      {literal("2001:db8::"), 32, "documentation (2001:db8::/32)"},
      {literal("2001::"), 23, "IETF protocol assignments incl. Teredo (2001::/23)"},
      {literal("3fff::"), 20, "documentation (3fff::/20)"},
      {literal("5f00::"), 16, "segment routing SIDs (5f00::/16)"},
      {literal("fc00::"), 7, "unique local (fc00::/7)"},
      {literal("fe80::"), 10, "link-local (fe80::/10)"},
      {literal("fec0::"), 10, "site-local (deprecated, fec0::/10)"},
      {literal("ff00::"), 8, "multicast"},
  };
  return blocks;
}

std::optional<std::string> first_block(const IpAddress& address, const std::vector<Block>& blocks) {
  for (const auto& block : blocks) {
    if (prefix_equal(address.bytes.data(), block.base.bytes.data(), block.prefix_length)) {
      return std::string(block.reason);
    }
  }
  return std::nullopt;
}

std::optional<std::string> embedded_v4_reason(const IpAddress& address, std::size_t offset,
                                              const char* form) {
  const auto& b = address.bytes;
  const IpAddress inner = IpAddress::v4(b[offset], b[offset + 1], b[offset + 2], b[offset + 3]);
  if (auto reason = nonglobal_reason(inner)) {
    return std::string(form) + " of " + inner.to_string() + ": " + *reason;
  }
  return std::nullopt;
}

}  // namespace

std::optional<IpAddress> IpAddress::parse(std::string_view text) {
  if (text.empty() || text.size() > INET6_ADDRSTRLEN) return std::nullopt;
  const std::string copy(text);  // inet_pton needs a terminator
  IpAddress address;
  if (::inet_pton(AF_INET, copy.c_str(), address.bytes.data()) == 1) {
    address.family = Family::v4;
    return address;
  }
  if (::inet_pton(AF_INET6, copy.c_str(), address.bytes.data()) == 1) {
    address.family = Family::v6;
    return address;
  }
  return std::nullopt;
}

IpAddress IpAddress::v4(std::uint8_t a, std::uint8_t b, std::uint8_t c, std::uint8_t d) {
  IpAddress address;
  address.family = Family::v4;
  address.bytes[0] = a;
  address.bytes[1] = b;
  address.bytes[2] = c;
  address.bytes[3] = d;
  return address;
}

std::optional<IpAddress> IpAddress::from_sockaddr(const sockaddr* address) {
  IpAddress result;
  if (address->sa_family == AF_INET) {
    sockaddr_in in{};
    std::memcpy(&in, address, sizeof in);
    result.family = Family::v4;
    std::memcpy(result.bytes.data(), &in.sin_addr, 4);
    return result;
  }
  if (address->sa_family == AF_INET6) {
    sockaddr_in6 in6{};
    std::memcpy(&in6, address, sizeof in6);
    result.family = Family::v6;
    std::memcpy(result.bytes.data(), &in6.sin6_addr, 16);
    return result;
  }
  return std::nullopt;
}

std::string IpAddress::to_string() const {
  char text[INET6_ADDRSTRLEN] = {};
  ::inet_ntop(family == Family::v4 ? AF_INET : AF_INET6, bytes.data(), text, sizeof text);
  return text;
}

std::string IpAddress::to_string(std::uint16_t port) const {
  return family == Family::v4 ? to_string() + ":" + std::to_string(port)
                              : "[" + to_string() + "]:" + std::to_string(port);
}

socklen_t IpAddress::to_sockaddr(std::uint16_t port, sockaddr_storage& out) const {
  std::memset(&out, 0, sizeof out);
  if (family == Family::v4) {
    sockaddr_in in{};
    in.sin_family = AF_INET;
    in.sin_port = htons(port);
    std::memcpy(&in.sin_addr, bytes.data(), 4);
    std::memcpy(&out, &in, sizeof in);
    return sizeof in;
  }
  sockaddr_in6 in6{};
  in6.sin6_family = AF_INET6;
  in6.sin6_port = htons(port);
  std::memcpy(&in6.sin6_addr, bytes.data(), 16);
  std::memcpy(&out, &in6, sizeof in6);
  return sizeof in6;
}

IpAddress IpAddress::unmapped() const {
  static const std::uint8_t kMappedPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};
  if (family == Family::v6 && std::memcmp(bytes.data(), kMappedPrefix, 12) == 0) {
    return v4(bytes[12], bytes[13], bytes[14], bytes[15]);
  }
  return *this;
}

IpRange IpRange::parse(std::string_view text, std::string_view what) {
  const auto refuse = [&](const std::string& why) -> IpRange {
    throw InvalidArgument(std::string(what) + ": \"" + std::string(text) + "\" " + why,
                          std::string(what));
  };
  const auto slash = text.find('/');
  const auto address = IpAddress::parse(text.substr(0, slash));
  if (!address) return refuse("is not an IP address or CIDR range (e.g. 127.0.0.0/8)");
  const unsigned max_length = address->family == IpAddress::Family::v4 ? 32 : 128;
  unsigned length = max_length;
  if (slash != std::string_view::npos) {
    const auto digits = text.substr(slash + 1);
    if (digits.empty() || digits.size() > 3) return refuse("has no valid prefix length");
    length = 0;
    for (const char c : digits) {
      if (c < '0' || c > '9') return refuse("has no valid prefix length");
      length = length * 10 + static_cast<unsigned>(c - '0');
    }
    if (length > max_length) {
      return refuse("has a prefix length above " + std::to_string(max_length));
    }
  }
  IpRange range{*address, length};
  for (unsigned bit = length; bit < max_length; ++bit) {
    if (range.base.bytes[bit / 8] & (0x80 >> (bit % 8))) {
      return refuse("has host bits set beyond the prefix length");
    }
  }
  return range;
}

bool IpRange::contains(const IpAddress& address) const noexcept {
  return address.family == base.family &&
         prefix_equal(address.bytes.data(), base.bytes.data(), prefix_length);
}

std::string IpRange::to_string() const {
  return base.to_string() + "/" + std::to_string(prefix_length);
}

std::optional<std::string> nonglobal_reason(const IpAddress& address) {
  if (address.family == IpAddress::Family::v4) return first_block(address, v4_blocks());

  const IpAddress plain = address.unmapped();
  if (plain.family == IpAddress::Family::v4) {
    if (auto reason = nonglobal_reason(plain)) return "IPv4-mapped " + *reason;
    return std::nullopt;
  }
  if (auto reason = first_block(address, v6_blocks())) return reason;
  static const IpAddress kNat64 = literal("64:ff9b::");
  if (prefix_equal(address.bytes.data(), kNat64.bytes.data(), 96)) {
    return embedded_v4_reason(address, 12, "NAT64 form");
  }
  static const IpAddress k6to4 = literal("2002::");
  if (prefix_equal(address.bytes.data(), k6to4.bytes.data(), 16)) {
    return embedded_v4_reason(address, 2, "6to4 form");
  }
  // Only 2000::/3 is allocated for global unicast; the rest of the space (incl. the deprecated
  // IPv4-compatible ::a.b.c.d form) is reserved.
  if ((address.bytes[0] & 0xE0) != 0x20) return std::string("reserved (outside 2000::/3)");
  return std::nullopt;
}

}  // namespace airlock::egress
