// The protocol's records: what a host asks for, what a backend declares, what comes back.
//
// Bytes are carried in `std::string` (binary-safe); text views are decoded separately and say so.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "airlock/vocabulary.hpp"

namespace airlock {

// The one sandbox a caller may reach: (scope, thread, agent directory). Every component comes
// from the host's request context — never from a model, because a key a caller can supply is a
// key a model can supply, and that lets one conversation address another's sandbox.
struct SandboxKey {
  std::string scope;
  std::string thread_id;
  std::string agent_dir;

  friend bool operator==(const SandboxKey&, const SandboxKey&) = default;
  friend auto operator<=>(const SandboxKey&, const SandboxKey&) = default;
};

// Caps on one direction of transfer. A byte ceiling alone does not bound a collection: ten
// thousand files one byte under the per-file cap cost what the cap was written to prevent, so
// all three legs are load-bearing.
struct TransferLimits {
  std::uint64_t max_bytes_per_file = 0;
  std::uint64_t max_total_bytes = 0;
  std::uint64_t max_files = 0;

  // Every leg ≤ the ceiling's leg.
  bool within(const TransferLimits& ceiling) const noexcept {
    return max_bytes_per_file <= ceiling.max_bytes_per_file &&
           max_total_bytes <= ceiling.max_total_bytes && max_files <= ceiling.max_files;
  }
  friend bool operator==(const TransferLimits&, const TransferLimits&) = default;
};

// 8 MiB per file, 32 MiB in total, 64 files — the spec default and a silent backend's ceiling.
inline constexpr TransferLimits kDefaultTransferLimits{8u << 20, 32u << 20, 64};

// A backend's ceilings, one per direction. A spec whose caps exceed them is refused, never clamped.
struct SandboxLimits {
  TransferLimits files_in = kDefaultTransferLimits;
  TransferLimits files_out = kDefaultTransferLimits;
  friend bool operator==(const SandboxLimits&, const SandboxLimits&) = default;
};
inline constexpr SandboxLimits kDefaultSandboxLimits{};

// One artifact a workload promises, named as a literal POSIX path relative to `work_dir` (never a
// glob: discovery is `files_list`'s business). `name` is the spelling it lands under (defaults to
// `path`); `media_type` is declared by the kind, never sniffed from guest bytes; `required=false`
// says absence is a normal outcome.
struct DeclaredOutput {
  std::string path;
  OutputDisposition disposition = OutputDisposition::land;
  std::optional<std::string> media_type;
  bool required = true;
  std::optional<std::string> name;

  const std::string& delivered_name() const { return name ? *name : path; }
  friend bool operator==(const DeclaredOutput&, const DeclaredOutput&) = default;
};

// Resource ceilings for one sandbox. Unset legs take the backend's configured defaults (which
// are safe: e.g. 512 pids on `linux`). A backend that cannot enforce a leg that is set refuses
// the acquire rather than ignoring it.
struct ResourceLimits {
  std::optional<std::uint64_t> memory_bytes;
  std::optional<std::uint64_t> pids;
  std::optional<std::uint64_t> cpu_millis;  // 1000 = one CPU
  // What the guest may write in all (its work dir, /tmp, image writes, …), files and inodes; a
  // backend that cannot bound it refuses a spec that sets it.
  std::optional<std::uint64_t> disk_bytes;
  friend bool operator==(const ResourceLimits&, const ResourceLimits&) = default;
};

inline constexpr const char* kDefaultWorkDir = "/maf-sandbox/work";

// What a sandbox of one *kind* needs. Built from `SandboxSpec::Fields` and validated once:
//
//   SandboxSpec spec({.kind = "codeact", .image = "host",
//                     .egress_allow = {"pypi.org"}, .egress = Egress::allowlist});
//
// Construction refuses (InvalidArgument): an empty kind; a host list (`egress_allow`) without
// `egress = allowlist` — the list is the payload of an allowlist run, so it cannot ride on any
// other mode; a blank host entry or one containing whitespace or a comma; a `work_dir` with a
// NUL, or one that is not an absolute POSIX path free of backslashes. A POSIX `work_dir` is kept
// normalised ('.', '..', doubled and trailing slashes resolved lexically), so every reader
// compares one spelling.
//
// The one exception is a spec asking for the windows family (`requires_os_family = windows`):
// its `work_dir` may instead be a Windows drive path ("C:/work", "D:\work"), kept exactly as
// written — a POSIX normalisation would corrupt it. No backend here hands out windows guests, so
// the router refuses such a spec (OsFamilyNotSupported) before any file plane sees the path.
// Nothing else is judged here: the router judges the backend against the spec.
class SandboxSpec {
 public:
  struct Fields {
    std::string kind;
    std::optional<std::string> image;     // opaque reference the backend resolves
    std::optional<std::string> image_id;  // backend-native pinned id; skips resolution
    std::vector<std::string> egress_allow;
    std::string work_dir = kDefaultWorkDir;  // guest-native; no backend creates it unasked
    std::map<std::string, std::string> labels;
    CapabilitySet required_capabilities = kDefaultCapabilities;  // JSON: "requires"
    std::optional<Isolation> min_isolation;  // may raise the host's floor, never lower it
    std::vector<DeclaredOutput> declared_outputs;
    TransferLimits files_in = kDefaultTransferLimits;
    TransferLimits files_out = kDefaultTransferLimits;
    bool outputs_named_at_call_time = false;
    IdentitySet identities;
    Egress egress = Egress::closed;
    std::optional<OsFamily> requires_os_family;
    ResourceLimits resources;  // airlock's extension; see ResourceLimits
  };

