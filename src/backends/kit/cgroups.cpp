#include "backends/kit/cgroups.hpp"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "airlock/errors.hpp"
#include "base/syscall_error.hpp"
#include "base/unique_fd.hpp"

namespace airlock::backend_kit {
namespace {

int pidfd_open(pid_t pid) noexcept {
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
}

int pidfd_send_signal(int pidfd, int signal) noexcept {
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, signal, nullptr, 0));
}

std::string read_small_file(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

bool write_small_file(const std::string& path, const std::string& value, int* error = nullptr) {
  base::UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (fd && ::write(fd.get(), value.data(), value.size()) == static_cast<ssize_t>(value.size())) {
    return true;
  }
  if (error != nullptr) *error = errno;
  return false;
}

bool exists(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0;
}

bool has_word(const std::string& text, const std::string& word) {
  std::istringstream words(text);
  std::string candidate;
  while (words >> candidate) {
    if (candidate == word) return true;
  }
  return false;
}

// Sub-cgroups (the init's per-command leaves), deepest first.
void collect_children(const std::string& directory, std::vector<std::string>& out) {
  DIR* listing = ::opendir(directory.c_str());
  if (listing == nullptr) return;
  while (struct dirent* entry = ::readdir(listing)) {
    if (entry->d_type != DT_DIR) continue;
    const std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    const std::string child = directory + "/" + name;
    collect_children(child, out);
    out.push_back(child);
  }
  ::closedir(listing);
}

std::vector<pid_t> members(const std::string& directory) {
  std::vector<pid_t> pids;
  std::istringstream text(read_small_file(directory + "/cgroup.procs"));
  long pid = 0;
  while (text >> pid) pids.push_back(static_cast<pid_t>(pid));
  return pids;
}

// SIGKILL a member, through a pidfd taken *before* checking it still belongs here, so a pid
// reused by an unrelated process in between is never signalled.
void kill_member(pid_t pid, const std::string& directory) {
  base::UniqueFd process(pidfd_open(pid));
  if (!process) return;
  const std::string cgroups = read_small_file("/proc/" + std::to_string(pid) + "/cgroup");
  // The directory's path within its hierarchy, as /proc/<pid>/cgroup spells it: everything
  // after the mount point, which is the longest cgroup mount that is a prefix of it.
  std::string relative;
  std::ifstream mountinfo("/proc/self/mountinfo");
  std::string line;
  std::size_t longest = 0;
  while (std::getline(mountinfo, line)) {
    const auto separator = line.find(" - cgroup");
    if (separator == std::string::npos) continue;
    std::istringstream head(line.substr(0, separator));
    std::string id, parent, device, root, mount_point;
    head >> id >> parent >> device >> root >> mount_point;
    if (mount_point.size() > longest && directory.rfind(mount_point + "/", 0) == 0) {
      longest = mount_point.size();
      relative = directory.substr(mount_point.size());
    }
  }
  if (relative.empty()) return;
  // A whole line's path component must match (":/x/lx-1\n", not a prefix of another cgroup).
  if (cgroups.find(":" + relative + "\n") == std::string::npos &&
      cgroups.find(":" + relative + "/") == std::string::npos) {
    return;
  }
  pidfd_send_signal(process.get(), SIGKILL);
}

bool populated(const std::string& directory) {
  if (exists(directory + "/cgroup.events")) {
    return read_small_file(directory + "/cgroup.events").find("populated 1") != std::string::npos;
  }
  return !members(directory).empty();
}

}  // namespace

