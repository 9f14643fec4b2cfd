// Host baselines the bench groups compare airlock against, measured in the same run:
// plain fork+exec, the hand-rolled namespace floor, and bubblewrap.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace airlock::bench::host_baseline {

// fork + execve("/bin/true") + waitpid. Throws on failure.
void fork_exec_true();

// The physical floor of a sandbox like ours: clone into new user, pid, mount, network, ipc and
// uts namespaces, map uid 0, bind the host root read-only (recursively) into `scratch`, mount a
// fresh /proc, pivot_root into it, detach the old root, execve /bin/true; the parent waits.
// `scratch` must be an empty directory. Throws on failure (e.g. not root).
void clone_pivot_true(const std::filesystem::path& scratch);

// The bwrap binary, when installed.
std::optional<std::string> find_bwrap();
// `bwrap --ro-bind / / --unshare-all --dev /dev --proc /proc true`, waited for.
void bwrap_true(const std::string& bwrap);

// An OCI runtime (runc, crun) run one-shot the way a container engine would: a bundle made once
// from the runtime's own `spec` (its default namespaces, capabilities, seccomp-free, a cgroup
// per container), `/usr` bound read-only into an empty root with the usual links, `/bin/true`
// as the process; `run` creates, starts, waits for and deletes one container.
class OciPeer {
 public:
  // nullopt, with `why` set, when `runtime` is not installed or cannot run a container here
  // (one probing run is made: crun, for instance, refuses a hybrid cgroup hierarchy).
  static std::optional<OciPeer> prepare(const std::string& runtime,
                                        const std::filesystem::path& scratch, std::string& why);
  void run_true();
  const std::string& name() const { return name_; }

 private:
  OciPeer(std::string name, std::string binary, std::filesystem::path bundle)
      : name_(std::move(name)), binary_(std::move(binary)), bundle_(std::move(bundle)) {}
  std::string name_;
  std::string binary_;
  std::filesystem::path bundle_;
  unsigned long next_ = 0;
};

}  // namespace airlock::bench::host_baseline
