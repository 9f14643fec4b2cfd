// An EgressPolicy checked once and turned into the form the proxy consults per connection.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "airlock/egress.hpp"
#include "egress/address.hpp"

namespace airlock::egress {

class CompiledPolicy {
 public:
  // Refuses (InvalidArgument naming the field) a bad pattern, port, CIDR range or bound.
  static CompiledPolicy compile(const EgressPolicy& policy);

  bool host_allowed(std::string_view canonical_host) const noexcept;
  bool port_allowed(std::uint16_t port) const noexcept;
  // Why `address` may not be dialled (it is not global and no test range admits it), or nullopt.
  std::optional<std::string> address_refusal(const IpAddress& address) const;

  const std::vector<std::string>& host_patterns() const noexcept { return host_patterns_; }
  const std::vector<std::uint16_t>& ports() const noexcept { return ports_; }
  const std::vector<IpRange>& nonglobal_allowed_for_tests() const noexcept {
    return nonglobal_allowed_;
  }
  std::size_t max_header_bytes() const noexcept { return max_header_bytes_; }
  std::chrono::milliseconds header_timeout() const noexcept { return header_timeout_; }
  std::chrono::milliseconds dial_timeout() const noexcept { return dial_timeout_; }
  std::chrono::milliseconds idle_timeout() const noexcept { return idle_timeout_; }
  std::size_t max_connections() const noexcept { return max_connections_; }

  // "a.example, *.b.example; ports 443" — for logs and the readiness line.
  std::string describe() const;

 private:
  std::vector<std::string> host_patterns_;
  std::vector<std::uint16_t> ports_;
  std::vector<IpRange> nonglobal_allowed_;
  std::size_t max_header_bytes_ = 0;
  std::chrono::milliseconds header_timeout_{};
  std::chrono::milliseconds dial_timeout_{};
  std::chrono::milliseconds idle_timeout_{};
  std::size_t max_connections_ = 0;
};

}  // namespace airlock::egress
