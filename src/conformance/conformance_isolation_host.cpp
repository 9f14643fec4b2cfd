// The host's side of the isolation suite: the probe binary's locator, running it on the host,
// listeners planted for a guest to (fail to) reach, and the host facts the probes compare with.
#include "conformance/conformance_isolation_host.hpp"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <linux/vm_sockets.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "airlock/conformance.hpp"
#include "airlock/errors.hpp"

extern char** environ;

#ifndef AIRLOCK_LIBEXEC_DIR
#define AIRLOCK_LIBEXEC_DIR "/usr/local/libexec/airlock"
#endif

namespace airlock::conformance {
namespace {

constexpr const char* kProbeName = "airlock-isolation-probe";

void locate_marker() {}

// The whole file, or empty (never a stream iterator: this is read on small /proc files too).
std::string read_whole(const std::string& path, bool* ok = nullptr) {
  std::string out;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (ok != nullptr) *ok = fd >= 0;
  if (fd < 0) return out;
  char buffer[65536];
  for (;;) {
    const ssize_t got = ::read(fd, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    out.append(buffer, static_cast<std::size_t>(got));
  }
  ::close(fd);
  return out;
}

bool executable(const std::filesystem::path& path) {
  std::error_code ignored;
  return std::filesystem::is_regular_file(path, ignored) && ::access(path.c_str(), X_OK) == 0;
}

}  // namespace

std::filesystem::path locate_isolation_probe(const std::filesystem::path& configured) {
  if (!configured.empty()) {
    if (executable(configured)) return configured;
    throw NotFound("the isolation probe " + configured.string() + " is not an executable file",
                   configured.string());
  }
  std::vector<std::filesystem::path> candidates;
  if (const char* from_environment = std::getenv("AIRLOCK_ISOLATION_PROBE");
      from_environment != nullptr && *from_environment != '\0') {
    candidates.emplace_back(from_environment);
  }
  std::error_code ignored;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ignored);
  if (!self.empty()) {
    candidates.push_back(self.parent_path() / kProbeName);
    candidates.push_back(self.parent_path().parent_path() / kProbeName);  // build/src/cli/airlock
  }
  Dl_info library{};
  if (::dladdr(reinterpret_cast<void*>(&locate_marker), &library) != 0 &&
      library.dli_fname != nullptr) {
    const auto directory = std::filesystem::absolute(library.dli_fname, ignored).parent_path();
    candidates.push_back(directory / kProbeName);
    candidates.push_back(directory / ".." / "libexec" / "airlock" / kProbeName);
  }
  candidates.emplace_back(std::string(AIRLOCK_LIBEXEC_DIR) + "/" + kProbeName);
  std::string looked;
  for (const auto& candidate : candidates) {
    if (executable(candidate)) return candidate.lexically_normal();
    looked += (looked.empty() ? "" : ", ") + candidate.string();
  }
  throw NotFound("the isolation probe (airlock-isolation-probe) was not found; looked in: " +
                     looked + " (set AIRLOCK_ISOLATION_PROBE)",
                 kProbeName);
}

namespace detail {

// ---- output ------------------------------------------------------------------------------------

ProbeOutput ProbeOutput::parse(const std::string& stdout_bytes, int exit_code,
                               std::string stderr_text) {
  ProbeOutput out;
  out.exit_code = exit_code;
  out.stderr_text = std::move(stderr_text);
  std::istringstream lines(stdout_bytes);
  std::string line;
  while (std::getline(lines, line)) {
    if (line == "done") {
      out.done = true;
      continue;
    }
    ProbeLine parsed;
    const auto first = line.find(' ');
    parsed.kind = line.substr(0, first);
    if (first != std::string::npos) {
      const auto second = line.find(' ', first + 1);
      parsed.check = line.substr(
          first + 1, second == std::string::npos ? std::string::npos : second - first - 1);
      if (second != std::string::npos) parsed.detail = line.substr(second + 1);
    }
    out.lines.push_back(std::move(parsed));
  }
  return out;
}

std::vector<const ProbeLine*> ProbeOutput::of_kind(const std::string& kind) const {
  std::vector<const ProbeLine*> out;
  for (const auto& line : lines) {
    if (line.kind == kind) out.push_back(&line);
  }
  return out;
}

std::optional<std::string> ProbeOutput::info(const std::string& key) const {
  for (const auto& line : lines) {
    if (line.kind == "info" && line.check == key) return line.detail;
  }
  return std::nullopt;
}

std::vector<std::string> ProbeOutput::infos(const std::string& key) const {
  std::vector<std::string> out;
  for (const auto& line : lines) {
    if (line.kind == "info" && line.check == key) out.push_back(line.detail);
  }
  return out;
}

std::optional<std::pair<bool, std::string>> ProbeOutput::seen(const std::string& what) const {
  for (const auto& line : lines) {
    if (line.kind != "seen" || line.check != what) continue;
    const auto space = line.detail.find(' ');
    const std::string answer = line.detail.substr(0, space);
    return std::make_pair(answer == "yes", space == std::string::npos
                                               ? std::string()
                                               : line.detail.substr(space + 1));
  }
  return std::nullopt;
}

std::string ProbeOutput::summary(const std::string& kind, std::size_t limit) const {
  std::string out;
  std::size_t count = 0;
  for (const auto& line : lines) {
    if (line.kind != kind) continue;
    if (++count > limit) continue;
    out += (out.empty() ? "" : "; ") + line.check + ": " + line.detail;
  }
  if (count > limit) out += "; and " + std::to_string(count - limit) + " more";
  return out;
}

std::string hex_encode(const std::string& bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kHex[c >> 4];
    out += kHex[c & 0xF];
  }
  return out;
}

std::string random_hex(int digits) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::random_device device;
  std::string out;
  for (int i = 0; i < digits; ++i) out += kHex[device() & 0xF];
  return out;
}

