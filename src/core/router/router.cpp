#include "airlock/router.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <string>

#include "airlock/errors.hpp"
#include "core/router/background_worker.hpp"

namespace airlock {
namespace {

// Sorted, so the refusal reads the same however the host ordered its backends.
std::string registered_names(const std::vector<std::shared_ptr<SandboxBackend>>& backends) {
  std::vector<std::string> sorted;
  for (const auto& backend : backends) sorted.push_back(backend->name());
  std::sort(sorted.begin(), sorted.end());
  std::string names;
  for (const auto& name : sorted) names += (names.empty() ? "" : ", ") + name;
  return names.empty() ? "none" : names;
}

std::string rung_name(Isolation value) {
  return is_known_rung(value) ? std::string(to_string(value))
                              : "<undeclared rung " + std::to_string(static_cast<int>(value)) + ">";
}

void refuse_unknown_rung(const SandboxBackend& backend) {
  if (!is_known_rung(backend.isolation())) {
    throw BackendNotPermitted("sandbox backend '" + backend.name() + "' declares isolation " +
                                  rung_name(backend.isolation()) +
                                  ", which is not a rung of the ladder (" +
                                  std::string(isolation_ladder()) +
                                  "); nothing can tell whether it meets a floor",
                              "isolation-floor");
  }
}

}  // namespace

SandboxRouter::SandboxRouter(std::vector<std::shared_ptr<SandboxBackend>> backends,
                             RouterOptions options)
    : backends_(std::move(backends)), options_(std::move(options)) {
  for (const auto& backend : backends_) {
    if (!backend) throw InvalidArgument("router: a registered backend is null", "backends");
  }
  if (!is_known_rung(options_.min_isolation)) {
    throw InvalidArgument("router: min_isolation is not a rung of the ladder (" +
                              std::string(isolation_ladder()) + ")",
                          "min_isolation");
  }
  if (backends_.empty()) return;  // disabled: a host attaches no tools

  if (!options_.selected) {
    selected_ = backends_.front();
  } else {
    for (const auto& backend : backends_) {
      if (backend->name() == *options_.selected) {
        selected_ = backend;
        break;
      }
    }
    if (!selected_) {
      throw NoSandboxBackend("sandbox backend '" + *options_.selected +
                             "' is not registered (registered: " + registered_names(backends_) +
                             ")");
    }
  }
  // Only the selected backend is floor-checked: the others are reached by disposal alone.
  refuse_unknown_rung(*selected_);
  if (!meets_floor(selected_->isolation(), options_.min_isolation)) {
    throw BackendNotPermitted(
        "sandbox backend '" + selected_->name() + "' declares isolation " +
            rung_name(selected_->isolation()) + ", below the host's floor " +
            std::string(to_string(options_.min_isolation)) + " (" +
            std::string(isolation_ladder()) +
            "); the router refuses rather than degrade — lower the floor (min_isolation) to " +
            rung_name(selected_->isolation()) + " explicitly if this host accepts that boundary",
        "isolation-floor");
  }
}

RoutingDecision SandboxRouter::ensure_can_serve(const SandboxSpec& spec) const {
  RoutingDecision decision;
  decision.effective_floor = options_.min_isolation;
  if (!selected_) return decision;
  check_all(spec, &decision);
  return decision;
}

void SandboxRouter::check_all(const SandboxSpec& spec, RoutingDecision* decision) const {
  const SandboxBackend& backend = *selected_;
  const std::string who = "sandbox backend '" + backend.name() + "'";
  const std::string workload = "the '" + spec.kind() + "' workload";
  auto pass = [&](const char* check, std::string detail) {
    if (decision) decision->passed.push_back({check, std::move(detail)});
  };

  // 1. Host posture: required capabilities the host denies outright.
  if (auto denied = spec.required_capabilities().intersect(options_.denied_capabilities);
      !denied.empty()) {
    throw CapabilityDenied(workload + " requires " + to_string(denied) +
                               ", which this host denies (denied_capabilities)",
                           "denied-capabilities");
  }
  pass("denied-capabilities", "requires none of " + to_string(options_.denied_capabilities));

  // 2. Host posture: identities the host denies outright.
  if (auto denied = spec.identities().intersect(options_.denied_identities); !denied.empty()) {
    throw IdentityDenied(workload + " exercises identities " + to_string(denied) +
                             ", which this host denies (denied_identities)",
                         "denied-identities");
  }
  pass("denied-identities", "exercises none of " + to_string(options_.denied_identities));

  // 3. The effective floor: the stricter of the host's and the spec's.
  Isolation floor = options_.min_isolation;
  if (auto raised = spec.min_isolation();
      raised && isolation_rank(*raised) > isolation_rank(floor)) {
    floor = *raised;
  }
  refuse_unknown_rung(backend);
  if (!meets_floor(backend.isolation(), floor)) {
    const bool spec_raised = floor != options_.min_isolation;
    throw BackendNotPermitted(
        who + " declares isolation " + rung_name(backend.isolation()) + ", below " +
            (spec_raised ? workload + "'s own floor " : std::string("the host's floor ")) +
            std::string(to_string(floor)) + " (" + std::string(isolation_ladder()) + ")",
        "isolation-floor");
  }
  if (decision) {
    decision->backend = backend.name();
    decision->backend_isolation = backend.isolation();
    decision->effective_floor = floor;
  }
  pass("isolation-floor", std::string(to_string(backend.isolation())) + " meets the floor " +
                              std::string(to_string(floor)));

  // 4. Capabilities: silence is read charitably, as the default set.
  const CapabilitySet capabilities = backend.capabilities().value_or(kDefaultCapabilities);
  if (auto missing = spec.required_capabilities().minus(capabilities); !missing.empty()) {
    throw CapabilityNotSupported(who + " cannot serve " + workload + ": it lacks " +
                                     to_string(missing) + " (it declares " +
                                     to_string(capabilities) + ")",
                                 "capabilities");
  }
  pass("capabilities", "declares " + to_string(capabilities) + " ⊇ requires " +
                           to_string(spec.required_capabilities()));

  // 5. Guest shape: only a spec that asks is judged; silence is no answer.
  if (auto family = spec.requires_os_family()) {
    const OsFamilySet families = backend.os_families().value_or(OsFamilySet{});
    if (!families.contains(*family)) {
      throw OsFamilyNotSupported(who + " does not hand out " + std::string(to_string(*family)) +
                                     " guests, which " + workload + " is written for (it declares " +
                                     to_string(families) + ")",
                                 "os-family");
    }
    pass("os-family", std::string(to_string(*family)) + " is declared");
  } else {
    pass("os-family", "the spec asks for no guest shape");
  }

  // 6. Transfer limits: refused, never clamped.
  const SandboxLimits limits = backend.limits().value_or(kDefaultSandboxLimits);
  auto limits_text = [](const TransferLimits& l) {
    return std::to_string(l.max_bytes_per_file) + " B/file, " + std::to_string(l.max_total_bytes) +
           " B total, " + std::to_string(l.max_files) + " files";
  };
  if (!spec.files_in().within(limits.files_in)) {
    throw TransferLimitsNotPermitted(workload + "'s files_in caps (" + limits_text(spec.files_in()) +
                                         ") exceed " + who + "'s ceiling (" +
                                         limits_text(limits.files_in) + ")",
                                     "transfer-limits");
  }
  if (!spec.files_out().within(limits.files_out)) {
    throw TransferLimitsNotPermitted(
        workload + "'s files_out caps (" + limits_text(spec.files_out()) + ") exceed " + who +
            "'s ceiling (" + limits_text(limits.files_out) + ")",
        "transfer-limits");
  }
  pass("transfer-limits", "files_in and files_out are within the backend's ceilings");

  // 7. Egress: silence is *not* charitable — a backend that never declared it enforced nothing.
  const EgressSet modes = backend.egress_modes().value_or(EgressSet{});
  if (!modes.contains(spec.egress())) {
    throw EgressNotEnforced(who + " cannot enforce the '" + std::string(to_string(spec.egress())) +
                                "' egress " + workload + " runs in (it enforces " +
                                (modes.empty() ? std::string("nothing") : to_string(modes)) + ")",
                            "egress");
  }
  pass("egress", std::string(to_string(spec.egress())) + " is enforced");
}

std::shared_ptr<Sandbox> SandboxRouter::acquire(const SandboxKey& key, const SandboxSpec& spec) {
  if (!selected_) throw NoSandboxBackend("no sandbox backend is configured");
  check_all(spec, nullptr);
  return selected_->acquire(key, spec);
}

void SandboxRouter::dispose(const SandboxKey& key) noexcept {
  for (const auto& backend : backends_) {
    try {
      backend->dispose(key);
    } catch (const std::exception& error) {
      spdlog::warn("dispose on backend '{}' failed: {}", backend->name(), error_detail(error));
    } catch (...) {
      spdlog::warn("dispose on backend '{}' failed", backend->name());
    }
  }
}

bool SandboxRouter::dispose_kind(const SandboxKey& key, std::string_view kind,
                                 std::optional<std::string_view> instance_id) noexcept {
  bool all_gone = true;
  for (const auto& backend : backends_) {
    try {
      all_gone = backend->dispose_kind(key, kind, instance_id) && all_gone;
    } catch (const std::exception& error) {
      spdlog::warn("dispose_kind on backend '{}' failed: {}", backend->name(),
                   error_detail(error));
      all_gone = false;
    } catch (...) {
      all_gone = false;
    }
  }
  return all_gone;
}

int SandboxRouter::dispose_scope(std::string_view scope,
                                 std::optional<std::string_view> thread_id) noexcept {
  int disposed = 0;
  for (const auto& backend : backends_) {
    try {
      disposed += backend->dispose_scope(scope, thread_id);
    } catch (const std::exception& error) {
      spdlog::warn("dispose_scope on backend '{}' failed: {}", backend->name(),
                   error_detail(error));
    } catch (...) {
      spdlog::warn("dispose_scope on backend '{}' failed", backend->name());
    }
  }
  return disposed;
}

ScopeGuard SandboxRouter::scope(std::string scope, std::string thread_id, ScopeDisposal& out) {
  out.disposed = 0;
  return ScopeGuard(this, std::move(scope), std::move(thread_id), &out);
}

ScopeGuard::ScopeGuard(SandboxRouter* router, std::string scope, std::string thread_id,
                       ScopeDisposal* out)
    : router_(router), scope_(std::move(scope)), thread_id_(std::move(thread_id)), out_(out) {}

ScopeGuard::ScopeGuard(ScopeGuard&& other) noexcept
    : router_(std::exchange(other.router_, nullptr)),
      scope_(std::move(other.scope_)),
      thread_id_(std::move(other.thread_id_)),
      out_(other.out_) {}

ScopeGuard::~ScopeGuard() {
  if (router_ == nullptr) return;
  out_->disposed = router_->dispose_scope(scope_, thread_id_);
}

int SandboxPurger::purge_scoped_thread(std::string_view scope,
                                       std::string_view thread_id) noexcept {
  const int count = router_.dispose_scope(scope, thread_id);
  if (count > 0) spdlog::info("purged {} sandbox(es) of a deleted conversation", count);
  return count;
}

}  // namespace airlock