CgroupLayout CgroupLayout::detect(const std::vector<std::string>& delegated,
                                  const std::string& subtree) {
  CgroupLayout layout;
  layout.subtree = subtree;
  std::ifstream mountinfo("/proc/self/mountinfo");
  std::string line;
  while (std::getline(mountinfo, line)) {
    // <id> <parent> <major:minor> <root> <mount point> <options> [optional…] - <type> <source>
    // <super options>
    const auto separator = line.find(" - ");
    if (separator == std::string::npos) continue;
    std::istringstream head(line.substr(0, separator));
    std::string id, parent, device, root, mount_point;
    head >> id >> parent >> device >> root >> mount_point;
    std::istringstream tail(line.substr(separator + 3));
    std::string type, source, options;
    tail >> type >> source >> options;
    if (root != "/") continue;  // a bind of a sub-cgroup: not the hierarchy's root
    if (type == "cgroup2") {
      if (!layout.unified) layout.unified = mount_point;
    } else if (type == "cgroup") {
      std::string spaced = options;
      for (char& c : spaced) c = c == ',' ? ' ' : c;
      if (has_word(spaced, "memory") && !layout.memory_v1) layout.memory_v1 = mount_point;
      if (has_word(spaced, "pids") && !layout.pids_v1) layout.pids_v1 = mount_point;
      if (has_word(spaced, "cpu") && !layout.cpu_v1) layout.cpu_v1 = mount_point;
    }
  }
  auto default_parent = [&subtree](const std::optional<std::string>& mount) {
    return mount ? *mount + "/" + subtree : std::string();
  };
  layout.memory_parent = default_parent(layout.memory_v1);
  layout.pids_parent = default_parent(layout.pids_v1);
  layout.cpu_parent = default_parent(layout.cpu_v1);
  layout.unified_parent = default_parent(layout.unified);
  if (!delegated.empty()) {
    // Only the delegated directories are ours to use: each goes to the hierarchy it lies in.
    auto inside = [](const std::string& directory, const std::optional<std::string>& mount) {
      return mount && directory.rfind(*mount + "/", 0) == 0;
    };
    std::string memory, pids, cpu, unified;
    for (const auto& given : delegated) {
      const std::string directory = std::filesystem::path(given).lexically_normal().string();
      struct stat info {};
      if (::stat(directory.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
        throw InvalidArgument("delegated_cgroups: " + directory + " is not a directory",
                              "delegated_cgroups");
      }
      if (info.st_uid != ::geteuid() && ::geteuid() != 0) {
        throw InvalidArgument("delegated_cgroups: " + directory +
                                  " is not owned by this user "
                                  "(uid " +
                                  std::to_string(::geteuid()) +
                                  "), so cgroups cannot be made in it",
                              "delegated_cgroups");
      }
      bool placed = false;
      if (inside(directory, layout.memory_v1)) memory = directory, placed = true;
      if (inside(directory, layout.pids_v1)) pids = directory, placed = true;
      if (inside(directory, layout.cpu_v1)) cpu = directory, placed = true;
      if (inside(directory, layout.unified)) unified = directory, placed = true;
      if (!placed) {
        throw InvalidArgument("delegated_cgroups: " + directory +
                                  " is in no cgroup hierarchy "
                                  "mounted on this host",
                              "delegated_cgroups");
      }
    }
    auto keep = [](std::optional<std::string>& mount, std::string& parent,
                   const std::string& found) {
      if (found.empty()) {
        mount.reset();
        parent.clear();
      } else {
        parent = found;
      }
    };
    keep(layout.memory_v1, layout.memory_parent, memory);
    keep(layout.pids_v1, layout.pids_parent, pids);
    keep(layout.cpu_v1, layout.cpu_parent, cpu);
    keep(layout.unified, layout.unified_parent, unified);
  }
  if (layout.unified) {
    const std::string controllers =
        read_small_file(layout.unified_parent == *layout.unified + "/" + subtree
                            ? *layout.unified + "/cgroup.controllers"
                            : layout.unified_parent + "/cgroup.controllers");
    layout.unified_memory = !layout.memory_v1 && has_word(controllers, "memory");
    layout.unified_pids = !layout.pids_v1 && has_word(controllers, "pids");
    layout.unified_cpu = !layout.cpu_v1 && has_word(controllers, "cpu");
  }
  return layout;
}

std::string CgroupLayout::parent_for(const std::string& mount_point) const {
  if (memory_v1 && mount_point == *memory_v1) return memory_parent;
  if (pids_v1 && mount_point == *pids_v1) return pids_parent;
  if (cpu_v1 && mount_point == *cpu_v1) return cpu_parent;
  if (unified && mount_point == *unified) return unified_parent;
  return mount_point + "/" + subtree;
}

InstanceCgroups plan_instance_cgroups(const CgroupLayout& layout, const std::string& instance_id,
                                      const ResourceLimits& limits, bool per_command) {
  InstanceCgroups planned;
  auto add = [&](const std::string& mount_point) {
    const std::string directory = layout.parent_for(mount_point) + "/" + instance_id;
    planned.directories.push_back(directory);
    planned.procs_files.push_back(directory + "/cgroup.procs");
  };
  if (limits.memory_bytes && layout.memory_v1) add(*layout.memory_v1);
  if (limits.pids && layout.pids_v1) add(*layout.pids_v1);
  if (limits.cpu_millis && layout.cpu_v1) add(*layout.cpu_v1);
  const bool unified_limits = (limits.memory_bytes && layout.unified_memory) ||
                              (limits.pids && layout.unified_pids) ||
                              (limits.cpu_millis && layout.unified_cpu);
  if (layout.unified && (unified_limits || per_command)) {
    add(*layout.unified);
    if (per_command) planned.command_parent = planned.directories.back();
  }
  return planned;
}

namespace {

// Writes the limits into one cgroup directory; v2 for a directory with cgroup.controllers.
void write_limits(const CgroupLayout& layout, const std::string& directory,
                  const ResourceLimits& limits) {
  int error = 0;
  auto failed = [&](const std::string& what) {
    throw BackendError("the sandbox's cgroups could not be set up",
                       what + " in " + directory + ": " + base::errno_text(error),
                       base::errno_code(error));
  };
  if (exists(directory + "/cgroup.controllers")) {
    // A limit this hierarchy is responsible for must have its file: never skip one silently.
    auto require = [&](bool wanted, const char* file) {
      if (wanted && !exists(directory + "/" + file)) {
        error = ENOENT;
        failed(std::string(file) + " (controller not enabled)");
      }
    };
    require(limits.memory_bytes && layout.unified_memory, "memory.max");
    require(limits.pids && layout.unified_pids, "pids.max");
    require(limits.cpu_millis && layout.unified_cpu, "cpu.max");
    if (limits.memory_bytes && layout.unified_memory) {
      if (!write_small_file(directory + "/memory.max", std::to_string(*limits.memory_bytes),
                            &error)) {
        failed("memory.max");
      }
      write_small_file(directory + "/memory.swap.max", "0");
    }
    if (limits.pids && layout.unified_pids &&
        !write_small_file(directory + "/pids.max", std::to_string(*limits.pids), &error)) {
      failed("pids.max");
    }
    if (limits.cpu_millis && layout.unified_cpu &&
        !write_small_file(directory + "/cpu.max",
                          std::to_string(*limits.cpu_millis * 100) + " 100000", &error)) {
      failed("cpu.max");
    }
    return;
  }
  if (limits.memory_bytes && exists(directory + "/memory.limit_in_bytes")) {
    // Where swap accounting exists, swap may not extend the limit; memsw must stay ≥ the limit,
    // so it is raised first and set last.
    const bool memsw = exists(directory + "/memory.memsw.limit_in_bytes");
    if (memsw) write_small_file(directory + "/memory.memsw.limit_in_bytes", "-1");
    if (!write_small_file(directory + "/memory.limit_in_bytes",
                          std::to_string(*limits.memory_bytes), &error)) {
      failed("memory.limit_in_bytes");
    }
    if (memsw) {
      write_small_file(directory + "/memory.memsw.limit_in_bytes",
                       std::to_string(*limits.memory_bytes));
    }
  }
  if (limits.pids && exists(directory + "/pids.max") &&
      !write_small_file(directory + "/pids.max", std::to_string(*limits.pids), &error)) {
    failed("pids.max");
  }
  if (limits.cpu_millis && exists(directory + "/cpu.cfs_quota_us")) {
    if (!write_small_file(directory + "/cpu.cfs_period_us", "100000", &error) ||
        !write_small_file(directory + "/cpu.cfs_quota_us", std::to_string(*limits.cpu_millis * 100),
                          &error)) {
      failed("cpu quota");
    }
  }
}

}  // namespace

void create_instance_cgroups(const CgroupLayout& layout, const InstanceCgroups& planned,
                             const ResourceLimits& limits) {
  std::vector<std::string> made;
  try {
    for (const auto& directory : planned.directories) {
      const std::string parent = directory.substr(0, directory.rfind('/'));
      if (::mkdir(parent.c_str(), 0755) != 0 && errno != EEXIST) {
        throw BackendError("the sandbox's cgroups could not be set up",
                           base::errno_error("mkdir", parent));
      }
      if (::mkdir(directory.c_str(), 0755) != 0) {
        throw BackendError("the sandbox's cgroups could not be set up",
                           base::errno_error("mkdir", directory));
      }
      made.push_back(directory);
      if (exists(directory + "/cgroup.controllers")) {
        // Enable what the parent offers so the limits have files to be written to.
        const std::string offered = read_small_file(parent + "/cgroup.controllers");
        std::string enable;
        for (const char* controller : {"memory", "pids", "cpu"}) {
          if (has_word(offered, controller)) {
            enable += std::string(enable.empty() ? "+" : " +") + controller;
          }
        }
        if (!enable.empty()) write_small_file(parent + "/cgroup.subtree_control", enable);
      }
      write_limits(layout, directory, limits);
    }
  } catch (...) {
    destroy_cgroups(made, std::chrono::milliseconds(1000));
    throw;
  }
}

void delegate_instance_cgroups(const InstanceCgroups& planned, uid_t guest_root) {
  if (planned.command_parent.empty()) return;
  const std::string& directory = planned.command_parent;
  for (const char* file : {"", "/cgroup.procs", "/cgroup.threads", "/cgroup.subtree_control"}) {
    if (::chown((directory + file).c_str(), guest_root, guest_root) != 0) {
      throw BackendError("the sandbox's cgroups could not be set up",
                         base::errno_error("chown", directory + file));
    }
  }
}

void apply_instance_limits(const CgroupLayout& layout, const InstanceCgroups& planned,
                           const ResourceLimits& limits) {
  for (const auto& directory : planned.directories) write_limits(layout, directory, limits);
}

bool same_hierarchies(const InstanceCgroups& a, const InstanceCgroups& b) {
  if (a.directories.size() != b.directories.size()) return false;
  for (std::size_t i = 0; i < a.directories.size(); ++i) {
    const auto& left = a.directories[i];
    const auto& right = b.directories[i];
    if (left.substr(0, left.rfind('/')) != right.substr(0, right.rfind('/'))) return false;
  }
  return a.command_parent.empty() == b.command_parent.empty();
}

bool destroy_cgroups(const std::vector<std::string>& directories,
                     std::chrono::milliseconds patience) {
  std::vector<std::string> all;
  for (const auto& directory : directories) {
    if (!exists(directory)) continue;
    collect_children(directory, all);
    all.push_back(directory);
  }
  for (const auto& directory : all) {
    if (exists(directory + "/cgroup.kill")) write_small_file(directory + "/cgroup.kill", "1");
    for (pid_t pid : members(directory)) kill_member(pid, directory);
  }
  const auto give_up = std::chrono::steady_clock::now() + patience;
  bool empty = false;
  while (!empty) {
    empty = true;
    for (const auto& directory : all) {
      if (populated(directory)) {
        empty = false;
        for (pid_t pid : members(directory)) kill_member(pid, directory);
      }
    }
    if (empty || std::chrono::steady_clock::now() > give_up) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  bool removed = true;
  for (const auto& directory : all) {
    for (int attempt = 0;; ++attempt) {
      if (::rmdir(directory.c_str()) == 0 || errno == ENOENT) break;
      if (errno != EBUSY || attempt > 200 || std::chrono::steady_clock::now() > give_up) {
        removed = false;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  return removed && empty;
}

std::optional<std::uint64_t> memory_usage(const std::vector<std::string>& directories) {
  for (const auto& directory : directories) {
    for (const char* file : {"memory.current", "memory.usage_in_bytes"}) {
      std::ifstream counter(directory + "/" + file);
      std::uint64_t bytes = 0;
      if (counter >> bytes) return bytes;
    }
  }
  return std::nullopt;
}

}  // namespace airlock::backend_kit
