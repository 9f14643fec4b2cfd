// The protocol's vocabulary: every enum a host, a backend or a wire format speaks.
//
// Each enum has a fixed string value per member, identical on every wire (JSON, CLI flags,
// configuration). `parse_<enum>` is the only way a string becomes a member, and it refuses an
// unknown string with an `InvalidArgument` that names the allowed values. There is deliberately
// no lenient parse: a deny list that silently never matches, or a rung guessed from a stale
// spelling, would look like protection and be none.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

namespace airlock {

// The isolation ladder, weakest first. The order is data: every comparison goes through
// `isolation_rank`, never through the enumerator values' arithmetic.
//
//   none               no boundary; runs in the host process with the host's authority
//   runtime            a software boundary inside the host process (restricted interpreter, WASM)
//   os_process         a separate OS process: kernel address space, shared kernel and filesystem
//                      (the `docker` backend: its containers share host root's kernel pools)
//   container          shared-kernel namespaces and cgroups (the `linux` backend)
//   hardened_container syscall interception in a userspace kernel (gVisor)
//   microvm            a hypervisor boundary with a minimal guest — the router's default floor
//   vm                 a dedicated, full virtual machine
//
// The string "process" is refused forever: until maf-sandbox 0.14 it meant *no* boundary, and
// accepting it would promote a stale declaration two rungs.
enum class Isolation : std::uint8_t {
  none,
  runtime,
  os_process,
  container,
  hardened_container,
  microvm,
  vm,
};

// One network posture. Nothing ranks these: a backend enforces a mode or it does not.
enum class Egress : std::uint8_t {
  unrestricted,  // reach anything the host can
  allowlist,     // deny by default; allow exactly the spec's `egress_allow`
  closed,        // no network (the spec default)
};

// What a sandbox can do. `files_out` is stat+read at declared literal paths (never discovery);
// `files_list` is enumerating a directory; `files_delete` is removal; `host_tools` asserts that
// exec detaches (a process started by one call outlives it); `snapshot` is saving a sandbox's
// state and resuming or forking it (SandboxBackend::snapshot_content says what is saved).
// `attached_identity` is vocabulary only: no backend declares it.
enum class Capability : std::uint8_t {
  exec,
  run_code,
  host_tools,
  files_in,
  files_out,
  files_list,
  files_delete,
  snapshot,
  attached_identity,
};

// A guest's path grammar and argv quoting, and nothing else (not what is installed).
enum class OsFamily : std::uint8_t { posix, windows };

// The trust tier of data a host tool brings in; `untrusted` ranks below `trusted`.
enum class SourceIntegrity : std::uint8_t { untrusted, trusted };

// Whose authority a dispatched host tool exercises. `user` is declarable but refused at dispatch.
enum class Identity : std::uint8_t { app, user };

// What a guest path is. `other` covers devices, sockets, FIFOs, hard links, and links the
// backend cannot recognise; only `file` is ever read.
enum class EntryKind : std::uint8_t { file, directory, symlink, other };

// `land` is delivered to the host's sink; `consume` is parsed by the kind. Both count against caps.
enum class OutputDisposition : std::uint8_t { land, consume };

// How an output sink spells delivered names: NFC-composed (default) or byte-exact.
enum class NameNormalization : std::uint8_t { nfc, none };

// What the host-tool transport managed to do about an overrunning guest program.
enum class SignalOutcome : std::uint8_t { sent, refused, absent, unrecorded, unknown };
// Whom a sent signal reached.
enum class SignalReach : std::uint8_t { group, program, nothing };

// ---- string values -------------------------------------------------------------------------

std::string_view to_string(Isolation value) noexcept;
std::string_view to_string(Egress value) noexcept;
std::string_view to_string(Capability value) noexcept;
std::string_view to_string(OsFamily value) noexcept;
std::string_view to_string(SourceIntegrity value) noexcept;
std::string_view to_string(Identity value) noexcept;
std::string_view to_string(EntryKind value) noexcept;
std::string_view to_string(OutputDisposition value) noexcept;
std::string_view to_string(NameNormalization value) noexcept;
std::string_view to_string(SignalOutcome value) noexcept;
std::string_view to_string(SignalReach value) noexcept;

// Each throws `InvalidArgument` naming `what` (e.g. "spec.min_isolation") and the allowed values.
Isolation parse_isolation(std::string_view text, std::string_view what = "isolation");
Egress parse_egress(std::string_view text, std::string_view what = "egress");
Capability parse_capability(std::string_view text, std::string_view what = "capability");
OsFamily parse_os_family(std::string_view text, std::string_view what = "os family");
SourceIntegrity parse_source_integrity(std::string_view text,
                                       std::string_view what = "source integrity");
Identity parse_identity(std::string_view text, std::string_view what = "identity");
EntryKind parse_entry_kind(std::string_view text, std::string_view what = "entry kind");
OutputDisposition parse_output_disposition(std::string_view text,
                                           std::string_view what = "disposition");
NameNormalization parse_name_normalization(std::string_view text,
                                           std::string_view what = "normalization");
SignalOutcome parse_signal_outcome(std::string_view text, std::string_view what = "signal");
SignalReach parse_signal_reach(std::string_view text, std::string_view what = "reach");

// ---- the ladder ----------------------------------------------------------------------------

// Whether `value` is a rung of the ladder. A value cast in from outside the enumerators is not;
// the router refuses such a declaration rather than guessing which side of a floor it is on.
bool is_known_rung(Isolation value) noexcept;
// 0 (none) … 6 (vm). Precondition: `is_known_rung(value)`.
int isolation_rank(Isolation value) noexcept;
// rank(declared) >= rank(floor); false when either is not a known rung.
bool meets_floor(Isolation declared, Isolation floor) noexcept;
// "none < runtime < os_process < container < hardened_container < microvm < vm"
std::string_view isolation_ladder() noexcept;

int integrity_rank(SourceIntegrity value) noexcept;

// ---- sets ----------------------------------------------------------------------------------

// A small set of enum members, stored as bits. Iteration is in declaration order; `to_string`
// lists members sorted by their string value, which is how refusal messages name them.
template <typename E>
class EnumSet {
 public:
  constexpr EnumSet() = default;
  constexpr EnumSet(std::initializer_list<E> members) {
    for (E member : members) insert(member);
  }

