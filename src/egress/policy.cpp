#include "egress/policy.hpp"

#include <algorithm>

#include "airlock/errors.hpp"
#include "airlock/records.hpp"
#include "egress/host_pattern.hpp"

namespace airlock {

EgressPolicy EgressPolicy::for_spec(const SandboxSpec& spec) {
  if (spec.egress() != Egress::allowlist) {
    throw InvalidArgument("spec.egress is '" + std::string(to_string(spec.egress())) +
                              "': only an allowlist spec has an egress proxy policy",
                          "spec.egress");
  }
  EgressPolicy policy;
  policy.allowed_hosts = spec.egress_allow();
  return policy;
}

std::string_view to_string(EgressVerdict verdict) noexcept {
  switch (verdict) {
    case EgressVerdict::allow:
      return "allow";
    case EgressVerdict::deny:
      return "deny";
    case EgressVerdict::error:
      return "error";
  }
  return "?";
}

std::string_view to_string(EgressReason reason) noexcept {
  switch (reason) {
    case EgressReason::allowed:
      return "allowed";
    case EgressReason::malformed_request:
      return "malformed_request";
    case EgressReason::method_not_allowed:
      return "method_not_allowed";
    case EgressReason::header_timeout:
      return "header_timeout";
    case EgressReason::header_too_large:
      return "header_too_large";
    case EgressReason::host_not_allowed:
      return "host_not_allowed";
    case EgressReason::port_not_allowed:
      return "port_not_allowed";
    case EgressReason::nonglobal_address:
      return "nonglobal_address";
    case EgressReason::over_capacity:
      return "over_capacity";
    case EgressReason::resolution_failed:
      return "resolution_failed";
    case EgressReason::resolution_timeout:
      return "resolution_timeout";
    case EgressReason::dial_failed:
      return "dial_failed";
    case EgressReason::dial_timeout:
      return "dial_timeout";
    case EgressReason::client_closed:
      return "client_closed";
    case EgressReason::listener_closed:
      return "listener_closed";
  }
  return "?";
}

}  // namespace airlock

namespace airlock::egress {
namespace {

std::chrono::milliseconds positive(std::chrono::milliseconds value, const char* field) {
  if (value.count() <= 0) {
    throw InvalidArgument(std::string("egress policy: ") + field + " must be positive", field);
  }
  return value;
}

}  // namespace

CompiledPolicy CompiledPolicy::compile(const EgressPolicy& policy) {
  CompiledPolicy compiled;
  for (const auto& pattern : policy.allowed_hosts) {
    compiled.host_patterns_.push_back(normalise_host_pattern(pattern, "allowed_hosts"));
  }
  if (policy.allowed_ports.empty()) {
    throw InvalidArgument("egress policy: allowed_ports is empty, so no tunnel could open",
                          "allowed_ports");
  }
  for (const auto port : policy.allowed_ports) {
    if (port == 0) {
      throw InvalidArgument("egress policy: allowed_ports contains 0", "allowed_ports");
    }
    compiled.ports_.push_back(port);
  }
  std::sort(compiled.ports_.begin(), compiled.ports_.end());
  compiled.ports_.erase(std::unique(compiled.ports_.begin(), compiled.ports_.end()),
                        compiled.ports_.end());
  for (const auto& range : policy.allow_nonglobal_for_tests) {
    compiled.nonglobal_allowed_.push_back(IpRange::parse(range, "allow_nonglobal_for_tests"));
  }
  if (policy.max_header_bytes < 64 || policy.max_header_bytes > 1024 * 1024) {
    throw InvalidArgument("egress policy: max_header_bytes must be between 64 and 1048576",
                          "max_header_bytes");
  }
  compiled.max_header_bytes_ = policy.max_header_bytes;
  compiled.header_timeout_ = positive(policy.header_timeout, "header_timeout");
  compiled.dial_timeout_ = positive(policy.dial_timeout, "dial_timeout");
  compiled.idle_timeout_ = positive(policy.idle_timeout, "idle_timeout");
  if (policy.max_connections == 0) {
    throw InvalidArgument("egress policy: max_connections must be at least 1", "max_connections");
  }
  compiled.max_connections_ = policy.max_connections;
  return compiled;
}

bool CompiledPolicy::host_allowed(std::string_view canonical_host) const noexcept {
  return std::any_of(host_patterns_.begin(), host_patterns_.end(), [&](const std::string& pattern) {
    return host_matches(pattern, canonical_host);
  });
}

bool CompiledPolicy::port_allowed(std::uint16_t port) const noexcept {
  return std::binary_search(ports_.begin(), ports_.end(), port);
}

std::optional<std::string> CompiledPolicy::address_refusal(const IpAddress& address) const {
  auto reason = nonglobal_reason(address);
  if (!reason) return std::nullopt;
  const IpAddress plain = address.unmapped();
  for (const auto& range : nonglobal_allowed_) {
    if (range.contains(plain)) return std::nullopt;
  }
  return reason;
}

std::string CompiledPolicy::describe() const {
  std::string text;
  for (const auto& pattern : host_patterns_) text += (text.empty() ? "" : ", ") + pattern;
  if (text.empty()) text = "nothing";
  text += "; ports ";
  for (std::size_t i = 0; i < ports_.size(); ++i) {
    text += (i ? "," : "") + std::to_string(ports_[i]);
  }
  if (!nonglobal_allowed_.empty()) {
    text += "; TEST ONLY non-global ranges allowed:";
    for (const auto& range : nonglobal_allowed_) text += " " + range.to_string();
  }
  return text;
}

}  // namespace airlock::egress
