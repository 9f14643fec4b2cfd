// An in-process backend for tests: a policy fixture whose every declaration can be overridden,
// and an in-memory sandbox that applies the same confinement rules as a real one.
//
// Never for production: it declares `Isolation::none` by default because it draws no boundary,
// and it can be told to declare any rung. So it is not part of libairlock nor of its installed
// headers: it is the test library `airlock::testing` (tests/support/testing_backend), built with
// the tests. A test program links it, and then — only then — `make_backend("testing", …)` and
// router documents know the type {"type": "testing", "isolation": …, "egress_modes": […],
// "capabilities": […], "os_families": […], "limits": {…}, "unemulated_commands": …}. Python
// tests get the same with `import airlock.testing`.
//
// The in-memory sandbox stores a filesystem (files, directories, links with targets, FIFOs,
// hard links, owner permission bits) and answers every Sandbox method against it with the
// shared guest-path rules, so a seeded link in a parent is refused exactly as on `linux`. Like a
// guest kernel it refuses a name over 255 bytes or a path of 4096 bytes or more (ENAMETOOLONG).
// A hard link is reported by the file plane as `other` and never read.
//
// `exec` runs a small POSIX shell over that same filesystem (see emulator.hpp beside it): what
// the conformance suites, the shell roads and the tree's tests run against it, and no more.
// `sh -c SCRIPT [ARG0 ARG…]` (or one command as an argv) where every command is one of
//   printf FORMAT [ARG…] (%s; \n and \NNN escapes) · echo [ARG…] · cat [FILE…|-] ·
//   test -e|-f|-d|-L|-h|-r|-w|-x PATH · pwd · sleep SECONDS · ln [-sfn] TARGET LINK ·
//   mkdir [-p] DIR… · rm [-frR] PATH… · mv [-f] SOURCE DEST (DEST not a directory) ·
//   mkfifo PATH… · chmod OCTAL PATH… · base64 [-d] (stdin) · wc -c (stdin) ·
//   head -c N /dev/zero · ls [-A] [PATH…] · true · false · : · exit N
// with '…' and "…" quoting, "$0"…"$9" and "$$" inside double quotes, `;` and newlines, &&, |,
// and redirections > >> < >&M (/dev/null and /dev/zero exist). Links resolve inside the
// emulated filesystem the way a guest's kernel resolves them; the guest is an unprivileged user
// owning every node (so `chmod 000` makes a file unreadable to it); reading a FIFO blocks until
// the caller's timeout; `sleep` honours the timeout and raises Timeout; the output ceiling of a
// bounded exec is enforced. An option of these commands that is not listed fails with exit 2
// and says it is not emulated. A command line using any other command or syntax is not run at
// all: it is answered from the scripted `outputs` (a marker matched as a substring of the
// POSIX-quoted command line), or `default_stdout` with exit code 0 (or exit 127, "not found",
// with `unemulated_not_found`) — recorded either way.
//
// exec, as the reference fake's: it records the command, then throws `raises` if set, then
// answers from the first scripted marker found in the command line, and only then emulates
// (or falls back to `default_stdout`). run_code records, raises, matches markers against the
// program text, and otherwise answers `default_stdout`.
//
// The exec contract's live parts, as far as an interpreter that runs all at once can go: a
// `terminal` is refused (NotSupported) before anything is recorded; `stdin_fd` is read to its
// end of file (within the timeout) and fed as `stdin_bytes`; `on_output` receives the collected
// output when the command ends (a Timeout's partial output too, the error's bytes left empty);
// a signal queued on `control` whose default action ends a process (SIGINT, SIGTERM, SIGHUP,
// SIGKILL, …) ends an emulated command — at its next command or during `sleep` — with
// 128 + its number and `term_signal` set; SIGWINCH, SIGCONT and resizes are taken and ignored.
//
// Faults a host's tests script, to drive their own failure paths (each settable in the options,
// at run time through the setters below, from a router document's "testing" backend fields, and
// from Python through airlock.testing):
//   - a stat that misreports a file's size, or reports none (stat_file and list_dir);
//   - a read that hangs until released or until its bound passes (then Timeout);
//   - an exec / run_code that throws a chosen error (`raises`);
//   - an acquire that throws (`acquire_error`), a disposal that fails (`dispose_fails`: nothing
//     is removed, dispose_kind answers false, dispose_scope counts 0);
//   - scripted answers per marker, and the logs: commands (command, working directory,
//     timeout), programs, and the backend's acquired keys and specs, disposals and purges.
//
// Snapshots (one sandbox per key only: the shared sandbox belongs to no conversation). A
// sandbox's snapshot() copies its filesystem — every node, with its mode — into the backend's
// memory, labelled with the conversation of the key it was acquired for; acquire_from_snapshot
// makes a new sandbox (a fresh instance id) holding a copy of that filesystem, after disposing
// of the live sandbox of (key, kind, posture); find/list/delete_snapshot read and change that
// memory, and dispose_scope and purge_all take a conversation's (every) snapshot with its
// sandboxes. The backend declares what it is told — `snapshot_content` (nullopt: none, the
// default) and `snapshot` among `capabilities` — and takes snapshots whatever it declares: the
// router is what refuses a spec requiring `snapshot` of a backend that does not declare it.
// Nothing survives the process (the backend's "durable state" is its memory). Like a real
// backend's, a snapshot is taken between commands: snapshot() while an exec or run_code of the
// sandbox is running is refused (BackendError), and so is an exec or run_code while a snapshot
// is being taken (`snapshot_duration` makes one last) — SandboxRouter::snapshot's exclusive
// call is what keeps them apart. list_sandboxes lists the live sandboxes of a backend with one
// sandbox per key, with their labels (sandbox_labels) and posture, state "running".
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "airlock/backend.hpp"
#include "airlock/sandbox.hpp"