// ---- the probe on the host ---------------------------------------------------------------------

HostProbe::HostProbe(const std::filesystem::path& source, std::uint32_t unprivileged_uid,
                     std::uint32_t unprivileged_gid)
    : uid_(unprivileged_uid), gid_(unprivileged_gid) {
  bool readable = false;
  bytes_ = read_whole(source.string(), &readable);
  if (!readable || bytes_.empty()) {
    throw NotFound("the isolation probe " + source.string() + " cannot be read", source.string());
  }
  // A copy an unprivileged user can reach: the build tree or prefix may be closed to it.
  char pattern[] = "/tmp/airlock-isolation-host-XXXXXX";
  if (::mkdtemp(pattern) == nullptr) {
    throw SystemError("conformance: could not make a directory for the host probe", errno);
  }
  directory_ = pattern;
  ::chmod(directory_.c_str(), 0755);
  path_ = directory_ + "/" + kProbeName;
  std::ofstream out(path_, std::ios::binary);
  out.write(bytes_.data(), static_cast<std::streamsize>(bytes_.size()));
  out.close();
  ::chmod(path_.c_str(), 0755);
  if (!out) throw SystemError("conformance: could not write the host probe", errno, path_);
}

HostProbe::~HostProbe() {
  std::error_code ignored;
  std::filesystem::remove_all(directory_, ignored);
}

std::string HostProbe::unprivileged_name() const {
  return ::geteuid() == 0 ? "uid " + std::to_string(uid_) : self_name();
}

std::string HostProbe::self_name() const {
  return "uid " + std::to_string(::geteuid());
}

