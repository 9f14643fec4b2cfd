// airlock-microvm-agent: /init of every microVM, and the guest's file helper.
//
// As /init (PID 1 of the guest kernel) it:
//   1. mounts /dev, /proc and /sys of the initramfs and loads the modules it carries
//      (/modules/order: the virtio transport, block and console drivers the cloud kernel builds
//      as modules);
//   2. mounts the sandbox's disk (/dev/vda: the image's root filesystem on a copy-on-write
//      layer of its own, host side) read-write at /newroot, gives it a minimal /dev (no disk,
//      no port: only null, zero, full, random, urandom, tty, a private devpts, shm), /proc,
//      /sys read-only, and itself read-only at /.airlock;
//   3. opens the control port, unmounts what it no longer needs and moves /newroot onto /;
//   4. says kHello on the port and serves the multiplexer (mux.hpp): every command stream gets a
//      handler process (backends/kit/guest/serve.hpp) on a socketpair, kSetup sets the clock,
//      credits the host's randomness to the kernel's pool and makes the work dir, and with
//      egress the loopback listener's connections become egress streams.
// A snapshot is taken while it waits after kHello: everything before is paid once per image.
//
// As a helper (any other PID) it runs the file plane's subcommands.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/random.h>
#include <net/if.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/reboot.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backends/kit/guest/file_commands.hpp"
#include "backends/kit/guest/file_protocol.hpp"
#include "backends/kit/guest/serve.hpp"
#include "backends/kit/guest/walk.hpp"
#include "backends/microvm/guest_layout.hpp"
#include "backends/microvm/mux.hpp"
#include "backends/microvm/setup.hpp"

