#include "backends/microvm/jail/options.hpp"

#include <fcntl.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <string_view>

namespace airlock::microvm_jail {
namespace {

// A decimal in [minimum, maximum], nothing else (no sign, no spaces, no hex).
std::optional<std::uint64_t> number(std::string_view text, std::uint64_t minimum,
                                    std::uint64_t maximum) {
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) return {};
  if (value < minimum || value > maximum) return {};
  return value;
}

// Absolute, and spelled the one way the jail recreates it: no empty, "." or ".." component and
// no trailing slash. The root itself cannot be bound.
bool plain_absolute(std::string_view path) {
  if (path.size() < 2 || path.front() != '/' || path.back() == '/') return false;
  if (path.find('\0') != std::string_view::npos) return false;
  std::size_t start = 1;
  while (start <= path.size()) {
    std::size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    const std::string_view part = path.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return true;
}

// Paths the jail builds itself; binding over them would undo it. Below /tmp (the jail's own
// small tmpfs) a path may be bound; over /tmp itself it may not.
bool reserved(std::string_view path) {
  if (path == "/tmp") return true;
  for (std::string_view top : {"/dev", "/proc"}) {
    if (path == top || (path.size() > top.size() && path.substr(0, top.size()) == top &&
                        path[top.size()] == '/')) {
      return true;
    }
  }
  return false;
}

bool open_fd(int fd) {
  return fd >= 0 && ::fcntl(fd, F_GETFD) != -1;
}

}  // namespace

const char* usage() noexcept {
  return "usage: airlock-microvm-jail --leash FD --status-fd FD --cgroup DIR [--cgroup DIR]...\n"
         "                            --uid N --gid N\n"
         "                            [--ro PATH]... [--rw PATH]... [--dev NAME]...\n"
         "                            [--keep-fd FD]... -- PROGRAM ARGS...\n"
         "  NAME is one of: null zero urandom random kvm; N is not 0; PATH and PROGRAM are\n"
         "  absolute.\n";
}

Parsed parse_options(int argc, char** argv) {
  Options options;
  bool have_leash = false, have_status = false, have_uid = false, have_gid = false;
  auto refuse = [](std::string message) { return Parsed{std::nullopt, std::move(message)}; };
  int index = 1;
  for (; index < argc; ++index) {
    const std::string_view flag = argv[index];
    if (flag == "--") {
      ++index;
      break;
    }
    if (index + 1 >= argc) return refuse("missing the value of " + std::string(flag));
    const std::string_view value = argv[++index];
    const std::string named = std::string(flag) + " " + std::string(value);
    if (flag == "--leash" || flag == "--status-fd" || flag == "--keep-fd") {
      const auto fd = number(value, 0, 1 << 20);
      if (!fd) return refuse(named + ": not a descriptor number");
      if (!open_fd(static_cast<int>(*fd))) return refuse(named + ": not an open descriptor");
      const int descriptor = static_cast<int>(*fd);
      if (flag == "--leash") {
        if (have_leash) return refuse(named + ": given twice");
        options.leash_fd = descriptor;
        have_leash = true;
      } else if (flag == "--status-fd") {
        if (have_status) return refuse(named + ": given twice");
        options.status_fd = descriptor;
        have_status = true;
      } else {
        if (descriptor <= 2) return refuse(named + ": 0, 1 and 2 are always kept");
        options.keep_fds.push_back(descriptor);
      }
    } else if (flag == "--uid" || flag == "--gid") {
      // 4294967295 is (uid_t)-1, which the set*id calls read as "unchanged".
      const auto id = number(value, 1, 4294967294ULL);
      if (!id) return refuse(named + ": must be a number from 1 to 4294967294 (never root)");
      if (flag == "--uid") {
        if (have_uid) return refuse(named + ": given twice");
        options.uid = static_cast<uid_t>(*id);
        have_uid = true;
      } else {
        if (have_gid) return refuse(named + ": given twice");
        options.gid = static_cast<gid_t>(*id);
        have_gid = true;
      }
    } else if (flag == "--cgroup") {
      if (!plain_absolute(value)) {
        return refuse(named + ": must be absolute, without '.', '..', '//' or a trailing '/'");
      }
      if (std::find(options.cgroups.begin(), options.cgroups.end(), value) !=
          options.cgroups.end()) {
        return refuse(named + ": given twice");
      }
      if (options.cgroups.size() == kMaxCgroups) {
        return refuse(named + ": more than " + std::to_string(kMaxCgroups) + " hierarchies");
      }
      options.cgroups.emplace_back(value);
    } else if (flag == "--ro" || flag == "--rw") {
      if (!plain_absolute(value)) {
        return refuse(named + ": must be absolute, without '.', '..', '//' or a trailing '/'");
      }
      if (reserved(value))
        return refuse(named + ": /dev, /proc and /tmp itself are the jail's own");
      (flag == "--ro" ? options.read_only : options.read_write).emplace_back(value);
    } else if (flag == "--dev") {
      const bool allowed = std::any_of(std::begin(kAllowedDevices), std::end(kAllowedDevices),
                                       [&](const char* name) { return value == name; });
      if (!allowed) return refuse(named + ": not an allowed device (null zero urandom random kvm)");
      if (std::find(options.devices.begin(), options.devices.end(), value) ==
          options.devices.end()) {
        options.devices.emplace_back(value);
      }
    } else {
      return refuse("unknown argument " + std::string(flag));
    }
  }
  if (!have_leash) return refuse("missing --leash");
  if (!have_status) return refuse("missing --status-fd");
  if (options.cgroups.empty()) return refuse("missing --cgroup");
  if (!have_uid) return refuse("missing --uid");
  if (!have_gid) return refuse("missing --gid");
  if (options.leash_fd <= 2 || options.status_fd <= 2 || options.leash_fd == options.status_fd) {
    return refuse("--leash and --status-fd must be two different descriptors above 2");
  }
  if (index >= argc) return refuse("missing -- PROGRAM");
  for (; index < argc; ++index) options.program.emplace_back(argv[index]);
  if (options.program.front().empty() || options.program.front().front() != '/') {
    return refuse("PROGRAM " + options.program.front() + ": must be an absolute path");
  }
  return Parsed{std::move(options), {}};
}

}  // namespace airlock::microvm_jail