  constexpr void insert(E member) { bits_ |= bit(member); }
  constexpr void erase(E member) { bits_ &= ~bit(member); }
  constexpr bool contains(E member) const { return (bits_ & bit(member)) != 0; }
  constexpr bool empty() const { return bits_ == 0; }
  constexpr std::size_t size() const { return static_cast<std::size_t>(__builtin_popcount(bits_)); }
  constexpr std::uint32_t bits() const { return bits_; }

  // Members of this set that are not in `other`.
  constexpr EnumSet minus(EnumSet other) const { return from_bits(bits_ & ~other.bits_); }
  constexpr EnumSet intersect(EnumSet other) const { return from_bits(bits_ & other.bits_); }
  constexpr EnumSet unite(EnumSet other) const { return from_bits(bits_ | other.bits_); }

  friend constexpr bool operator==(EnumSet, EnumSet) = default;

  template <typename F>
  void for_each(F&& visit) const {
    for (unsigned index = 0; index < 32; ++index) {
      if ((bits_ & (1u << index)) != 0) visit(static_cast<E>(index));
    }
  }

 private:
  static constexpr std::uint32_t bit(E member) {
    return 1u << static_cast<unsigned>(member);
  }
  static constexpr EnumSet from_bits(std::uint32_t bits) {
    EnumSet set;
    set.bits_ = bits;
    return set;
  }
  std::uint32_t bits_ = 0;
};

using CapabilitySet = EnumSet<Capability>;
using EgressSet = EnumSet<Egress>;
using OsFamilySet = EnumSet<OsFamily>;
using IdentitySet = EnumSet<Identity>;

// What a backend that declares no capabilities is read as: what every Sandbox already owes.
inline constexpr CapabilitySet kDefaultCapabilities{Capability::exec, Capability::files_in};

// "[exec, files_in]" — members sorted by string value.
std::string to_string(CapabilitySet set);
std::string to_string(EgressSet set);
std::string to_string(OsFamilySet set);
std::string to_string(IdentitySet set);

}  // namespace airlock