namespace {

struct Spawned {
  pid_t pid = -1;
  int out = -1;
};

Spawned spawn(const std::string& path, const std::vector<std::string>& arguments, bool capture) {
  std::vector<std::string> argv{path};
  argv.insert(argv.end(), arguments.begin(), arguments.end());
  std::vector<char*> pointers;
  for (auto& argument : argv) pointers.push_back(argument.data());
  pointers.push_back(nullptr);
  int channel[2] = {-1, -1};
  if (capture && ::pipe2(channel, O_CLOEXEC) != 0) {
    throw SystemError("conformance: pipe for the host probe", errno);
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  if (capture) {
    posix_spawn_file_actions_adddup2(&actions, channel[1], 1);
  } else {
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  }
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t none;
  sigemptyset(&none);
  sigset_t all;
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attributes, &none);
  posix_spawnattr_setsigdefault(&attributes, &all);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  const int error =
      ::posix_spawn(&pid, path.c_str(), &actions, &attributes, pointers.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  if (capture) ::close(channel[1]);
  if (error != 0) {
    if (capture) ::close(channel[0]);
    throw SystemError("conformance: could not start the host probe", error, path);
  }
  return {pid, capture ? channel[0] : -1};
}

}  // namespace

ProbeOutput HostProbe::run(const std::vector<std::string>& arguments, bool unprivileged,
                           std::chrono::milliseconds timeout) const {
  std::vector<std::string> full;
  if (unprivileged && ::geteuid() == 0) {
    full = {"--drop-to", std::to_string(uid_) + ":" + std::to_string(gid_)};
  }
  full.insert(full.end(), arguments.begin(), arguments.end());
  const Spawned child = spawn(path_, full, true);
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool timed_out = false;
  char buffer[8192];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd ready{child.out, POLLIN, 0};
    const int polled = ::poll(&ready, 1, static_cast<int>(left.count()));
    if (polled < 0 && errno == EINTR) continue;
    if (polled <= 0) {
      timed_out = polled == 0;
      break;
    }
    const ssize_t got = ::read(child.out, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    out.append(buffer, static_cast<std::size_t>(got));
  }
  ::close(child.out);
  if (timed_out) ::kill(child.pid, SIGKILL);
  int status = 0;
  while (::waitpid(child.pid, &status, 0) < 0 && errno == EINTR) {
  }
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return ProbeOutput::parse(out, code, timed_out ? "timed out on the host" : "");
}

pid_t HostProbe::start(const std::vector<std::string>& arguments) const {
  return spawn(path_, arguments, false).pid;
}

void stop_process(pid_t pid) {
  if (pid <= 0) return;
  ::kill(pid, SIGKILL);
  while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
}

// ---- listeners ---------------------------------------------------------------------------------

std::optional<HostListener> HostListener::unix_path(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return std::nullopt;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof address.sun_path) {
    ::close(fd);
    return std::nullopt;
  }
  std::memcpy(address.sun_path, path.data(), path.size());
  ::unlink(path.c_str());
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::chmod(path.c_str(), 0777) != 0 || ::listen(fd, 64) != 0) {
    ::close(fd);
    ::unlink(path.c_str());
    return std::nullopt;
  }
  return HostListener(fd, path, path, 0);
}

std::optional<HostListener> HostListener::abstract(const std::string& name) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return std::nullopt;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path + 1, name.data(),
              std::min(name.size(), sizeof address.sun_path - 1));
  const auto size = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), size) != 0 || ::listen(fd, 64) != 0) {
    ::close(fd);
    return std::nullopt;
  }
  return HostListener(fd, "@" + name, "", 0);
}

std::optional<HostListener> HostListener::tcp(int family) {
  const int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return std::nullopt;
  sockaddr_storage address{};
  socklen_t size = 0;
  if (family == AF_INET6) {
    int only = 1;
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &only, sizeof only);
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&address);
    v6->sin6_family = AF_INET6;
    v6->sin6_addr = in6addr_any;
    size = sizeof *v6;
  } else {
    auto* v4 = reinterpret_cast<sockaddr_in*>(&address);
    v4->sin_family = AF_INET;
    v4->sin_addr.s_addr = htonl(INADDR_ANY);
    size = sizeof *v4;
  }
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), size) != 0 || ::listen(fd, 64) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) != 0) {
    ::close(fd);
    return std::nullopt;
  }
  const unsigned port = family == AF_INET6
                            ? ntohs(reinterpret_cast<sockaddr_in6*>(&address)->sin6_port)
                            : ntohs(reinterpret_cast<sockaddr_in*>(&address)->sin_port);
  return HostListener(
      fd, std::string(family == AF_INET6 ? "tcp6" : "tcp4") + " port " + std::to_string(port), "",
      port);
}

std::optional<HostListener> HostListener::vsock() {
  const int fd = ::socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return std::nullopt;
  sockaddr_vm address{};
  address.svm_family = AF_VSOCK;
  address.svm_cid = VMADDR_CID_ANY;
  address.svm_port = VMADDR_PORT_ANY;
  socklen_t size = sizeof address;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), size) != 0 || ::listen(fd, 16) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) != 0) {
    ::close(fd);
    return std::nullopt;
  }
  return HostListener(fd, "vsock port " + std::to_string(address.svm_port), "", address.svm_port);
}

