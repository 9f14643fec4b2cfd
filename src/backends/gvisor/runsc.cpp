#include "backends/gvisor/runsc.hpp"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <random>

#include "airlock/errors.hpp"
#include "airlock/json.hpp"

#ifndef AIRLOCK_LIBEXEC_DIR
#define AIRLOCK_LIBEXEC_DIR "/usr/local/libexec/airlock"
#endif

namespace airlock::gvisor_backend {
namespace {

bool executable(const std::filesystem::path& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode) &&
         ::access(path.c_str(), X_OK) == 0;
}

void locate_marker() {}

}  // namespace

std::filesystem::path locate_runsc(const std::filesystem::path& configured) {
  if (!configured.empty()) {
    if (executable(configured)) return configured;
    throw BackendNotInstalled("runsc was not found",
                              "runsc_path " + configured.string() + " is not an executable file");
  }
  if (const char* path = std::getenv("PATH"); path != nullptr) {
    std::string list = path;
    std::size_t start = 0;
    while (start <= list.size()) {
      const auto end = list.find(':', start);
      const std::string directory =
          list.substr(start, end == std::string::npos ? end : end - start);
      if (!directory.empty() && executable(std::filesystem::path(directory) / "runsc")) {
        return std::filesystem::path(directory) / "runsc";
      }
      if (end == std::string::npos) break;
      start = end + 1;
    }
  }
  if (executable("/usr/bin/runsc")) return "/usr/bin/runsc";
  throw BackendNotInstalled("runsc (gVisor) is not installed on this host",
                            "no runsc on PATH nor at /usr/bin/runsc; install the `runsc` package "
                            "(scripts/bootstrap --test installs it from bookworm-backports)");
}

std::filesystem::path locate_guest_helper(const std::filesystem::path& configured) {
  constexpr const char* kName = "airlock-gvisor-guest";
  if (!configured.empty()) {
    if (executable(configured)) return configured;
    throw BackendError("the gvisor backend's guest helper was not found",
                       "guest_helper_path " + configured.string() + " is not an executable file");
  }
  std::vector<std::filesystem::path> candidates;
  if (const char* from_environment = std::getenv("AIRLOCK_GVISOR_GUEST");
      from_environment != nullptr && *from_environment != '\0') {
    candidates.emplace_back(from_environment);
  }
  std::error_code ignored;
  Dl_info library{};
  if (::dladdr(reinterpret_cast<void*>(&locate_marker), &library) != 0 &&
      library.dli_fname != nullptr) {
    const auto directory = std::filesystem::absolute(library.dli_fname, ignored).parent_path();
    candidates.push_back(directory / kName);
    candidates.push_back(directory / ".." / "libexec" / "airlock" / kName);
  }
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ignored);
  if (!self.empty()) candidates.push_back(self.parent_path() / kName);
  candidates.emplace_back(std::string(AIRLOCK_LIBEXEC_DIR) + "/" + kName);
  std::string looked;
  for (const auto& candidate : candidates) {
    if (executable(candidate)) return candidate.lexically_normal();
    looked += (looked.empty() ? "" : ", ") + candidate.string();
  }
  throw BackendError("the gvisor backend's guest helper (airlock-gvisor-guest) was not found",
                     "looked in: " + looked + " (set guest_helper_path or AIRLOCK_GVISOR_GUEST)");
}

namespace {

// Members read by hand: nlohmann's value() with a default trips -Wnull-dereference here.
std::string string_member(const json::Json& object, const char* name) {
  const auto found = object.find(name);
  return found != object.end() && found->is_string() ? found->get<std::string>() : std::string();
}

long long_member(const json::Json& object, const char* name) {
  const auto found = object.find(name);
  return found != object.end() && found->is_number_integer() ? found->get<long>() : 0L;
}

}  // namespace

Runsc::Runsc(std::filesystem::path binary, std::filesystem::path root,
             std::chrono::milliseconds timeout)
    : binary_(std::move(binary)), root_(std::move(root)), timeout_(timeout) {}

std::vector<std::string> Runsc::command(const std::vector<std::string>& arguments) const {
  std::vector<std::string> argv = {binary_.string(), "--root=" + root_.string()};
  // For operators chasing a failed start: runsc's own debug logs, one file per command.
  if (const char* debug = std::getenv("AIRLOCK_RUNSC_DEBUG_DIR"); debug != nullptr && *debug) {
    argv.push_back("--debug");
    argv.push_back("--debug-log=" + std::string(debug) + "/");
  }
  argv.insert(argv.end(), arguments.begin(), arguments.end());
  return argv;
}

Completed Runsc::call(const std::vector<std::string>& arguments) const {
  return run_to_completion(command(arguments), timeout_);
}

std::vector<RunscContainer> Runsc::list() const {
  const Completed listed = call({"list", "--format=json"});
  if (listed.exit_code != 0) {
    throw BackendError(
        "runsc could not list its containers",
        "runsc list: exit " + std::to_string(listed.exit_code) + ": " + listed.stderr_text);
  }
  std::vector<RunscContainer> containers;
  const auto text = listed.stdout_text;
  if (text.find_first_not_of(" \n\t") == std::string::npos) return containers;
  const json::Json parsed = json::Json::parse(text, nullptr, false);
  if (!parsed.is_array()) return containers;  // "null" when there are none
  for (const auto& entry : parsed) {
    RunscContainer container;
    if (!entry.is_object()) continue;
    container.id = string_member(entry, "id");
    container.status = string_member(entry, "status");
    container.pid = long_member(entry, "pid");
    if (!container.id.empty()) containers.push_back(std::move(container));
  }
  return containers;
}

std::optional<RunscContainer> Runsc::state(const std::string& id) const {
  const Completed answered = call({"state", id});
  if (answered.exit_code != 0) return std::nullopt;
  const json::Json parsed = json::Json::parse(answered.stdout_text, nullptr, false);
  if (!parsed.is_object()) return std::nullopt;
  return RunscContainer{id, string_member(parsed, "status"), long_member(parsed, "pid")};
}

bool Runsc::may_know(const std::string& id) const {
  std::error_code error;
  std::filesystem::directory_iterator entries(root_, error);
  if (error) return error != std::errc::no_such_file_or_directory;
  for (const auto& entry : entries) {
    if (entry.path().filename().string().find(id) != std::string::npos) return true;
  }
  return false;
}

bool Runsc::destroy(const std::string& id) const {
  if (!may_know(id)) return true;  // nothing to delete: runsc would only say so, slowly
  call({"delete", "--force", id});
  return !may_know(id) || !state(id).has_value();
}

}  // namespace airlock::gvisor_backend
