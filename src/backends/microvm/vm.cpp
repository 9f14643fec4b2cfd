#include "backends/microvm/vm.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "airlock/errors.hpp"
#include "backends/microvm/guest_layout.hpp"

extern char** environ;

namespace airlock::microvm_backend {
namespace {

// Stream-0 frames kept until awaited: the host awaits one hello and one ready per VM.
constexpr std::size_t kMaxPendingControls = 4;

// The descriptors the jail gets, at fixed numbers (QEMU inherits the last three).
constexpr int kLeashFd = 3;
constexpr int kStatusFd = 4;
constexpr int kPortFd = 5;
constexpr int kMonitorFd = 6;
constexpr int kIncomingFd = 7;

int remaining_ms(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1 << 30));
}

// A connected pair of stream sockets: [0] stays here, [1] goes to QEMU.
std::pair<base::UniqueFd, base::UniqueFd> socket_pair(const char* what) {
  int ends[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends) != 0) {
    throw BackendError(std::string("could not make the microVM's ") + what,
                       std::string("socketpair: ") + std::strerror(errno));
  }
  return {base::UniqueFd(ends[0]), base::UniqueFd(ends[1])};
}

std::string trim(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) {
    text.pop_back();
  }
  return text;
}

}  // namespace

std::string host_tsc_khz() {
  std::ifstream info("/proc/cpuinfo");
  std::string line;
  while (std::getline(info, line)) {
    if (line.rfind("cpu MHz", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) break;
    const double mhz = std::strtod(line.c_str() + colon + 1, nullptr);
    if (mhz > 0) return std::to_string(static_cast<long long>(mhz * 1000.0));
  }
  return {};
}

// ---- PortChannel ----

PortChannel::PortChannel(base::UniqueFd port)
    : port_(std::move(port)),
      mux_(
          port_.get(), true,
          [this](const std::string& kind) -> base::UniqueFd {
            if (kind != kStreamEgress || !egress_connector_) return {};
            return egress_connector_();
          },
          [this](char type, const std::string& payload) {
            std::lock_guard lock(mutex_);
            // Kept for await_control, and only a few: a guest repeating control frames
            // must not grow the host's memory (none is awaited once the setup is done).
            if (controls_.size() < kMaxPendingControls) controls_.emplace_back(type, payload);
            changed_.notify_all();
          }) {
  pump_ = std::thread([this] {
    std::string why = mux_.run();
    std::lock_guard lock(mutex_);
    ended_ = true;
    why_ = std::move(why);
    changed_.notify_all();
  });
}

PortChannel::~PortChannel() { shutdown(); }

void PortChannel::shutdown() noexcept {
  mux_.stop();
  if (pump_.joinable()) pump_.join();
}

void PortChannel::set_egress_connector(std::function<base::UniqueFd()> connect) {
  std::lock_guard lock(mutex_);
  egress_connector_ = std::move(connect);
}

bool PortChannel::gone() const {
  std::lock_guard lock(mutex_);
  return ended_;
}

base::UniqueFd PortChannel::take(Clock::time_point, std::stop_token) {
  if (gone()) {
    throw BackendError("the microVM is gone", "its control port closed: " + why_);
  }
  base::UniqueFd stream = mux_.open(kStreamCommand);
  if (!stream) throw BackendError("the microVM is gone", "its control port closed");
  return stream;
}

std::optional<std::string> PortChannel::await_control(char type, Clock::time_point deadline) {
  std::unique_lock lock(mutex_);
  for (;;) {
    for (auto at = controls_.begin(); at != controls_.end(); ++at) {
      if (at->first != type) continue;
      std::string payload = std::move(at->second);
      controls_.erase(at);
      return payload;
    }
    if (ended_) return std::nullopt;
    if (changed_.wait_until(lock, deadline) == std::cv_status::timeout) return std::nullopt;
  }
}

// ---- VirtualMachine ----

std::unique_ptr<VirtualMachine> VirtualMachine::start(VmPlan plan, Clock::time_point deadline) {
  const std::string megabytes = std::to_string(plan.memory_bytes >> 20);
  std::string cmdline = "console=ttyS0 panic=-1 quiet loglevel=1 ";
  if (!plan.tsc_khz.empty()) cmdline += "tsc_early_khz=" + plan.tsc_khz + " ";
  cmdline += kAgentCmdlineWord;
  if (!plan.extra_cmdline.empty()) cmdline += " " + plan.extra_cmdline;
  std::vector<std::string> args = {plan.jail.string(),
                                   "--leash",
                                   std::to_string(kLeashFd),
                                   "--status-fd",
                                   std::to_string(kStatusFd),
                                   "--uid",
                                   std::to_string(plan.uid),
                                   "--gid",
                                   std::to_string(plan.uid),
                                   "--ro",
                                   plan.kernel.string(),
                                   "--ro",
                                   plan.initramfs.string(),
                                   "--rw",
                                   plan.directory.string(),
                                   "--dev",
                                   "null",
                                   "--dev",
                                   "urandom",
                                   "--keep-fd",
                                   std::to_string(kPortFd),
                                   "--keep-fd",
                                   std::to_string(kMonitorFd)};
  for (const auto& cgroup : plan.cgroups) {
    args.push_back("--cgroup");
    args.push_back(cgroup);
  }
  for (const auto& path : plan.read_only) {
    args.push_back("--ro");
    args.push_back(path.string());
  }
  if (plan.kvm) {
    args.push_back("--dev");
    args.push_back("kvm");
  }
  if (plan.incoming) {
    args.push_back("--keep-fd");
    args.push_back(std::to_string(kIncomingFd));
  }
  args.push_back("--");
  const std::vector<std::string> qemu = {
      plan.qemu.string(),
      "-M",
      "microvm,x-option-roms=off,rtc=on",
      "-accel",
      plan.kvm ? "kvm" : "tcg,thread=multi",
      "-cpu",
      plan.kvm ? "host" : "max",
      "-m",
      megabytes,
      "-smp",
      std::to_string(plan.vcpus),
      "-nodefaults",
      "-no-user-config",
      "-display",
      "none",
      "-no-reboot",
      "-chardev",
      "ringbuf,id=console,size=65536",
      "-serial",
      "chardev:console",
      "-kernel",
      plan.kernel.string(),
      "-initrd",
      plan.initramfs.string(),
      "-append",
      cmdline,
      "-device",
      "virtio-serial-device,max_ports=2",
      "-chardev",
      "socket,id=ctl,fd=" + std::to_string(kPortFd),
      "-device",
      std::string("virtserialport,chardev=ctl,name=") + kControlPortName,
      "-chardev",
      "socket,id=qmp,fd=" + std::to_string(kMonitorFd),
      "-mon",
      "chardev=qmp,mode=control",
      "-sandbox",
      "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
  };
  args.insert(args.end(), qemu.begin(), qemu.end());
  if (!plan.disk.empty()) {  // the accelerator's probe boots without one
    args.insert(args.end(), {"-drive",
                             "file=" + plan.disk.string() +
                                 ",format=qcow2,if=none,id=root,cache=writeback,discard=unmap",
                             "-device", "virtio-blk-device,drive=root"});
  }
  if (plan.incoming) {
    args.push_back("-incoming");
    args.push_back("fd:" + std::to_string(kIncomingFd));
  }

  int leash[2];
  int status[2];
  if (::pipe2(leash, O_CLOEXEC) != 0 || ::pipe2(status, O_CLOEXEC) != 0) {
    throw BackendError("could not make the jail's pipes", std::strerror(errno));
  }
  base::UniqueFd leash_read(leash[0]), leash_write(leash[1]);
  base::UniqueFd status_read(status[0]), status_write(status[1]);
  auto [port_here, port_there] = socket_pair("control port");
  auto [monitor_here, monitor_there] = socket_pair("monitor");
  // QEMU's (and the jail's) stdout and stderr: a pipe whose writing end never blocks, read by
  // this side only when something failed. A guest that makes QEMU complain without end (a
  // device model's error reports) fills 64 KiB of pipe and then nothing: no host file grows.
  int output[2];
  if (::pipe2(output, O_CLOEXEC) != 0) {
    throw BackendError("could not make the jail's pipes", std::strerror(errno));
  }
  base::UniqueFd words_read(output[0]), log(output[1]);
  ::fcntl(log.get(), F_SETFL, O_NONBLOCK);
  ::fcntl(words_read.get(), F_SETFL, O_NONBLOCK);
  base::UniqueFd null(::open("/dev/null", O_RDWR | O_CLOEXEC));

  // Every descriptor the child gets is first lifted above the numbers it gets them at, so no
  // dup2 below overwrites a source a later one still needs (the snapshot's file opened as 4,
  // say, before the status pipe lands on 4).
  const auto lift = [](const base::UniqueFd& fd) {
    base::UniqueFd lifted(fd ? ::fcntl(fd.get(), F_DUPFD_CLOEXEC, kIncomingFd + 1) : -1);
    if (fd && !lifted) {
      throw BackendError("could not start the microVM's jail",
                         std::string("fcntl F_DUPFD_CLOEXEC: ") + std::strerror(errno));
    }
    return lifted;
  };
  null = lift(null);
  log = lift(log);
  leash_read = lift(leash_read);
  status_write = lift(status_write);
  port_there = lift(port_there);
  monitor_there = lift(monitor_there);
  plan.incoming = lift(plan.incoming);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, null.get(), 0);
  posix_spawn_file_actions_adddup2(&actions, log ? log.get() : null.get(), 1);
  posix_spawn_file_actions_adddup2(&actions, log ? log.get() : null.get(), 2);
  posix_spawn_file_actions_adddup2(&actions, leash_read.get(), kLeashFd);
  posix_spawn_file_actions_adddup2(&actions, status_write.get(), kStatusFd);
  posix_spawn_file_actions_adddup2(&actions, port_there.get(), kPortFd);
  posix_spawn_file_actions_adddup2(&actions, monitor_there.get(), kMonitorFd);
  if (plan.incoming) posix_spawn_file_actions_adddup2(&actions, plan.incoming.get(), kIncomingFd);
  posix_spawn_file_actions_addclosefrom_np(&actions,
                                           plan.incoming ? kIncomingFd + 1 : kMonitorFd + 1);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attributes, &none);
  sigset_t defaults;
  sigfillset(&defaults);
  posix_spawnattr_setsigdefault(&attributes, &defaults);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<char*> argv;
  for (auto& argument : args) argv.push_back(argument.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int spawned =
      ::posix_spawn(&pid, plan.jail.c_str(), &actions, &attributes, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  if (spawned != 0) {
    throw BackendError("could not start the microVM's jail",
                       plan.jail.string() + ": " + std::strerror(spawned));
  }
  std::unique_ptr<VirtualMachine> vm(new VirtualMachine());
  vm->jail_ = pid;
  vm->leash_ = std::move(leash_write);
  vm->status_ = std::move(status_read);
  vm->directory_ = plan.directory;
  vm->words_ = std::move(words_read);
  vm->disk_ = plan.disk;
  leash_read.reset();
  status_write.reset();
  port_there.reset();
  monitor_there.reset();
  plan.incoming.reset();

  // "ready" once QEMU is exec'd, or "error …" when the jail could not get that far.
  std::string line;
  while (line.find('\n') == std::string::npos) {
    pollfd watch{vm->status_.get(), POLLIN, 0};
    const int ready = ::poll(&watch, 1, remaining_ms(deadline));
    if (ready <= 0) {
      vm->kill();
      throw BackendError("the microVM's jail did not start in time", trim(line));
    }
    char buffer[256];
    const ssize_t got = ::read(vm->status_.get(), buffer, sizeof buffer);
    if (got <= 0) break;
    line.append(buffer, static_cast<std::size_t>(got));
  }
  if (line.rfind("ready", 0) != 0) {
    const std::string words = trim(line) + vm->jail_words();
    vm->kill();
    throw BackendError("the microVM's jail could not start QEMU", words);
  }
  vm->monitor_ = std::move(monitor_here);
  try {
    // QMP's greeting, then capabilities negotiation: the monitor takes commands after it.
    vm->qmp("qmp_capabilities", json::Json::object(), -1, deadline);
  } catch (const BackendError& error) {
    const std::string words = vm->jail_words();
    vm->kill();
    throw BackendError("QEMU did not come up", error_detail(error) + words);
  }
  vm->channel_ = std::make_shared<PortChannel>(std::move(port_here));
  return vm;
}

VirtualMachine::~VirtualMachine() { kill(); }

std::string VirtualMachine::jail_words() {
  if (words_) {
    char buffer[4096];
    ssize_t got;
    while ((got = ::read(words_.get(), buffer, sizeof buffer)) > 0) {
      words_text_.append(buffer, static_cast<std::size_t>(got));
      if (words_text_.size() > 8192) words_text_.erase(0, words_text_.size() - 4096);
    }
  }
  std::string words = words_text_;
  if (words.size() > 2000) words = words.substr(words.size() - 2000);
  return words.empty() ? std::string() : " (" + trim(words) + ")";
}

json::Json VirtualMachine::qmp(const std::string& command, json::Json arguments, int pass_fd,
                               Clock::time_point deadline) {
  std::lock_guard lock(monitor_mutex_);
  if (!monitor_) throw BackendError("QEMU's monitor is closed", command);
  if (deadline == Clock::time_point{}) deadline = Clock::now() + std::chrono::seconds(30);
  const std::uint64_t id = next_qmp_id_++;
  json::Json request = {{"execute", command}, {"id", id}};
  if (!arguments.empty()) request["arguments"] = std::move(arguments);
  const std::string line = request.dump() + "\n";
  iovec part{const_cast<char*>(line.data()), line.size()};
  msghdr message{};
  message.msg_iov = &part;
  message.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (pass_fd >= 0) {
    message.msg_control = control;
    message.msg_controllen = sizeof control;
    cmsghdr* header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(header), &pass_fd, sizeof(int));
  }
  if (::sendmsg(monitor_.get(), &message, MSG_NOSIGNAL) != static_cast<ssize_t>(line.size())) {
    throw BackendError("QEMU's monitor is gone", command + ": " + std::strerror(errno));
  }
  // Replies are one JSON object per line; the greeting and events come between them.
  for (;;) {
    for (auto newline = monitor_buffer_.find('\n'); newline != std::string::npos;
         newline = monitor_buffer_.find('\n')) {
      const std::string text = monitor_buffer_.substr(0, newline);
      monitor_buffer_.erase(0, newline + 1);
      json::Json reply;
      try {
        reply = json::Json::parse(text);
      } catch (const std::exception&) {
        throw BackendError("QEMU's monitor spoke something else than QMP", text.substr(0, 200));
      }
      if (!reply.is_object() || !reply.contains("id") || reply["id"] != id) continue;
      if (reply.contains("error")) {
        const auto& error = reply["error"];
        throw BackendError("QEMU refused " + command,
                           error.value("desc", error.dump()));
      }
      return reply.value("return", json::Json::object());
    }
    pollfd watch{monitor_.get(), POLLIN, 0};
    if (::poll(&watch, 1, remaining_ms(deadline)) <= 0) {
      throw BackendError("QEMU's monitor did not answer " + command + " in time", command);
    }
    char buffer[8192];
    const ssize_t got = ::read(monitor_.get(), buffer, sizeof buffer);
    if (got <= 0) throw BackendError("QEMU's monitor is gone", command);
    if (monitor_buffer_.size() > (std::size_t{4} << 20)) {
      throw BackendError("QEMU's monitor sent an endless line", command);
    }
    monitor_buffer_.append(buffer, static_cast<std::size_t>(got));
  }
}

