#include "backends/gvisor/cleanup.hpp"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

namespace airlock::gvisor_backend {
namespace {

std::vector<long> pids_in(const std::filesystem::path& cgroup) {
  std::vector<long> pids;
  std::ifstream procs(cgroup / "cgroup.procs");
  long pid = 0;
  while (procs >> pid) pids.push_back(pid);
  return pids;
}

bool alive(long pid) {
  // A zombie still answers kill(0); read its state instead.
  std::ifstream stat_file("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat_file, text)) return false;
  const auto close = text.rfind(')');
  return close != std::string::npos && close + 2 < text.size() && text[close + 2] != 'Z';
}

}  // namespace

std::vector<std::filesystem::path> cgroup_mounts() {
  std::vector<std::filesystem::path> mounts;
  std::ifstream mountinfo("/proc/self/mountinfo");
  std::string line;
  while (std::getline(mountinfo, line)) {
    // "<id> <parent> <dev> <root> <mount point> <options> [optional…] - <fstype> <source> <opts>"
    const auto dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream tail(line.substr(dash + 3));
    std::string type;
    tail >> type;
    if (type != "cgroup" && type != "cgroup2") continue;
    std::istringstream head(line.substr(0, dash));
    std::string field;
    std::string mount_point;
    for (int i = 0; i < 5 && head >> field; ++i) mount_point = field;
    if (!mount_point.empty()) mounts.emplace_back(mount_point);
  }
  return mounts;
}

std::vector<std::filesystem::path> leftover_cgroups(const std::string& id) {
  std::vector<std::filesystem::path> found;
  std::error_code error;
  for (const auto& mount : cgroup_mounts()) {
    const auto path = mount / kCgroupParent / id;
    if (std::filesystem::is_directory(path, error)) found.push_back(path);
  }
  return found;
}

std::vector<long> processes_of_bundle(const std::filesystem::path& bundle_directory) {
  const std::string bundle = bundle_directory.string();
  const std::string flagged = "--bundle=" + bundle;
  std::vector<long> found;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", error)) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream cmdline(entry.path() / "cmdline", std::ios::binary);
    std::string argument;
    while (std::getline(cmdline, argument, '\0')) {
      if (argument == bundle || argument == flagged) {
        found.push_back(std::stol(name));
        break;
      }
    }
  }
  return found;
}

std::vector<std::string> reclaim_leftovers(const std::string& id,
                                           const std::filesystem::path& bundle_directory) {
  std::vector<std::string> remaining;
  try {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    std::vector<long> victims = processes_of_bundle(bundle_directory);
    const auto cgroups = leftover_cgroups(id);
    for (const auto& cgroup : cgroups) {
      for (long pid : pids_in(cgroup)) victims.push_back(pid);
    }
    for (long pid : victims) {
      if (pid > 1 && pid != ::getpid()) ::kill(static_cast<pid_t>(pid), SIGKILL);
    }
    for (long pid : victims) {
      while (alive(pid) && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      if (alive(pid)) remaining.push_back("process " + std::to_string(pid));
    }
    for (const auto& cgroup : cgroups) {
      bool removed = false;
      while (!removed) {
        std::error_code error;
        removed = std::filesystem::remove(cgroup, error) || !std::filesystem::exists(cgroup);
        if (removed || std::chrono::steady_clock::now() >= deadline) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      if (!removed) remaining.push_back("cgroup " + cgroup.string());
    }
  } catch (const std::exception& error) {
    remaining.push_back(std::string("reclaim failed: ") + error.what());
  }
  return remaining;
}

}  // namespace airlock::gvisor_backend
