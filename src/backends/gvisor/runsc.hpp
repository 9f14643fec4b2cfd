// The runsc command line, and the files this backend puts beside it: where runsc and the guest
// helper are, which platform works, and the short lifecycle calls (list, state, kill, delete).
#pragma once

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "airlock/backends/gvisor.hpp"
#include "backends/gvisor/process.hpp"

namespace airlock::gvisor_backend {

// The first `runsc` on PATH, else /usr/bin/runsc; `configured` when set. BackendError when none
// is an executable file.
std::filesystem::path locate_runsc(const std::filesystem::path& configured);
// See GvisorBackendConfig::guest_helper_path.
std::filesystem::path locate_guest_helper(const std::filesystem::path& configured);

struct RunscContainer {
  std::string id;
  std::string status;  // "created", "running", "stopped", …
  long pid = 0;
};

class Runsc {
 public:
  Runsc(std::filesystem::path binary, std::filesystem::path root,
        std::chrono::milliseconds timeout);

  const std::filesystem::path& binary() const noexcept { return binary_; }
  const std::filesystem::path& root() const noexcept { return root_; }

  // {binary, "--root=<root>", extra..., subcommand...}
  std::vector<std::string> command(const std::vector<std::string>& arguments) const;
  Completed call(const std::vector<std::string>& arguments) const;

  // Every container of this root. BackendError when runsc cannot list.
  std::vector<RunscContainer> list() const;
  // nullopt when runsc does not know the container.
  std::optional<RunscContainer> state(const std::string& id) const;
  // Whether runsc's root holds anything named after `id` (its state, lock and socket files all
  // carry the container id). False means `state(id)` would say "no such container" — the
  // cheap answer, without a runsc process (50-70 ms here). True when the root cannot be read.
  bool may_know(const std::string& id) const;
  // kill -9 everything, then delete --force; true when runsc no longer knows the id.
  bool destroy(const std::string& id) const;

 private:
  std::filesystem::path binary_;
  std::filesystem::path root_;
  std::chrono::milliseconds timeout_;
};

}  // namespace airlock::gvisor_backend
