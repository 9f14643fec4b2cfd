// Conformance suites: probes that plant a hostile layout through a sandbox's public surface and
// attack it, so every backend is held to the same reading of the protocol.
//
//   suite          gate          what it proves
//   files_out      files_out     stat/read/list never follow a link (in the path, as the
//                                target, as the working directory or one of its ancestors);
//                                a file as a parent is NotADirectory, not an escape
//   files_in       files_in      bytes survive, writes replace, parents are created, and no
//                                write lands outside or through a link
//   exec           exec          argv is never re-parsed, exit codes and the working directory
//                                are faithful, a timeout raises Timeout in time
//   files_delete   files_delete  a link is removed, never followed (also inside a recursive
//                                removal); `recursive` is a word the caller says; the working
//                                directory is refused
//   egress         exec          an allowlist is enforced: the allowed host answers, the denied
//                                one does not
//   isolation      exec,         from INSIDE the guest, with airlock-isolation-probe: what the
//                  files_in      declared rung promises (no host process, capability, device or
//                                socket in reach; seccomp; read-only kernel interfaces; closed
//                                egress; no other sandbox in reach; pools a guest cannot drain
//                                for the host or another sandbox). Gated by the declared rung
//                                (below `container` every probe is skipped) and egress modes.
//
// Gating, as the seeds require:
//   - a suite run against a subject whose capabilities lack its gate is refused with
//     InvalidArgument: a green run that attacked nothing is worse than no run;
//   - a probe needing a capability *besides* the gate (files_list within files_out, exec for
//     the race probes) is skipped, and the skip is reported with its reason;
//   - the exec suite never skips.
//   - a probe that raises anything but its own assertion fails with "raised <Type>: <message>";
//   - every probe runs, whatever failed before it.
// A measurement (RunOptions::measure; `measure_files_delete_probes` for the delete suite) runs
// the same probes with no gate, no skips and no verdict, so a mechanism can be measured before
// its capability is declared.
//
// Each probe is named as the property it proves. The reference's probes come first, in the
// reference's order; airlock adds probes where its backends promise more (races, FIFOs, hard
// links, NUL bytes, overlong paths, output floods, bytes that are not UTF-8) — `reference` is
// false on those. Every probe runs even after others failed. `run_*` returns one result per
// probe; `assert_*` also throws ConformanceFailure naming every failed probe and why.
//
// The exec suite may destroy the sandbox (some providers discard it on a timeout): run it last.
// The suites write under the working directory and its sibling `<work>-outside`, and leave
// what they planted behind; run them against a fresh sandbox.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "airlock/backend.hpp"
#include "airlock/errors.hpp"
#include "airlock/sandbox.hpp"

namespace airlock::conformance {

using namespace std::chrono_literals;

// What the isolation suite holds a backend to: the rung and egress modes it declares, the posture
// the subject's sandbox was acquired with, and the guest directories of unix-socket channels the
// backend declares besides `Sandbox::socket_channel()` (an allowlist's egress bridge, say): a
// socket the guest reaches anywhere else fails the suite.
struct IsolationDeclarations {
  Isolation isolation = Isolation::none;
  EgressSet egress_modes;
  Egress egress = Egress::closed;
  std::vector<std::string> declared_socket_directories;
};

// What a suite attacks: a sandbox, the working directory it is attacked under, the capabilities
// its backend really declares, and how the guest plants things. Planting is the subject's job
// because making links is the guest's move — a host-side shortcut could plant what a guest
// never could, or fail to plant what it can.
class ConformanceSubject {
 public:
  virtual ~ConformanceSubject() = default;

  virtual Sandbox& sandbox() = 0;
  // Absolute and normalised.
  virtual std::string working_directory() const = 0;
  virtual CapabilitySet capabilities() const = 0;
  // How long one probe command may take.
  virtual Milliseconds exec_timeout() const { return 60s; }