namespace airlock::testing {

struct SnapshotShelf;  // the backend's snapshots and what it knows of its sandboxes (in_process.cpp)

// An airlock error of the kind named by its wire type ("Timeout", "BackendError",
// "SandboxTransferCapExceeded", …) carrying `message`, for a fault to throw later. A Timeout
// says nothing of a kill (a guest that did not answer); the other kinds are the error table's
// examples. Throws InvalidArgument for a type that is not a concrete airlock error kind.
std::exception_ptr scripted_error(std::string_view type, const std::string& message);

struct RecordedCommand {
  std::string command;  // POSIX-quoted for an argv
  std::string working_directory;
  Milliseconds timeout;
};

struct RecordedProgram {
  std::string code;
  Milliseconds timeout;
};

// One node planted when a sandbox is made (absolute path; parents become directories).
struct SeedEntry {
  std::string path;
  EntryKind kind = EntryKind::file;
  std::string content;  // a file's bytes, or a link's target
};

struct InProcessSandboxOptions {
  // marker → the answer, tried in order: the first marker that is a substring of the command
  // line (of the program, for run_code) answers it.
  std::vector<std::pair<std::string, ExecResult>> outputs;
  std::exception_ptr raises;  // thrown by every exec / run_code when set (after recording)
  std::string default_stdout;
  std::string instance_id = "in-process-1";
  // Emulate the POSIX vocabulary above (on by default); off = purely scripted answers.
  bool emulate_commands = true;
  // What a command the emulator does not run gets when no scripted marker matches it: false
  // (default) — `default_stdout` with exit code 0, a scripted fixture; true — exit 127 and
  // "not found" on stderr, as in a guest that lacks the command (what a conformance run needs:
  // a probe's command that silently "succeeds" could make its attack a no-op).
  bool unemulated_not_found = false;
  // stat_file and list_dir report this size for the path (absolute) instead of the real one;
  // nullopt reports none (a size the backend cannot know).
  std::map<std::string, std::optional<std::uint64_t>> stat_sizes;
  // read_file of these paths (absolute) hangs until release_reads(), then reads; or until
  // `read_hang_bound` passes, then throws Timeout — a hung read never hangs a test forever.
  std::set<std::string> hanging_reads;
  Milliseconds read_hang_bound{5'000};
  std::vector<SeedEntry> seeds;
};

class InProcessSandbox : public Sandbox {
 public:
  explicit InProcessSandbox(InProcessSandboxOptions options = {}, SandboxKey key = {},
                            std::string kind = "in-process");

  // ---- seeding (absolute guest paths; parents are created as directories) -------------------
  void seed_file(const std::string& path, std::string content);
  void seed_directory(const std::string& path);
  void seed_symlink(const std::string& path, std::string target);
  void seed_other(const std::string& path);  // a FIFO, device or socket stand-in
  // Owner permission bits as the emulated guest sees them (files 0644, directories 0755 by
  // default). The file plane acts with host authority and ignores them, as real backends do.
  void set_mode(const std::string& path, unsigned mode);

  void seed(const SeedEntry& entry);

  // ---- faults, at run time (see the options) -----------------------------------------------
  void script_output(std::string marker, ExecResult answer);
  void set_default_stdout(std::string stdout_bytes);
  void set_exec_error(std::exception_ptr error);  // nullptr: exec answers again
  void misreport_size(const std::string& path, std::optional<std::uint64_t> size);
  void report_true_sizes();
  void hang_reads(const std::string& path, Milliseconds bound);
  // Every hung read goes on (and reads), and no read hangs any more.
  void release_reads();
  // How many reads are hanging right now (so a test can wait for one to be stuck).
  int hanging_reads() const;

