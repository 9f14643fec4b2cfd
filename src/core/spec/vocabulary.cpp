#include "airlock/vocabulary.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "airlock/errors.hpp"

namespace airlock {
namespace {

// Member i of an enum is spelled names[i]; the tables are the single source of the wire values.
constexpr std::string_view kIsolationNames[] = {
    "none", "runtime", "os_process", "container", "hardened_container", "microvm", "vm"};
constexpr std::string_view kEgressNames[] = {"unrestricted", "allowlist", "closed"};
constexpr std::string_view kCapabilityNames[] = {
    "exec",       "run_code",     "host_tools", "files_in",         "files_out",
    "files_list", "files_delete", "snapshot",   "attached_identity"};
constexpr std::string_view kOsFamilyNames[] = {"posix", "windows"};
constexpr std::string_view kSourceIntegrityNames[] = {"untrusted", "trusted"};
constexpr std::string_view kIdentityNames[] = {"app", "user"};
constexpr std::string_view kEntryKindNames[] = {"file", "directory", "symlink", "other"};
constexpr std::string_view kDispositionNames[] = {"land", "consume"};
constexpr std::string_view kNormalizationNames[] = {"nfc", "none"};
constexpr std::string_view kSignalOutcomeNames[] = {"sent", "refused", "absent", "unrecorded",
                                                    "unknown"};
constexpr std::string_view kSignalReachNames[] = {"group", "program", "nothing"};

template <typename E, std::size_t N>
std::string_view name_of(E value, const std::string_view (&names)[N]) noexcept {
  auto index = static_cast<std::size_t>(value);
  return index < N ? names[index] : std::string_view("<unknown>");
}

template <std::size_t N>
std::string allowed_values(const std::string_view (&names)[N]) {
  std::string out;
  for (std::size_t i = 0; i < N; ++i) {
    if (i != 0) out += ", ";
    out += names[i];
  }
  return out;
}

template <typename E, std::size_t N>
E parse_member(std::string_view text, std::string_view what, const std::string_view (&names)[N]) {
  for (std::size_t i = 0; i < N; ++i) {
    if (names[i] == text) return static_cast<E>(i);
  }
  std::string message = std::string(what) + ": unknown value \"" + std::string(text) +
                        "\"; allowed: " + allowed_values(names);
  throw InvalidArgument(std::move(message), std::string(what));
}

template <typename E, std::size_t N>
std::string set_to_string(EnumSet<E> set, const std::string_view (&names)[N]) {
  std::vector<std::string_view> members;
  set.for_each([&](E member) { members.push_back(name_of(member, names)); });
  std::sort(members.begin(), members.end());
  std::string out = "[";
  for (std::size_t i = 0; i < members.size(); ++i) {
    if (i != 0) out += ", ";
    out += members[i];
  }
  return out + "]";
}

}  // namespace

std::string_view to_string(Isolation value) noexcept { return name_of(value, kIsolationNames); }
std::string_view to_string(Egress value) noexcept { return name_of(value, kEgressNames); }
std::string_view to_string(Capability value) noexcept { return name_of(value, kCapabilityNames); }
std::string_view to_string(OsFamily value) noexcept { return name_of(value, kOsFamilyNames); }
std::string_view to_string(SourceIntegrity value) noexcept {
  return name_of(value, kSourceIntegrityNames);
}
std::string_view to_string(Identity value) noexcept { return name_of(value, kIdentityNames); }
std::string_view to_string(EntryKind value) noexcept { return name_of(value, kEntryKindNames); }
std::string_view to_string(OutputDisposition value) noexcept {
  return name_of(value, kDispositionNames);
}
std::string_view to_string(NameNormalization value) noexcept {
  return name_of(value, kNormalizationNames);
}
std::string_view to_string(SignalOutcome value) noexcept {
  return name_of(value, kSignalOutcomeNames);
}
std::string_view to_string(SignalReach value) noexcept { return name_of(value, kSignalReachNames); }

Isolation parse_isolation(std::string_view text, std::string_view what) {
  if (text == "process") {
    // The pre-0.14 spelling of *no* boundary. Accepting it under any meaning would let a stale
    // declaration climb two rungs; it is refused with the reason, forever.
    throw InvalidArgument(std::string(what) +
                              ": \"process\" is not a rung (it once meant no boundary; the "
                              "separate-process rung is \"os_process\"); allowed: " +
                              allowed_values(kIsolationNames),
                          std::string(what));
  }
  return parse_member<Isolation>(text, what, kIsolationNames);
}
Egress parse_egress(std::string_view text, std::string_view what) {
  return parse_member<Egress>(text, what, kEgressNames);
}
Capability parse_capability(std::string_view text, std::string_view what) {
  return parse_member<Capability>(text, what, kCapabilityNames);
}
OsFamily parse_os_family(std::string_view text, std::string_view what) {
  return parse_member<OsFamily>(text, what, kOsFamilyNames);
}
SourceIntegrity parse_source_integrity(std::string_view text, std::string_view what) {
  return parse_member<SourceIntegrity>(text, what, kSourceIntegrityNames);
}
Identity parse_identity(std::string_view text, std::string_view what) {
  return parse_member<Identity>(text, what, kIdentityNames);
}
EntryKind parse_entry_kind(std::string_view text, std::string_view what) {
  return parse_member<EntryKind>(text, what, kEntryKindNames);
}
OutputDisposition parse_output_disposition(std::string_view text, std::string_view what) {
  return parse_member<OutputDisposition>(text, what, kDispositionNames);
}
NameNormalization parse_name_normalization(std::string_view text, std::string_view what) {
  return parse_member<NameNormalization>(text, what, kNormalizationNames);
}
SignalOutcome parse_signal_outcome(std::string_view text, std::string_view what) {
  return parse_member<SignalOutcome>(text, what, kSignalOutcomeNames);
}
SignalReach parse_signal_reach(std::string_view text, std::string_view what) {
  return parse_member<SignalReach>(text, what, kSignalReachNames);
}

bool is_known_rung(Isolation value) noexcept {
  return static_cast<std::size_t>(value) < std::size(kIsolationNames);
}

int isolation_rank(Isolation value) noexcept {
  // The declaration order of the enum *is* the ladder; this is the one place that says so.
  return static_cast<int>(value);
}

bool meets_floor(Isolation declared, Isolation floor) noexcept {
  return is_known_rung(declared) && is_known_rung(floor) &&
         isolation_rank(declared) >= isolation_rank(floor);
}

std::string_view isolation_ladder() noexcept {
  return "none < runtime < os_process < container < hardened_container < microvm < vm";
}

int integrity_rank(SourceIntegrity value) noexcept { return static_cast<int>(value); }

std::string to_string(CapabilitySet set) { return set_to_string(set, kCapabilityNames); }
std::string to_string(EgressSet set) { return set_to_string(set, kEgressNames); }
std::string to_string(OsFamilySet set) { return set_to_string(set, kOsFamilyNames); }
std::string to_string(IdentitySet set) { return set_to_string(set, kIdentityNames); }

}  // namespace airlock