  // Each plants at an absolute guest path, creating parents, and throws when it could not.
  virtual void plant_file(const std::string& absolute_path, std::string_view content) = 0;
  virtual void plant_symlink(const std::string& absolute_path, const std::string& target) = 0;
  virtual void plant_fifo(const std::string& absolute_path) = 0;
  // Throws PremiseImpossible when the layout makes a hard link impossible (e.g. the working
  // directory is on another filesystem than its sibling): the probe is then skipped.
  virtual void plant_hard_link(const std::string& absolute_path, const std::string& target) = 0;

  // The isolation suite's premises. Without declarations that suite is refused
  // (InvalidArgument). `second_sandbox` is another sandbox of the same backend and spec under
  // another conversation's key (acquired on first call, kept while the subject lives), or
  // nullptr: the probes that need one are then skipped with the reason.
  virtual std::optional<IsolationDeclarations> isolation_declarations() const {
    return std::nullopt;
  }
  virtual Sandbox* second_sandbox() { return nullptr; }
};

// Planting a probe's premise is impossible on this subject (not merely failed): the probe that
// needed it is skipped, with this message as the reason.
class PremiseImpossible : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A subject for a POSIX guest: files through `write_file` (working directory = the file's own
// directory), links and FIFOs through exec (`ln -sfn`, `ln`, `mkfifo`), run in "/" with
// absolute paths. A non-zero exit raises SystemError with the guest's words.
class PosixGuestSubject : public ConformanceSubject {
 public:
  PosixGuestSubject(Sandbox& sandbox, std::string working_directory, CapabilitySet capabilities,
                    Milliseconds exec_timeout = 60s);

  Sandbox& sandbox() override { return sandbox_; }
  std::string working_directory() const override { return working_directory_; }
  CapabilitySet capabilities() const override { return capabilities_; }
  Milliseconds exec_timeout() const override { return exec_timeout_; }
  void plant_file(const std::string& absolute_path, std::string_view content) override;
  void plant_symlink(const std::string& absolute_path, const std::string& target) override;
  void plant_fifo(const std::string& absolute_path) override;
  void plant_hard_link(const std::string& absolute_path, const std::string& target) override;

  // For the isolation suite: what the backend declares, and how to acquire the second sandbox
  // (called at most once, on first use; the caller disposes of it).
  void declare_isolation(IsolationDeclarations declarations);
  void offer_second_sandbox(std::function<std::shared_ptr<Sandbox>()> acquire);
  std::optional<IsolationDeclarations> isolation_declarations() const override;
  Sandbox* second_sandbox() override;

 private:
  void run_planting(const std::vector<std::string>& argv, const std::string& what);

  Sandbox& sandbox_;
  std::string working_directory_;
  CapabilitySet capabilities_;
  Milliseconds exec_timeout_;
  std::optional<IsolationDeclarations> isolation_;
  std::function<std::shared_ptr<Sandbox>()> acquire_second_;
  std::shared_ptr<Sandbox> second_;
  std::mutex second_mutex_;
};

// The paths every suite shares, under one working directory.
struct ConformancePaths {
  std::string work;     // normpath(wd)
  std::string outside;  // work + "-outside": a sibling sharing a string prefix

  static ConformancePaths under(std::string_view working_directory);
  // `outside/name` spelled relative to `work` ("../work-outside/name").
  std::string beyond(std::string_view name) const;
  std::string secret() const { return outside + "/secret.txt"; }
  std::string nested_secret() const { return outside + "/sub/leaf.txt"; }
  std::string inside() const { return work + "/real/inside.txt"; }
  std::string plain() const { return work + "/plain.txt"; }
  std::string linked_directory() const { return work + "/link-dir"; }
  std::string under_linked_directory() const { return work + "/link-dir/sub"; }
  std::string linked_file() const { return work + "/link-file"; }
};

// The bytes the suites plant: what must never come back, and what must.
inline constexpr std::string_view kSecret = "the guest must not reach this\n";
inline constexpr std::string_view kInside = "a legitimate output\n";
inline constexpr std::uint64_t kReadCap = 1 << 20;

// The files_out layout: files `inside`, `plain` ("not a directory\n"), `secret` and
// `nested_secret`; links `link-dir → outside` and `link-file → secret`. Public so a backend's
// own tests can check the premise (that its provider really follows links).
ConformancePaths plant_layout(ConformanceSubject& subject);

enum class ProbeOutcome { passed, failed, skipped };
std::string_view to_string(ProbeOutcome outcome) noexcept;

struct ProbeResult {
  std::string suite;
  std::string probe;
  std::string why;  // the property the probe proves
  ProbeOutcome outcome = ProbeOutcome::passed;
  std::string detail;  // what happened instead (failed), or why it was skipped
  std::string note;    // evidence a probe records, e.g. how many attacks met how many flips
  double milliseconds = 0;
  bool reference = true;  // one of the reference's probes (false: airlock's own)
  bool measured = false;  // run by a measurement: evidence, not a verdict
};

// How a run reads what the subject declares.
//   verdict (default): a suite whose gate the subject does not declare is refused
//     (InvalidArgument) — a green run that attacked nothing is worse than no run — and a probe
//     needing another undeclared capability is skipped ("backend does not declare [x]").
//   measure: no gate and no skips. Every probe runs against whatever the sandbox really does
//     (an undeclared method answers NotSupported, and that probe fails with it); each result
//     is marked `measured`, and nothing built from them raises ConformanceFailure
//     (assert_passed refuses measured results). The suite's shared layout is still planted,
//     because its probes attack it; files_in and files_delete plant nothing (their probes make
//     their own fixtures), exec and egress plant only the working directory's `.probe-cwd`.
struct RunOptions {
  bool measure = false;
  // The egress suite's premises (see run_egress_conformance); the other suites ignore them.
  std::string allowed_url;
  std::string denied_url;
  Milliseconds egress_exec_timeout = 30s;
};

// What a suite would run, for documentation and listings.
struct ProbeDescription {
  std::string suite;
  std::string probe;
  std::string why;
  CapabilitySet needs;  // every capability the probe needs, the gate included
  bool reference = true;
};
std::vector<ProbeDescription> describe_probes();

std::vector<ProbeResult> run_files_out_conformance(ConformanceSubject& subject);
std::vector<ProbeResult> run_files_in_conformance(ConformanceSubject& subject);
std::vector<ProbeResult> run_exec_conformance(ConformanceSubject& subject);
std::vector<ProbeResult> run_files_delete_conformance(ConformanceSubject& subject);
// The subject must have been acquired with egress `allowlist` allowing `allowed_url`'s host
// and not `denied_url`'s, and both URLs must answer 2xx when reached — the allowed probe is its
// own positive control. Needs `curl` in the guest.
std::vector<ProbeResult> run_egress_conformance(ConformanceSubject& subject,
                                                const std::string& allowed_url,
                                                const std::string& denied_url,
                                                Milliseconds exec_timeout = 30s);

// The isolation suite. It puts airlock-isolation-probe into the guest (write_file, then an exec
// of `chmod 0755`: a guest without chmod is a failed `install-the-probe`, never a pass), runs it
// on the host too (the host's side of each check: a marker process, planted sockets, listeners,
// an allocation while the guest holds a pool), and judges what it prints. Needs exec and
// files_in (refused otherwise, InvalidArgument) and the subject's isolation declarations; below
// `container` every probe is skipped with the reason.
struct IsolationOptions {
  std::filesystem::path probe;  // empty: locate_isolation_probe()
  // Host paths whose filesystems the disk probe watches, besides / /tmp /var/tmp /var/lib
  // /dev/shm /run (a backend's state directory, an engine's data root).
  std::vector<std::string> host_paths;
  // The disk probe's box per guest location: a location whose writes land on a host filesystem
  // must refuse the guest before this much (see docs/conformance.md).
  std::uint64_t disk_cap_bytes = 256ull << 20;
  std::uint64_t disk_cap_inodes = 20'000;
  Milliseconds fill_box{20'000};  // how long a guest may try to exhaust one pool
  Milliseconds hold_box{30'000};  // how long it holds at most (the host releases it sooner)
  // Who the host-side checks run as where root would bypass a limit (when the host is root).
  std::uint32_t unprivileged_uid = 65534;
  std::uint32_t unprivileged_gid = 65534;
  // Empty: every probe. Otherwise only the probes named here run (and are reported).
  std::vector<std::string> only;
};

// The snapshot suite (gate: `snapshot`, and the backend saying what its snapshots hold). It
// needs the backend itself, not one sandbox: it builds routers over it (the floor lowered to
// `floor`), acquires, snapshots, resumes and forks under keys of a scope of its own, and
// disposes of that scope at the end. `spec` makes the spec every sandbox runs under, with the
// egress asked for (closed, or allowlist: any host will do, nothing is reached). Probes:
// what survives a resume (files; processes too for filesystem+memory), forks that diverge,
// another conversation's keys refused, a resume judged by every router check, ids that are no
// snapshot, nothing left after dispose_scope.
struct SnapshotSuiteOptions {
  std::shared_ptr<SandboxBackend> backend;
  Isolation floor = Isolation::microvm;
  std::function<SandboxSpec(Egress)> spec;
  std::string work_dir;  // the specs' work_dir
  Milliseconds exec_timeout = 60s;
};
std::vector<ProbeResult> run_snapshot_conformance(const SnapshotSuiteOptions& options);

// The probe binary: `configured` if given (it must be executable), else $AIRLOCK_ISOLATION_PROBE,
// next to the running executable, next to libairlock, <libdir>/../libexec/airlock, the install
// prefix's libexec. Throws NotFound naming every place it looked.
std::filesystem::path locate_isolation_probe(const std::filesystem::path& configured = {});

std::vector<ProbeResult> run_isolation_conformance(ConformanceSubject& subject,
                                                   const IsolationOptions& options = {});

// A suite by name — files_out, files_in, exec, files_delete, egress — run as `options` says
// (a verdict run is exactly the run_* of that suite). An unknown name, or the egress suite
// without both URLs, is InvalidArgument.
std::vector<ProbeResult> run_conformance(ConformanceSubject& subject, std::string_view suite,
                                         const RunOptions& options = {});

// The delete suite measured (RunOptions::measure): no gate, no skips, no planting, no verdict.
std::vector<ProbeResult> measure_files_delete_probes(ConformanceSubject& subject);

// Each runs its suite and throws ConformanceFailure when any probe failed (skips are not
// failures); otherwise returns the results, so callers can assert what was skipped.
std::vector<ProbeResult> assert_files_out_conformance(ConformanceSubject& subject);
std::vector<ProbeResult> assert_files_in_conformance(ConformanceSubject& subject);
std::vector<ProbeResult> assert_exec_conformance(ConformanceSubject& subject);
std::vector<ProbeResult> assert_files_delete_conformance(ConformanceSubject& subject);
std::vector<ProbeResult> assert_egress_conformance(ConformanceSubject& subject,
                                                   const std::string& allowed_url,
                                                   const std::string& denied_url,
                                                   Milliseconds exec_timeout = 30s);
std::vector<ProbeResult> assert_isolation_conformance(ConformanceSubject& subject,
                                                      const IsolationOptions& options = {});

// Throws ConformanceFailure ("N of T conformance probes failed: …", each failed probe with
// what it proves and what happened) when any result failed; returns `results` otherwise.
// Measured results carry no verdict: InvalidArgument.
const std::vector<ProbeResult>& assert_passed(const std::vector<ProbeResult>& results);

}  // namespace airlock::conformance