  // ---- inspection --------------------------------------------------------------------------
  std::optional<std::string> contents(const std::string& path) const;
  bool exists(const std::string& path) const;
  // How many exec / run_code calls are running in this sandbox right now.
  int commands_running() const;
  std::optional<EntryKind> kind_of(const std::string& path) const;
  std::vector<RecordedCommand> commands() const;
  std::vector<RecordedProgram> programs() const;

  // ---- Sandbox -----------------------------------------------------------------------------
  std::string instance_id() const override { return options_.instance_id; }
  const SandboxKey& key() const override { return key_; }
  const std::string& kind() const override { return kind_; }
  void write_file(std::string_view path, std::string_view content,
                  std::string_view working_directory) override;
  ExecResult exec(const Command& command, const ExecOptions& options) override;
  ExecResult run_code(std::string_view code, Milliseconds timeout) override;
  std::optional<SandboxEntry> stat_file(std::string_view path,
                                        std::string_view working_directory) override;
  std::string read_file(std::string_view path, std::string_view working_directory,
                        std::uint64_t max_bytes) override;
  std::vector<SandboxEntry> list_dir(std::string_view path,
                                     std::string_view working_directory) override;
  void remove(std::string_view path, std::string_view working_directory, bool recursive) override;
  // Saves this sandbox's filesystem with its backend (see the header comment). NotSupported for
  // a sandbox no backend with one sandbox per key made; BackendError while a command runs.
  SnapshotRecord snapshot() override;

  // The command emulator (emulator.hpp) — internal, not part of the test API.
  class Emulator;

 private:
  struct Node {
    EntryKind kind = EntryKind::directory;
    std::string content;  // files
    std::string target;   // symlinks: the link text; hard links: the shared file's path
    unsigned mode = 0755;
    bool hard_link = false;  // kind `other`: a second name of the file at `target`
  };
  friend class Emulator;
  friend class InProcessSandboxBackend;
  friend struct SnapshotShelf;

  // Counts a command as running for its lifetime; refuses it while a snapshot is being taken.
  class Running;

  std::optional<EntryKind> lstat_kind(const std::string& absolute) const;  // caller holds mutex_
  void make_parents(const std::string& absolute);                          // caller holds mutex_
  void seed_locked(const SeedEntry& entry);                                // caller holds mutex_
  // The size stat and list report for a file (its own, unless a fault says otherwise).
  std::optional<std::uint64_t> reported_size(const std::string& absolute,
                                             std::uint64_t real) const;  // caller holds mutex_
  // Waits out a scripted hang on `absolute`; throws Timeout at its bound.
  void wait_out_hang(std::unique_lock<std::mutex>& lock, const std::string& absolute,
                     std::string_view path);
  // The scripted answer for `text`, if a marker matches (caller holds mutex_).
  std::optional<ExecResult> scripted_answer(std::string_view text) const;
  // exec before streaming: the whole result, handed to `on_output` (if set) by `exec`.
  ExecResult exec_collected(const Command& command, const ExecOptions& options);

  InProcessSandboxOptions options_;  // the scripted fields change under mutex_
  SandboxKey key_;
  std::string kind_;
  mutable std::mutex mutex_;
  std::condition_variable reads_released_;
  std::uint64_t release_generation_ = 0;
  int hanging_now_ = 0;
  std::map<std::string, Node> nodes_;  // absolute path → node; "/" is implicit
  int running_ = 0;                    // exec / run_code calls in flight
  bool capturing_ = false;             // a snapshot is being taken
  std::weak_ptr<SnapshotShelf> shelf_;  // set by the backend that made it (one per key)
  std::vector<RecordedCommand> commands_;
  std::vector<RecordedProgram> programs_;
};

struct InProcessBackendOptions {
  std::string name = "in-process";
  Isolation isolation = Isolation::none;
  std::optional<EgressSet> egress_modes = EgressSet{Egress::allowlist, Egress::closed};
  std::optional<CapabilitySet> capabilities;  // nullopt: silent (read as the default set)
  std::optional<SandboxLimits> limits;
  std::optional<OsFamilySet> os_families;
  std::exception_ptr acquire_error;  // thrown by acquire (nothing recorded) when set
  // What dispose_scope reports. Unset: 1 for the shared sandbox (the reference fake's count),
  // how many went for sandboxes per key.
  std::optional<int> purge_count;
  // A disposal that fails: dispose, dispose_kind and dispose_scope record the attempt and
  // remove nothing; dispose_kind answers false and dispose_scope counts 0.
  bool dispose_fails = false;
  // false (the reference fake): one sandbox answers every key and kind. true: one per
  // (key, kind, egress posture), like a real backend, with fresh instance ids after dispose.
  bool sandbox_per_key = false;
  // What its snapshots are declared to hold (snapshot_content()); nullopt declares none. It
  // takes them either way (the record says `filesystem` when nothing is declared).
  std::optional<SnapshotContent> snapshot_content;
  // How long taking a snapshot lasts (the sandbox frozen meanwhile: its commands are refused).
  Milliseconds snapshot_duration{0};
  InProcessSandboxOptions sandbox;
};

class InProcessSandboxBackend : public SandboxBackend {
 public:
  explicit InProcessSandboxBackend(InProcessBackendOptions options = {});