  explicit SandboxSpec(Fields fields);

  const std::string& kind() const noexcept { return fields_.kind; }
  const std::optional<std::string>& image() const noexcept { return fields_.image; }
  const std::optional<std::string>& image_id() const noexcept { return fields_.image_id; }
  const std::vector<std::string>& egress_allow() const noexcept { return fields_.egress_allow; }
  const std::string& work_dir() const noexcept { return fields_.work_dir; }
  const std::map<std::string, std::string>& labels() const noexcept { return fields_.labels; }
  CapabilitySet required_capabilities() const noexcept { return fields_.required_capabilities; }
  std::optional<Isolation> min_isolation() const noexcept { return fields_.min_isolation; }
  const std::vector<DeclaredOutput>& declared_outputs() const noexcept {
    return fields_.declared_outputs;
  }
  const TransferLimits& files_in() const noexcept { return fields_.files_in; }
  const TransferLimits& files_out() const noexcept { return fields_.files_out; }
  bool outputs_named_at_call_time() const noexcept { return fields_.outputs_named_at_call_time; }
  IdentitySet identities() const noexcept { return fields_.identities; }
  Egress egress() const noexcept { return fields_.egress; }
  std::optional<OsFamily> requires_os_family() const noexcept { return fields_.requires_os_family; }
  const ResourceLimits& resources() const noexcept { return fields_.resources; }

  // A copy of the fields, to derive a new spec: `auto f = spec.fields(); f.kind = "x";`.
  const Fields& fields() const noexcept { return fields_; }

  // "closed", or "allowlist:a.example,b.example" (hosts sorted): part of a sandbox's identity,
  // because a warm sandbox never changes its egress posture.
  std::string egress_posture() const;

 private:
  void check_work_dir();

  Fields fields_;
};

// One guest entry as a stat describes it. `path` is relative to the working directory the call
// named. `size_bytes` is unset for links and directories, and fails closed: an unknown size is
// never read as free.
struct SandboxEntry {
  std::string path;
  EntryKind kind = EntryKind::other;
  std::optional<std::uint64_t> size_bytes;
  friend bool operator==(const SandboxEntry&, const SandboxEntry&) = default;
};

// What a command produced. The program's bytes are preserved exactly; the text views decode
// them as UTF-8 with U+FFFD replacement. `exit_code` is the program's own code, or 128+N when
// it was ended by signal N (`term_signal` says which). `truncated` is set only by an exec asked
// to truncate rather than refuse past its output ceiling.
struct ExecResult {
  std::string stdout_bytes;
  std::string stderr_bytes;
  int exit_code = 0;
  std::optional<int> term_signal;
  bool truncated = false;

  std::string stdout_text() const;
  std::string stderr_text() const;
};

// One pulled file on its way to a sink. `name` is validated and already in its delivered
// spelling; `kind` is the spec's kind.
struct Artifact {
  std::string name;
  std::string content;
  std::string kind;
  std::optional<std::string> media_type;
};

// Where an artifact landed. `display` is the only text a model may see; `handle` is the host's
// own reference (it may carry a credential) and is never rendered into a transcript.
struct LandedArtifact {
  std::string name;
  std::string display;
  std::optional<std::string> handle;
};

// Filled in by `SandboxRouter::scope` once the block has ended: how many sandboxes went.
struct ScopeDisposal {
  int disposed = 0;
};

// One call-owned guest path that was not removed. A data-retention failure: the next call in the
// warm sandbox could read what was left. `path` is absolute; `reason` is the stack's own words.
struct ReclaimFailure {
  std::string tool;
  SandboxKey key;
  std::string path;
  std::string reason;
};

// What a snapshot holds: a sandbox's files (everything its guest wrote), or its files and its
// memory (its processes resume where they were).
enum class SnapshotContent : std::uint8_t { filesystem, filesystem_and_memory };
// "filesystem", "filesystem+memory".
std::string_view to_string(SnapshotContent content) noexcept;

// A sandbox's state, saved by its backend and kept in its durable state until deleted, or
// until its conversation is disposed of (dispose_scope) or the backend purged. It belongs to
// the conversation — the key's scope and thread — of the sandbox it was taken from: only a key
// of that conversation resumes or forks it (any agent_dir; a fork is a resume under another),
// and every other key is told it does not exist.
struct SnapshotRecord {
  std::string id;  // "snap-" + 24 hex digits, unguessable
  std::string backend;
  SnapshotContent content = SnapshotContent::filesystem;
  std::string kind;            // resumed only as this kind
  std::string egress_posture;  // the posture it was taken under (a resume takes its spec's)
  std::string image;           // what the sandbox ran, as the backend resolved it
  std::string work_dir;
  std::map<std::string, std::string> labels;  // airlock.scope, airlock.thread, … (mapped)
  std::string source_instance_id;
  std::uint64_t bytes = 0;  // what it takes on the host
  std::chrono::system_clock::time_point created_at{};
};

// Whether `record` belongs to `key`'s conversation (its scope and thread labels match).
bool snapshot_belongs_to(const SnapshotRecord& record, const SandboxKey& key);

// Whether `id` has the one form every backend gives a snapshot's id: "snap-" and 24 lower-case
// hex digits. Ids name files and images, so one of any other form never reaches a lookup.
bool is_snapshot_id(std::string_view id) noexcept;

// Decode bytes as UTF-8, replacing each invalid sequence with U+FFFD.
std::string decode_utf8_lossy(std::string_view bytes);

}  // namespace airlock