HostListener::HostListener(HostListener&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      where_(std::move(other.where_)),
      path_(std::exchange(other.path_, std::string())),
      port_(other.port_),
      accepted_(other.accepted_) {}

HostListener::~HostListener() {
  if (fd_ >= 0) ::close(fd_);
  if (!path_.empty()) ::unlink(path_.c_str());
}

int HostListener::accepted() {
  for (;;) {
    const int connection = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (connection < 0) break;
    ::close(connection);
    ++accepted_;
  }
  return accepted_;
}

// ---- host facts --------------------------------------------------------------------------------

std::string host_text(const std::string& path) {
  return read_whole(path);
}

long long host_number(const std::string& path, long long fallback) {
  const std::string text = host_text(path);
  if (text.empty()) return fallback;
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  return end == text.c_str() ? fallback : value;
}

std::string host_init_cmdline() {
  std::string text = host_text("/proc/1/cmdline");
  for (auto& c : text) {
    if (c == '\0') c = ' ';
  }
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

long long host_init_start() {
  const std::string stat = host_text("/proc/1/stat");
  auto cursor = stat.rfind(')');
  if (cursor == std::string::npos) return -1;
  int field = 2;
  while (cursor < stat.size() && field < 22) {
    if (stat[cursor] == ' ') ++field;
    ++cursor;
  }
  return field == 22 ? std::atoll(stat.c_str() + cursor) : -1;
}

std::string host_kernel_release() {
  utsname names{};
  ::uname(&names);
  return names.release;
}

std::string host_boot_id() {
  std::string id = host_text("/proc/sys/kernel/random/boot_id");
  while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
  return id;
}

std::vector<std::string> host_addresses() {
  std::vector<std::string> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* entry = list; entry != nullptr; entry = entry->ifa_next) {
    if (entry->ifa_addr == nullptr) continue;
    char text[INET6_ADDRSTRLEN] = "";
    if (entry->ifa_addr->sa_family == AF_INET) {
      const auto* v4 = reinterpret_cast<const sockaddr_in*>(entry->ifa_addr);
      if ((ntohl(v4->sin_addr.s_addr) >> 24) == 127) continue;
      ::inet_ntop(AF_INET, &v4->sin_addr, text, sizeof text);
      out.emplace_back(text);
    } else if (entry->ifa_addr->sa_family == AF_INET6) {
      const auto* v6 = reinterpret_cast<const sockaddr_in6*>(entry->ifa_addr);
      if (IN6_IS_ADDR_LOOPBACK(&v6->sin6_addr) || IN6_IS_ADDR_LINKLOCAL(&v6->sin6_addr)) continue;
      ::inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text);
      out.push_back(std::string("[") + text + "]");
    }
  }
  ::freeifaddrs(list);
  std::set<std::string> unique(out.begin(), out.end());
  return {unique.begin(), unique.end()};
}

std::optional<unsigned> host_vsock_cid() {
  const int fd = ::open("/dev/vsock", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  unsigned cid = 0;
  const int result = ::ioctl(fd, IOCTL_VM_SOCKETS_GET_LOCAL_CID, &cid);
  ::close(fd);
  if (result != 0 || cid == VMADDR_CID_ANY) return std::nullopt;
  return cid;
}

std::vector<FilesystemSpace> host_filesystems(const std::vector<std::string>& paths) {
  std::vector<FilesystemSpace> out;
  std::set<unsigned long> seen;
  for (const auto& path : paths) {
    struct statvfs info {};
    struct stat entry {};
    if (::statvfs(path.c_str(), &info) != 0 || ::stat(path.c_str(), &entry) != 0) continue;
    if (!seen.insert(static_cast<unsigned long>(entry.st_dev)).second) continue;
    out.push_back({path, static_cast<unsigned long long>(info.f_bavail) * info.f_frsize,
                   static_cast<unsigned long long>(info.f_favail),
                   static_cast<unsigned long long>(info.f_blocks) * info.f_frsize,
                   static_cast<unsigned long long>(info.f_files)});
  }
  return out;
}

}  // namespace detail
}  // namespace airlock::conformance