  std::string name() const override { return options_.name; }
  Isolation isolation() const override { return options_.isolation; }
  std::optional<EgressSet> egress_modes() const override { return options_.egress_modes; }
  std::optional<CapabilitySet> capabilities() const override { return options_.capabilities; }
  std::optional<SandboxLimits> limits() const override { return options_.limits; }
  std::optional<OsFamilySet> os_families() const override { return options_.os_families; }

  std::shared_ptr<Sandbox> acquire(const SandboxKey& key, const SandboxSpec& spec) override;
  void dispose(const SandboxKey& key) noexcept override;
  bool dispose_kind(const SandboxKey& key, std::string_view kind,
                    std::optional<std::string_view> instance_id) noexcept override;
  int dispose_scope(std::string_view scope,
                    std::optional<std::string_view> thread_id) noexcept override;
  std::vector<SandboxRecord> list_sandboxes() override;
  // Every live sandbox and every snapshot go; how many sandboxes went.
  int purge_all() noexcept override;

  // ---- snapshots (see the header comment) ----------------------------------------------------
  std::optional<SnapshotContent> snapshot_content() const override;
  std::shared_ptr<Sandbox> acquire_from_snapshot(const SandboxKey& key, const SandboxSpec& spec,
                                                 const SnapshotRecord& snapshot) override;
  std::optional<SnapshotRecord> find_snapshot(std::string_view id) override;
  std::vector<SnapshotRecord> list_snapshots() override;
  bool delete_snapshot(std::string_view id) noexcept override;
  void set_snapshot_content(std::optional<SnapshotContent> content);
  void set_snapshot_duration(Milliseconds duration);

  // The shared sandbox (sandbox_per_key = false), created on construction.
  const std::shared_ptr<InProcessSandbox>& sandbox() const { return shared_; }
  // Every sandbox handed out and not disposed of (the shared one, or one per key).
  std::vector<std::shared_ptr<InProcessSandbox>> live_sandboxes() const;

  // ---- faults, at run time -----------------------------------------------------------------
  void set_acquire_error(std::exception_ptr error);  // nullptr: acquire answers again
  void set_dispose_fails(bool fails);
  void set_purge_count(std::optional<int> count);

  std::vector<SandboxKey> keys() const;
  std::vector<SandboxSpec> specs() const;
  std::vector<SandboxKey> disposed() const;
  std::vector<std::string> disposed_instances() const;
  std::vector<std::pair<SandboxKey, std::string>> disposed_kinds() const;  // (key, kind)
  std::vector<std::pair<std::string, std::optional<std::string>>> purged() const;
  std::vector<std::string> resumed_snapshots() const;  // ids, in the order resumed
  std::vector<std::string> deleted_snapshots() const;  // ids delete_snapshot was asked for

 private:
  using LiveMap =
      std::map<std::tuple<SandboxKey, std::string, std::string>, std::shared_ptr<InProcessSandbox>>;
  // A new sandbox for (key, spec) in its slot, known to the shelf (caller holds mutex_).
  std::shared_ptr<InProcessSandbox> make_sandbox_locked(const SandboxKey& key,
                                                        const SandboxSpec& spec);
  // Removes a live sandbox and what the shelf knows of it (caller holds mutex_).
  LiveMap::iterator forget_locked(LiveMap::iterator slot);

  InProcessBackendOptions options_;
  std::shared_ptr<InProcessSandbox> shared_;
  std::shared_ptr<SnapshotShelf> shelf_;
  mutable std::mutex mutex_;
  LiveMap live_;
  int next_instance_ = 1;
  std::vector<std::string> resumed_snapshots_;
  std::vector<std::string> deleted_snapshots_;
  std::vector<SandboxKey> keys_;
  std::vector<SandboxSpec> specs_;
  std::vector<SandboxKey> disposed_;
  std::vector<std::string> disposed_instances_;
  std::vector<std::pair<SandboxKey, std::string>> disposed_kinds_;
  std::vector<std::pair<std::string, std::optional<std::string>>> purged_;
};

}  // namespace airlock::testing
