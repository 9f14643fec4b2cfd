// One QEMU microVM in its jail, as the library drives it: started (booting, or restoring a
// snapshot), spoken to over its monitor (QMP) and its control port's multiplexer, snapshotted,
// and killed. Both are socketpairs handed to QEMU as descriptors: QEMU binds no socket and
// needs no path of the host for them.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "airlock/json.hpp"
#include "backends/kit/guest_exec.hpp"
#include "backends/microvm/mux.hpp"
#include "backends/microvm/setup.hpp"
#include "base/unique_fd.hpp"

namespace airlock::microvm_backend {

using Clock = std::chrono::steady_clock;

struct VmPlan {
  std::filesystem::path qemu;
  std::filesystem::path jail;
  std::filesystem::path kernel;
  std::filesystem::path initramfs;
  // The VM's own directory: its writable disk layer, the one path of the host QEMU may write.
  // Owned by `uid`, 0700.
  std::filesystem::path directory;
  std::filesystem::path disk;                    // qcow2, inside `directory`
  std::vector<std::filesystem::path> read_only;  // the disk's backing files
  std::vector<std::string> cgroups;  // made (with their limits) by the caller, one per hierarchy
  std::uint32_t uid = 0;
  std::uint64_t memory_bytes = 0;
  unsigned vcpus = 1;
  bool kvm = false;
  std::string tsc_khz;        // the host's TSC rate: the guest's only clock reference under TCG
  base::UniqueFd incoming;    // a snapshot's memory file to restore from, or empty to boot
  std::string extra_cmdline;  // appended to the kernel's command line
};

// The host's end of the control port: a Multiplexer on its own thread, and the command channel
// the kit's channel sandbox takes connections from.
class PortChannel final : public backend_kit::CommandChannel {
 public:
  explicit PortChannel(base::UniqueFd port);
  ~PortChannel() override;

  base::UniqueFd take(Clock::time_point deadline, std::stop_token stop) override;

  // The first stream-0 frame of `type` that arrives after this call's start, or nullopt at
  // `deadline` or when the port ends first.
  std::optional<std::string> await_control(char type, Clock::time_point deadline);
  void send_control(char type, std::string_view payload) { mux_.send_control(type, payload); }
  // Egress streams the guest opens go to what this returns (the sandbox's proxy socket).
  // Unset, the guest's egress streams are refused.
  void set_egress_connector(std::function<base::UniqueFd()> connect);
  bool gone() const;
  void shutdown() noexcept;

 private:
  base::UniqueFd port_;
  std::function<base::UniqueFd()> egress_connector_;
  Multiplexer mux_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::pair<char, std::string>> controls_;
  bool ended_ = false;
  std::string why_;
  std::thread pump_;
};

class VirtualMachine {
 public:
  // Spawns the jail with QEMU in it and connects to its monitor and control port. Throws
  // BackendError naming what failed (with the jail's or QEMU's own words).
  static std::unique_ptr<VirtualMachine> start(VmPlan plan, Clock::time_point deadline);
  ~VirtualMachine();

  // Booted: waits for the agent's hello. Restored: lets the VM run once its memory is loaded
  // (it arrives paused, as it was saved).
  void await_hello(Clock::time_point deadline);
  void resume(Clock::time_point deadline);
  // kSetup, then the agent's kReady; throws with its error line.
  void setup(const GuestSetup& setup, Clock::time_point deadline);
  // Stops the VM and saves its memory into `file` (migration to a descriptor); the disk layer is
  // flushed. The VM stays stopped; kill() it afterwards.
  void save_snapshot(int file, Clock::time_point deadline);

  std::shared_ptr<PortChannel> channel() const { return channel_; }
  const std::filesystem::path& disk() const noexcept { return disk_; }
  pid_t jail_pid() const noexcept { return jail_; }
  // What the guest's console last said (for a failed boot's message).
  std::string console_tail();
  // Ends the jail (and with it QEMU) and reaps it. Idempotent; never throws.
  void kill() noexcept;
  bool alive();

 private:
  VirtualMachine() = default;
  // One QMP command; its "return" member, or BackendError with QEMU's "error". `pass_fd` rides
  // along as SCM_RIGHTS (for getfd).
  json::Json qmp(const std::string& command, json::Json arguments = json::Json::object(),
                 int pass_fd = -1, Clock::time_point deadline = {});
  std::string jail_words();

  pid_t jail_ = -1;
  base::UniqueFd leash_;
  base::UniqueFd status_;
  base::UniqueFd monitor_;
  std::string monitor_buffer_;
  std::uint64_t next_qmp_id_ = 1;
  std::mutex monitor_mutex_;
  std::shared_ptr<PortChannel> channel_;
  std::filesystem::path directory_;
  std::filesystem::path disk_;
  base::UniqueFd words_;     // QEMU's stdout and stderr (a pipe; see start)
  std::string words_text_;   // what was read of it, the last few KiB
  bool reaped_ = false;
};

// The host's TSC rate in kHz, from /proc/cpuinfo's "cpu MHz" (the guest needs it under TCG).
std::string host_tsc_khz();

}  // namespace airlock::microvm_backend
