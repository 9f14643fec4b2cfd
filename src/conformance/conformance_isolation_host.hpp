// The host's side of the isolation suite: running the probe binary on the host (as this user or
// unprivileged), a marker process, listeners planted where a guest must not reach them, and the
// host facts the probes are judged against. Internal to src/core.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace airlock::conformance::detail {

// One line of the probe's output: `kind check detail` (see src/probe/probe.h).
struct ProbeLine {
  std::string kind;
  std::string check;
  std::string detail;
};

// What one run of the probe printed, and how it ended.
struct ProbeOutput {
  std::vector<ProbeLine> lines;
  bool done = false;  // the probe printed its last line
  int exit_code = 0;
  std::string stderr_text;

  static ProbeOutput parse(const std::string& stdout_bytes, int exit_code, std::string stderr_text);
  std::vector<const ProbeLine*> of_kind(const std::string& kind) const;
  std::optional<std::string> info(const std::string& key) const;
  std::vector<std::string> infos(const std::string& key) const;
  // For `seen WHAT yes|no DETAIL`: yes/no and the detail.
  std::optional<std::pair<bool, std::string>> seen(const std::string& what) const;
  // Every bad and error line, one a line, for a failure's detail.
  std::string summary(const std::string& kind, std::size_t limit = 12) const;
};

std::string hex_encode(const std::string& bytes);
std::string random_hex(int digits);

// The probe binary, copied where an unprivileged host user can run it; removed with this.
class HostProbe {
 public:
  HostProbe(const std::filesystem::path& source, std::uint32_t unprivileged_uid,
            std::uint32_t unprivileged_gid);
  ~HostProbe();
  HostProbe(const HostProbe&) = delete;
  HostProbe& operator=(const HostProbe&) = delete;

  const std::string& bytes() const { return bytes_; }
  const std::string& path() const { return path_; }
  // Who "unprivileged" is: "uid 65534" when this host is root, else this very user.
  std::string unprivileged_name() const;
  std::string self_name() const;

  // Runs the probe on the host and waits (killed at the deadline).
  ProbeOutput run(const std::vector<std::string>& arguments, bool unprivileged,
                  std::chrono::milliseconds timeout) const;
  // Starts the probe and returns its pid without waiting (a marker process).
  pid_t start(const std::vector<std::string>& arguments) const;

 private:
  std::string directory_;
  std::string path_;
  std::string bytes_;
  std::uint32_t uid_;
  std::uint32_t gid_;
};

// Kills and reaps a process this suite started.
void stop_process(pid_t pid);

// A listening socket on the host; counts the connections that reached it.
class HostListener {
 public:
  static std::optional<HostListener> unix_path(const std::string& path);
  static std::optional<HostListener> abstract(const std::string& name);
  static std::optional<HostListener> tcp(int family);  // any address, a free port
  static std::optional<HostListener> vsock();          // any CID, a free port
  HostListener(HostListener&& other) noexcept;
  HostListener& operator=(HostListener&&) = delete;
  HostListener(const HostListener&) = delete;
  ~HostListener();

  unsigned port() const { return port_; }
  const std::string& where() const { return where_; }
  // Connections accepted so far (non-blocking).
  int accepted();

 private:
  HostListener(int fd, std::string where, std::string path, unsigned port)
      : fd_(fd), where_(std::move(where)), path_(std::move(path)), port_(port) {}
  int fd_ = -1;
  std::string where_;
  std::string path_;  // unlinked at the end (filesystem sockets)
  unsigned port_ = 0;
  int accepted_ = 0;
};

// A number from /proc/sys (or any one-number file), or the fallback.
long long host_number(const std::string& path, long long fallback);
std::string host_text(const std::string& path);
// The host's /proc/1/cmdline with NULs as spaces, trailing spaces cut; its start time (ticks).
std::string host_init_cmdline();
long long host_init_start();
std::string host_kernel_release();
std::string host_boot_id();
// Every non-loopback address of the host, as "a.b.c.d" or "[v6]".
std::vector<std::string> host_addresses();
// This host's own vsock CID, when it has one.
std::optional<unsigned> host_vsock_cid();

// Free bytes and inodes (for an unprivileged user) of the filesystem holding each path, one
// entry per filesystem: path → (free bytes, free inodes, total bytes).
struct FilesystemSpace {
  std::string path;
  unsigned long long free_bytes = 0;
  unsigned long long free_inodes = 0;
  unsigned long long total_bytes = 0;
  unsigned long long total_inodes = 0;
};
std::vector<FilesystemSpace> host_filesystems(const std::vector<std::string>& paths);

}  // namespace airlock::conformance::detail