void VirtualMachine::await_hello(Clock::time_point deadline) {
  const auto hello = channel_->await_control(kHello, deadline);
  if (!hello || *hello != kHelloText) {
    const std::string console = console_tail();
    throw BackendError(hello ? "the microVM's agent spoke another protocol"
                             : "the microVM did not boot in time",
                       console.empty() ? jail_words() : "console: " + console);
  }
}

// `cont` during the incoming migration only marks the VM to start when the load ends; waiting
// for "running" makes the caller's next step (the setup frame) meet a running guest.
void VirtualMachine::resume(Clock::time_point deadline) {
  qmp("cont", json::Json::object(), -1, deadline);
  for (;;) {
    const json::Json status = qmp("query-status", json::Json::object(), -1, deadline);
    if (status.value("status", "") == "running") return;
    const std::string state = status.value("status", "");
    if (state != "inmigrate" && state != "prelaunch" && state != "paused" && state != "restore-vm") {
      throw BackendError("the microVM did not resume from its snapshot", "QEMU says " + state);
    }
    if (Clock::now() >= deadline) {
      throw BackendError("the microVM's snapshot did not load in time", "QEMU says " + state);
    }
    ::usleep(2000);
  }
}

void VirtualMachine::setup(const GuestSetup& setup, Clock::time_point deadline) {
  channel_->send_control(kSetup, encode_setup(setup));
  const auto ready = channel_->await_control(kReady, deadline);
  if (!ready) {
    const std::string console = console_tail();
    throw BackendError("the microVM's agent did not take its setup in time",
                       console.empty() ? jail_words() : "console: " + console);
  }
  if (!ready->empty()) throw BackendError("the microVM's agent refused its setup", *ready);
}

