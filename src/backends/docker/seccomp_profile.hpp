// The guest seccomp policy (src/backends/guest_seccomp_policy.hpp, the linux backend's filter) as
// an engine's JSON seccomp profile: {"defaultAction", "defaultErrnoRet", "architectures",
// "syscalls": [{"names", "action", "errnoRet", "args"}]}. Docker's Engine API takes the profile
// itself as HostConfig.SecurityOpt "seccomp=<json>"; Podman's Docker-compatible service reads
// the same text from a file named there ("seccomp=<path>").
//
// The engine's runtime compiles it with libseccomp, as the linux backend does, so the families,
// the denials and the argument rules are the same. Two differences, both refusals: the profile
// names syscalls (the format has no numbers), so one the engine's libseccomp does not know
// (those past futex_requeue for libseccomp 2.5.4) answers the default ENOSYS where the linux
// backend allows or denies it by number; and the architectures the profile does not list (i386,
// x32 on x86_64) meet the runtime's bad-architecture action instead of the linux backend's kill.
#pragma once

#include <string>

#include "backends/docker/containers.hpp"

namespace airlock::docker {

// The profile, compact JSON. Built once.
const std::string& guest_seccomp_profile();

// What follows "seccomp=" in one create's SecurityOpt: the profile itself for Docker; for
// Podman a file holding it (a private temporary file, 0644, removed when this goes — Podman
// reads it while it creates the container, and it must be on the engine's own machine, as
// every unix-socket engine is).
class SeccompOption {
 public:
  explicit SeccompOption(EngineFlavour flavour);
  ~SeccompOption();
  SeccompOption(const SeccompOption&) = delete;
  SeccompOption& operator=(const SeccompOption&) = delete;
  const std::string& value() const noexcept { return value_; }

 private:
  std::string value_;
  std::string file_;
};

}  // namespace airlock::docker