namespace airlock::microvm_backend {
namespace {

// A line on the console (the host keeps the last of it for a failed boot's message).
void say(const std::string& line) {
  const std::string text = "airlock-agent: " + line + "\n";
  (void)!::write(2, text.data(), text.size());
}

[[noreturn]] void halt(const std::string& why) {
  say("fatal: " + why);
  ::sync();
  ::reboot(RB_POWER_OFF);
  for (;;) ::pause();
}

void must(bool ok, const std::string& step) {
  if (!ok) halt(step + ": " + std::strerror(errno));
}

void mount_fs(const char* source, const char* target, const char* type, unsigned long flags,
              const char* data = nullptr) {
  ::mkdir(target, 0755);
  must(::mount(source, target, type, flags, data) == 0, std::string("mount ") + target);
}

std::string read_text(const std::string& path) {
  std::string text;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return text;
  char buffer[4096];
  ssize_t got;
  while ((got = ::read(fd, buffer, sizeof buffer)) > 0) {
    text.append(buffer, static_cast<std::size_t>(got));
  }
  ::close(fd);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

void sleep_ms(long milliseconds) {
  timespec pause{milliseconds / 1000, (milliseconds % 1000) * 1000000};
  ::nanosleep(&pause, nullptr);
}

void load_modules() {
  const std::string order = read_text("/modules/order");
  std::size_t start = 0;
  while (start < order.size()) {
    const auto end = order.find('\n', start);
    const std::string name =
        order.substr(start, end == std::string::npos ? std::string::npos : end - start);
    start = end == std::string::npos ? order.size() : end + 1;
    if (name.empty()) continue;
    const std::string path = "/modules/" + name;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    must(fd >= 0, "open module " + name);
    const long loaded = ::syscall(SYS_finit_module, fd, "", 0);
    if (loaded != 0 && errno != EEXIST) halt("load module " + name + ": " + std::strerror(errno));
    ::close(fd);
  }
}

// The /dev/vportNpM whose name is `name`, waited for (the port appears once its driver bound).
std::string find_port(const std::string& name) {
  for (int round = 0; round < 1000; ++round) {
    if (DIR* ports = ::opendir("/sys/class/virtio-ports")) {
      while (const dirent* entry = ::readdir(ports)) {
        if (entry->d_name[0] == '.') continue;
        const std::string base = entry->d_name;
        if (read_text("/sys/class/virtio-ports/" + base + "/name") == name) {
          ::closedir(ports);
          return "/dev/" + base;
        }
      }
      ::closedir(ports);
    }
    sleep_ms(5);
  }
  halt("no virtio-serial port named " + name);
}

void wait_for(const char* path) {
  struct stat info {};
  for (int round = 0; round < 1000; ++round) {
    if (::stat(path, &info) == 0) return;
    sleep_ms(5);
  }
  halt(std::string("no ") + path);
}

void make_node(const char* path, mode_t mode, unsigned major_number, unsigned minor_number) {
  must(::mknod(path, S_IFCHR | mode, makedev(major_number, minor_number)) == 0 || errno == EEXIST,
       std::string("mknod ") + path);
  ::chmod(path, mode);
}

// The copy of ourselves guest programs run as the file helper.
void install_helper(const char* root) {
  const std::string directory = std::string(root) + kAgentDirectory;
  mount_fs("tmpfs", directory.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=8m");
  const std::string target = std::string(root) + kAgentPath;
  const int from = ::open("/init", O_RDONLY | O_CLOEXEC);
  const int to = ::open(target.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
  must(from >= 0 && to >= 0, "copy the agent");
  char buffer[65536];
  ssize_t got;
  while ((got = ::read(from, buffer, sizeof buffer)) > 0) {
    must(::write(to, buffer, static_cast<std::size_t>(got)) == got, "copy the agent");
  }
  ::close(from);
  ::close(to);
  must(::mount(nullptr, directory.c_str(), nullptr, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV,
               nullptr) == 0,
       "seal the agent's directory");
}

void build_dev(const char* root) {
  const std::string dev = std::string(root) + "/dev";
  mount_fs("tmpfs", dev.c_str(), "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=1m");
  const auto at = [&](const char* name) { return dev + "/" + name; };
  make_node(at("null").c_str(), 0666, 1, 3);
  make_node(at("zero").c_str(), 0666, 1, 5);
  make_node(at("full").c_str(), 0666, 1, 7);
  make_node(at("random").c_str(), 0666, 1, 8);
  make_node(at("urandom").c_str(), 0666, 1, 9);
  make_node(at("tty").c_str(), 0666, 5, 0);
  mount_fs("devpts", at("pts").c_str(), "devpts", MS_NOSUID | MS_NOEXEC,
           "newinstance,ptmxmode=0666,mode=0620");
  (void)!::symlink("pts/ptmx", at("ptmx").c_str());
  mount_fs("tmpfs", at("shm").c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
  (void)!::symlink("/proc/self/fd", at("fd").c_str());
  (void)!::symlink("/proc/self/fd/0", at("stdin").c_str());
  (void)!::symlink("/proc/self/fd/1", at("stdout").c_str());
  (void)!::symlink("/proc/self/fd/2", at("stderr").c_str());
}

void bring_up_loopback() {
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  ifreq request{};
  std::strncpy(request.ifr_name, "lo", IFNAMSIZ - 1);
  if (::ioctl(fd, SIOCGIFFLAGS, &request) == 0) {
    request.ifr_flags = static_cast<short>(request.ifr_flags | IFF_UP | IFF_RUNNING);
    ::ioctl(fd, SIOCSIFFLAGS, &request);
  }
  ::close(fd);
}

int listen_loopback(int port) {
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listener < 0) return -1;
  const int one = 1;
  ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::listen(listener, 64) != 0) {
    ::close(listener);
    return -1;
  }
  return listener;
}

// Sets the clock, credits the host's randomness (and reseeds the kernel's generator at once, so
// two VMs restored from one snapshot never draw the same bytes), makes the work dir.
std::string apply_setup(const GuestSetup& setup) {
  timespec now{static_cast<time_t>(setup.realtime_seconds),
               static_cast<long>(setup.realtime_nanoseconds)};
  if (::clock_settime(CLOCK_REALTIME, &now) != 0) {
    return std::string("clock_settime: ") + std::strerror(errno);
  }
  const int random = ::open("/dev/urandom", O_WRONLY | O_CLOEXEC);
  if (random < 0) return std::string("open /dev/urandom: ") + std::strerror(errno);
  std::vector<char> entropy(sizeof(rand_pool_info) + setup.seed.size());
  auto* pool = reinterpret_cast<rand_pool_info*>(entropy.data());
  pool->entropy_count = static_cast<int>(setup.seed.size() * 8);
  pool->buf_size = static_cast<int>(setup.seed.size());
  std::memcpy(pool->buf, setup.seed.data(), setup.seed.size());
  const bool credited = ::ioctl(random, RNDADDENTROPY, pool) == 0;
  const bool reseeded = ::ioctl(random, RNDRESEEDCRNG) == 0;
  const int error = errno;
  ::close(random);
  if (!credited || !reseeded)
    return std::string("reseed the kernel's RNG: ") + std::strerror(error);
  std::vector<std::string> components;
  guest_kit::Failure failure;
  if (!guest_kit::split_absolute(setup.workdir, components, failure) ||
      !guest_kit::open_directory(components, components.size(), true, failure)) {
    return "make the work dir " + setup.workdir + ": " + failure.message;
  }
  for (const auto& entry : setup.environment) {
    const auto equals = entry.find('=');
    ::setenv(entry.substr(0, equals).c_str(), entry.substr(equals + 1).c_str(), 1);
  }
  ::prctl(PR_SET_NAME, guest_kit::kGuestReadyName, 0, 0, 0);
  return {};
}

// A command stream's handler: a child of ours holding nothing but its end of the socketpair.
base::UniqueFd start_handler() {
  int ends[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends) != 0) return {};
  const pid_t handler = ::fork();
  if (handler == 0) {
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (ends[1] != 3) {
      ::dup3(ends[1], 3, O_CLOEXEC);
    } else {
      ::fcntl(3, F_SETFD, FD_CLOEXEC);
    }
    // Every other stream's descriptor closed: a stream the host resets must reach its handler
    // as an end of file, which a copy held here would prevent.
    ::syscall(SYS_close_range, 4, ~0U, 0);
    guest_kit::serve_command(3, -1);
  }
  ::close(ends[1]);
  if (handler < 0) {
    ::close(ends[0]);
    return {};
  }
  return base::UniqueFd(ends[0]);
}

[[noreturn]] void run_init() {
  sigset_t all;
  sigfillset(&all);
  ::sigprocmask(SIG_BLOCK, &all, nullptr);
  ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  mount_fs("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755");
  mount_fs("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC);
  mount_fs("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC);
  // The console stays our stderr; stdin and stdout go nowhere.
  const int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null >= 0) {
    ::dup2(null, 0);
    ::dup2(null, 1);
    ::close(null);
  }
  load_modules();
  const std::string port_path = find_port(kControlPortName);
  if (read_text("/proc/cmdline").find("airlock.probe") != std::string::npos) {
    // The accelerator probe: reaching here is the whole answer.
    const int probe = ::open(port_path.c_str(), O_RDWR | O_CLOEXEC);
    const std::string hello = mux_frame(kHello, 0, kHelloText);
    if (probe >= 0) (void)!::write(probe, hello.data(), hello.size());
    sleep_ms(200);
    halt("probe done");
  }
  wait_for("/dev/vda");
  mount_fs("/dev/vda", "/newroot", "ext4", MS_NOATIME, nullptr);
  install_helper("/newroot");
  build_dev("/newroot");
  mount_fs("proc", "/newroot/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC);
  mount_fs("sysfs", "/newroot/sys", "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC);
  const int port = ::open(port_path.c_str(), O_RDWR | O_CLOEXEC | O_NONBLOCK);
  must(port >= 0, "open " + port_path);
  for (const char* gone : {"/sys", "/proc", "/dev"}) ::umount2(gone, MNT_DETACH);
  must(::chdir("/newroot") == 0, "chdir /newroot");
  must(::mount(".", "/", nullptr, MS_MOVE, nullptr) == 0, "move the root");
  must(::chroot(".") == 0 && ::chdir("/") == 0, "enter the root");
  bring_up_loopback();

  sigset_t child_only;
  sigemptyset(&child_only);
  sigaddset(&child_only, SIGCHLD);
  const int children = ::signalfd(-1, &child_only, SFD_CLOEXEC | SFD_NONBLOCK);
  Multiplexer* mux_pointer = nullptr;
  int egress_listener = -1;
  Multiplexer mux(
      port, false,
      [](const std::string& kind) -> base::UniqueFd {
        if (kind != kStreamCommand) return {};
        return start_handler();
      },
      [&](char type, const std::string& payload) {
        if (type != kSetup) return;
        GuestSetup setup;
        if (!decode_setup(payload, setup)) {
          mux_pointer->send_control(kReady, "error malformed setup");
          return;
        }
        std::string failure = apply_setup(setup);
        if (failure.empty() && setup.egress_port != 0 && egress_listener < 0) {
          egress_listener = listen_loopback(setup.egress_port);
          if (egress_listener < 0) {
            failure = "listen on 127.0.0.1:" + std::to_string(setup.egress_port) + ": " +
                      std::strerror(errno);
          } else {
            const int listener = egress_listener;
            mux_pointer->add_watch({listener, [listener, mux_pointer] {
                                      for (;;) {
                                        const int client =
                                            ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
                                        if (client < 0) return;
                                        mux_pointer->open(kStreamEgress, base::UniqueFd(client));
                                      }
                                    }});
          }
        }
        mux_pointer->send_control(kReady, failure.empty() ? "" : "error " + failure);
      });
  mux_pointer = &mux;
  mux.set_wait_for_host(true);
  mux.add_watch({children, [children] {
                   signalfd_siginfo info;
                   while (::read(children, &info, sizeof info) > 0) {
                   }
                   while (::waitpid(-1, nullptr, WNOHANG) > 0) {
                   }
                 }});
  mux.send_control(kHello, kHelloText);
  say("ready");
  const std::string why = mux.run();
  halt("the multiplexer ended: " + why);
}

}  // namespace
}  // namespace airlock::microvm_backend

int main(int argc, char** argv) {
  if (::getpid() == 1) airlock::microvm_backend::run_init();
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (const auto code = airlock::guest_kit::run_file_command(args)) return *code;
  std::fprintf(stderr,
               "usage: airlock-microvm-agent stat|list PATH | read PATH MAX_BYTES |\n"
               "                             write PATH SIZE | remove PATH 0|1\n"
               "       (as /init of a microVM it serves the host; see agent.cpp)\n");
  return airlock::guest_kit::kFileUsage;
}