void VirtualMachine::save_snapshot(int file, Clock::time_point deadline) {
  qmp("stop", json::Json::object(), -1, deadline);
  qmp("getfd", {{"fdname", "snapshot"}}, file, deadline);
  // The VM is stopped: nothing is gained by throttling the copy.
  qmp("migrate-set-parameters", {{"max-bandwidth", std::uint64_t{1} << 40}}, -1, deadline);
  qmp("migrate", {{"uri", "fd:snapshot"}}, -1, deadline);
  for (;;) {
    const json::Json state = qmp("query-migrate", json::Json::object(), -1, deadline);
    const std::string status = state.value("status", "");
    if (status == "completed") return;
    if (status == "failed" || status == "cancelled") {
      throw BackendError("QEMU could not save the snapshot",
                         state.value("error-desc", std::string("status ") + status));
    }
    if (Clock::now() >= deadline) throw BackendError("saving the snapshot took too long");
    ::usleep(5000);
  }
}

std::string VirtualMachine::console_tail() {
  std::string text;
  try {
    text = qmp("ringbuf-read", {{"device", "console"}, {"size", 4096}, {"format", "utf8"}})
               .get<std::string>();
  } catch (const std::exception&) {
    return {};
  }
  text = trim(text);
  if (text.size() > 1500) text = text.substr(text.size() - 1500);
  return text;
}

bool VirtualMachine::alive() {
  if (reaped_ || jail_ < 0) return false;
  if (::waitpid(jail_, nullptr, WNOHANG) == jail_) {
    reaped_ = true;
    return false;
  }
  return true;
}

void VirtualMachine::kill() noexcept {
  if (channel_) channel_->shutdown();
  leash_.reset();  // the warden sees the end of its leash and ends QEMU
  if (jail_ > 0 && !reaped_) {
    // The warden is PID 1 of its namespace: when it goes, everything inside goes.
    for (int round = 0; round < 500; ++round) {
      if (::waitpid(jail_, nullptr, WNOHANG) == jail_) {
        reaped_ = true;
        break;
      }
      ::usleep(2000);
    }
    if (!reaped_) {
      ::kill(jail_, SIGKILL);
      ::waitpid(jail_, nullptr, 0);
      reaped_ = true;
    }
  }
  monitor_.reset();
}

}  // namespace airlock::microvm_backend
