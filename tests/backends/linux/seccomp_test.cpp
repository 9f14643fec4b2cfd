// The seccomp allowlist, both ways: the compiled program decides as documented (run here in a
// small classic-BPF interpreter, over argument values no guest could be bothered to try), a
// static probe finds every denied family refused with the documented errno by the real kernel,
// and real workloads — python3, coreutils, busybox, node, gcc — still do their work under it.
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/netlink.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <termios.h>

#include <cstring>
#include <iostream>
#include <map>
#include <random>
#include <sstream>

#include "backends/linux/seccomp_policy.hpp"
#include "backends/seccomp_probe_answers.hpp"
#include "linux/fixture.hpp"

namespace airlock::linux_backend::testing {
namespace {

// ---------------------------------------------------------------------------------------------
// The compiled program, interpreted.

constexpr std::uint32_t kAllow = SECCOMP_RET_ALLOW;
constexpr std::uint32_t kKillProcess = SECCOMP_RET_KILL_PROCESS;
constexpr std::uint32_t errno_action(int error) {
  return SECCOMP_RET_ERRNO | static_cast<std::uint32_t>(error);
}

#if defined(__x86_64__)
constexpr std::uint32_t kNativeArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
constexpr std::uint32_t kNativeArch = AUDIT_ARCH_AARCH64;
#endif

// Classic BPF as the kernel runs a seccomp filter: A, X, 16 words of scratch, loads from
// struct seccomp_data only.
class BpfProgram {
 public:
  explicit BpfProgram(const std::string& bytes) {
    instructions_.resize(bytes.size() / sizeof(sock_filter));
    std::memcpy(instructions_.data(), bytes.data(), instructions_.size() * sizeof(sock_filter));
  }
  std::size_t size() const { return instructions_.size(); }

  std::uint32_t run(const seccomp_data& data) const {
    unsigned char bytes[sizeof(seccomp_data)];
    std::memcpy(bytes, &data, sizeof data);
    std::uint32_t a = 0;
    std::uint32_t x = 0;
    std::uint32_t scratch[BPF_MEMWORDS] = {};
    for (std::size_t pc = 0; pc < instructions_.size(); ++pc) {
      const sock_filter& in = instructions_[pc];
      const std::uint32_t source = BPF_SRC(in.code) == BPF_X ? x : in.k;
      switch (BPF_CLASS(in.code)) {
        case BPF_LD:
          if (BPF_MODE(in.code) == BPF_ABS) {
            if (in.k + 4 > sizeof bytes) throw std::runtime_error("load out of range");
            std::memcpy(&a, bytes + in.k, 4);
          } else if (BPF_MODE(in.code) == BPF_IMM) {
            a = in.k;
          } else if (BPF_MODE(in.code) == BPF_MEM) {
            a = scratch[in.k];
          } else if (BPF_MODE(in.code) == BPF_LEN) {
            a = sizeof bytes;
          } else {
            throw std::runtime_error("unknown load");
          }
          break;
        case BPF_LDX:
          x = BPF_MODE(in.code) == BPF_MEM   ? scratch[in.k]
              : BPF_MODE(in.code) == BPF_LEN ? static_cast<std::uint32_t>(sizeof bytes)
                                             : in.k;
          break;
        case BPF_ST:
          scratch[in.k] = a;
          break;
        case BPF_STX:
          scratch[in.k] = x;
          break;
        case BPF_ALU:
          switch (BPF_OP(in.code)) {
            case BPF_ADD:
              a += source;
              break;
            case BPF_SUB:
              a -= source;
              break;
            case BPF_MUL:
              a *= source;
              break;
            case BPF_DIV:
              a = source ? a / source : 0;
              break;
            case BPF_MOD:
              a = source ? a % source : 0;
              break;
            case BPF_OR:
              a |= source;
              break;
            case BPF_AND:
              a &= source;
              break;
            case BPF_XOR:
              a ^= source;
              break;
            case BPF_LSH:
              a <<= source;
              break;
            case BPF_RSH:
              a >>= source;
              break;
            case BPF_NEG:
              a = -a;
              break;
            default:
              throw std::runtime_error("unknown alu op");
          }
          break;
        case BPF_JMP: {
          if (BPF_OP(in.code) == BPF_JA) {
            pc += in.k;
            break;
          }
          bool taken = false;
          switch (BPF_OP(in.code)) {
            case BPF_JEQ:
              taken = a == source;
              break;
            case BPF_JGT:
              taken = a > source;
              break;
            case BPF_JGE:
              taken = a >= source;
              break;
            case BPF_JSET:
              taken = (a & source) != 0;
              break;
            default:
              throw std::runtime_error("unknown jump");
          }
          pc += taken ? in.jt : in.jf;
          break;
        }
        case BPF_RET:
          return BPF_RVAL(in.code) == BPF_A ? a : in.k;
        case BPF_MISC:
          if (BPF_MISCOP(in.code) == BPF_TAX) {
            x = a;
          } else {
            a = x;
          }
          break;
      }
    }
    throw std::runtime_error("the program ran off its end");
  }

 private:
  std::vector<sock_filter> instructions_;
};

class SeccompPolicyTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    program_ = std::make_unique<BpfProgram>(compile_seccomp_filter());
  }
  static void TearDownTestSuite() { program_.reset(); }

  static std::uint32_t decide(long number, std::array<std::uint64_t, 6> args = {},
                              std::uint32_t arch = kNativeArch) {
    seccomp_data data{};
    data.nr = static_cast<int>(number);
    data.arch = arch;
    for (std::size_t i = 0; i < args.size(); ++i) data.args[i] = args[i];
    return program_->run(data);
  }

  static std::unique_ptr<BpfProgram> program_;
};
std::unique_ptr<BpfProgram> SeccompPolicyTest::program_;

TEST_F(SeccompPolicyTest, TheFilterIsReportedAndFitsTheKernelLimit) {
  const SeccompPolicySummary summary = seccomp_policy_summary();
  std::cout << "seccomp allowlist: " << summary.allowed << " syscalls allowed, "
            << summary.conditional << " allowed on their arguments, " << summary.denied
            << " denied with EPERM; " << summary.instructions << " BPF instructions (limit "
            << kSeccompInstructionLimit << "), binary tree " << (summary.binary_tree ? "yes" : "no")
            << "\n";
  RecordProperty("seccomp_instructions", static_cast<int>(summary.instructions));
  RecordProperty("seccomp_allowed", static_cast<int>(summary.allowed + summary.conditional));
  EXPECT_EQ(summary.instructions, program_->size());
  EXPECT_EQ(summary.instructions * sizeof(sock_filter), compile_seccomp_filter().size());
  // Well below the limit, not merely under it.
  EXPECT_LT(summary.instructions, kSeccompInstructionLimit / 4);
  EXPECT_TRUE(summary.binary_tree) << "libseccomp without SCMP_FLTATR_CTL_OPTIMIZE";
  EXPECT_GT(summary.allowed, 200u);
  EXPECT_EQ(summary.conditional, 5u);  // clone, socket, socketpair, ioctl, personality
  EXPECT_GT(summary.denied, 70u);
}

#if defined(__x86_64__) || defined(__aarch64__)

TEST_F(SeccompPolicyTest, OtherArchitecturesAreKilled) {
#if defined(__x86_64__)
  EXPECT_EQ(decide(__X32_SYSCALL_BIT | SYS_getpid), kKillProcess);
  EXPECT_EQ(decide(__X32_SYSCALL_BIT | SYS_read), kKillProcess);
  EXPECT_EQ(decide(20 /* i386 getpid */, {}, AUDIT_ARCH_I386), kKillProcess);
#endif
  EXPECT_EQ(decide(SYS_getpid, {}, AUDIT_ARCH_ARM), kKillProcess);
  EXPECT_EQ(decide(SYS_getpid, {}, 0), kKillProcess);
}

TEST_F(SeccompPolicyTest, WhatIsNotListedIsENOSYS) {
  EXPECT_EQ(decide(SYS_getpid), kAllow);
  EXPECT_EQ(decide(SYS_clone3), errno_action(ENOSYS));
  EXPECT_EQ(decide(SYS_get_mempolicy), errno_action(ENOSYS));
  EXPECT_EQ(decide(SYS_process_madvise), errno_action(ENOSYS));
  EXPECT_EQ(decide(457 /* statmount */), errno_action(ENOSYS));
  // Every number past today's table, up to where the x32 bit begins.
  for (long number = 470; number < 4096; ++number) {
    ASSERT_EQ(decide(number), errno_action(ENOSYS)) << number;
  }
  EXPECT_EQ(decide(0x3fffffff), errno_action(ENOSYS));
  // Every syscall number gets one of the policy's answers, nothing else.
  for (long number = 0; number < 470; ++number) {
    const std::uint32_t action = decide(number);
    EXPECT_TRUE(action == kAllow || action == errno_action(EPERM) ||
                action == errno_action(ENOSYS) || action == errno_action(EAFNOSUPPORT))
        << number << " -> " << std::hex << action;
  }
}

TEST_F(SeccompPolicyTest, DeniedFamiliesAreEPERM) {
  for (long number : std::initializer_list<long>{SYS_mount,
                                                 SYS_umount2,
                                                 SYS_pivot_root,
                                                 SYS_chroot,
                                                 SYS_unshare,
                                                 SYS_setns,
                                                 SYS_fsopen,
                                                 SYS_fsmount,
                                                 SYS_move_mount,
                                                 SYS_open_tree,
                                                 SYS_ptrace,
                                                 SYS_process_vm_readv,
                                                 SYS_process_vm_writev,
                                                 SYS_pidfd_getfd,
                                                 SYS_kcmp,
                                                 SYS_bpf,
                                                 SYS_perf_event_open,
                                                 SYS_userfaultfd,
                                                 SYS_keyctl,
                                                 SYS_add_key,
                                                 SYS_request_key,
                                                 SYS_io_setup,
                                                 SYS_io_submit,
                                                 SYS_io_getevents,
                                                 SYS_io_pgetevents,
                                                 SYS_io_cancel,
                                                 SYS_io_destroy,
                                                 SYS_io_uring_setup,
                                                 SYS_io_uring_enter,
                                                 SYS_io_uring_register,
                                                 SYS_open_by_handle_at,
                                                 SYS_name_to_handle_at,
                                                 SYS_init_module,
                                                 SYS_finit_module,
                                                 SYS_delete_module,
                                                 SYS_kexec_load,
                                                 SYS_reboot,
                                                 SYS_swapon,
                                                 SYS_swapoff,
                                                 SYS_settimeofday,
                                                 SYS_clock_settime,
                                                 SYS_clock_adjtime,
                                                 SYS_acct,
                                                 SYS_syslog,
                                                 SYS_quotactl,
                                                 SYS_memfd_secret,
                                                 SYS_mbind,
                                                 SYS_set_mempolicy,
                                                 SYS_migrate_pages,
                                                 SYS_move_pages,
                                                 SYS_fanotify_init,
                                                 SYS_vhangup,
                                                 460L /* lsm_set_self_attr */,
                                                 467L /* open_tree_attr */}) {
    EXPECT_EQ(decide(number, {0xffffffffffffffff, 0, 0, 0, 0, 0}), errno_action(EPERM)) << number;
    EXPECT_EQ(decide(number), errno_action(EPERM)) << number;
  }
}

TEST_F(SeccompPolicyTest, CloneNeverMakesANamespace) {
  const std::uint64_t thread = CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD |
                               CLONE_SYSVSEM | CLONE_SETTLS | CLONE_PARENT_SETTID |
                               CLONE_CHILD_CLEARTID;
  EXPECT_EQ(decide(SYS_clone, {thread}), kAllow);
  EXPECT_EQ(decide(SYS_clone, {SIGCHLD}), kAllow);
  EXPECT_EQ(decide(SYS_clone, {CLONE_VM | CLONE_VFORK | SIGCHLD}), kAllow);
  // glibc's int flags may arrive sign-extended (CLONE_IO is bit 31).
  EXPECT_EQ(decide(SYS_clone, {0xffffffff00000000ULL | CLONE_IO | SIGCHLD}), kAllow);
  for (std::uint64_t flag : {CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID,
                             CLONE_NEWNET, CLONE_NEWCGROUP}) {
    EXPECT_EQ(decide(SYS_clone, {flag}), errno_action(EPERM)) << std::hex << flag;
    EXPECT_EQ(decide(SYS_clone, {thread | flag | SIGCHLD}), errno_action(EPERM)) << flag;
    EXPECT_EQ(decide(SYS_clone, {0xffffffff00000000ULL | flag}), errno_action(EPERM)) << flag;
  }
  std::mt19937_64 random(7);
  for (int i = 0; i < 100000; ++i) {
    const std::uint64_t flags = random();
    const bool makes_namespace = (flags & 0x7E020000ULL) != 0;
    ASSERT_EQ(decide(SYS_clone, {flags}), makes_namespace ? errno_action(EPERM) : kAllow)
        << std::hex << flags;
  }
}

TEST_F(SeccompPolicyTest, SocketsOnlyForLocalInternetAndRoutingNetlink) {
  for (long call : {SYS_socket, SYS_socketpair}) {
    for (std::uint64_t family = 0; family < 64; ++family) {
      for (std::uint64_t protocol : {0, 1, 2, 6, 9, 15, 16, 17}) {
        std::uint32_t expected = errno_action(EAFNOSUPPORT);
        if (family == AF_UNIX || family == AF_INET || family == AF_INET6) expected = kAllow;
        if (family == AF_NETLINK) {
          expected = protocol == NETLINK_ROUTE ? kAllow : errno_action(EPROTONOSUPPORT);
        }
        ASSERT_EQ(decide(call, {family, SOCK_STREAM, protocol}), expected)
            << call << " " << family << " " << protocol;
      }
    }
    // Bits the kernel would truncate away are refused, not ignored.
    EXPECT_EQ(decide(call, {(1ULL << 32) | 40 /* AF_VSOCK */}), errno_action(EAFNOSUPPORT));
    EXPECT_EQ(decide(call, {(1ULL << 32) | AF_UNIX}), errno_action(EAFNOSUPPORT));
    EXPECT_EQ(decide(call, {0xffffffffffffffffULL}), errno_action(EAFNOSUPPORT));
    EXPECT_EQ(decide(call, {AF_NETLINK, SOCK_RAW, (1ULL << 32) | NETLINK_ROUTE}),
              errno_action(EPROTONOSUPPORT));
  }
}

TEST_F(SeccompPolicyTest, IoctlIsAllowedButTheTerminalInjectors) {
  const std::uint64_t high_bits[] = {0, 1ULL << 32, 0xffffffff00000000ULL, 0x8000000000000000ULL};
  for (std::uint64_t high : high_bits) {
    EXPECT_EQ(decide(SYS_ioctl, {0, high | TIOCSTI}), errno_action(EPERM)) << std::hex << high;
    EXPECT_EQ(decide(SYS_ioctl, {0, high | TIOCLINUX}), errno_action(EPERM)) << high;
    for (std::uint64_t request : std::initializer_list<std::uint64_t>{
             TCGETS, TCSETS, TIOCGWINSZ, FIONREAD, FIONBIO, TIOCGPGRP, 0x40049409 /* FICLONE */,
             0xc0185879UL, 0x80000000UL}) {
      EXPECT_EQ(decide(SYS_ioctl, {0, high | request}), kAllow) << std::hex << request;
    }
  }
  // Every request number in the low 16 bits, and a million random 64-bit values.
  for (std::uint64_t request = 0; request < 0x10000; ++request) {
    const bool injector = request == TIOCSTI || request == TIOCLINUX;
    ASSERT_EQ(decide(SYS_ioctl, {3, request}), injector ? errno_action(EPERM) : kAllow)
        << std::hex << request;
  }
  std::mt19937_64 random(11);
  for (int i = 0; i < 1000000; ++i) {
    std::uint64_t request = random();
    if (i % 4 == 0) request = (request & ~0xffffULL) | TIOCSTI;  // near misses
    const std::uint32_t low = static_cast<std::uint32_t>(request);
    const bool injector = low == TIOCSTI || low == TIOCLINUX;
    ASSERT_EQ(decide(SYS_ioctl, {3, request}), injector ? errno_action(EPERM) : kAllow)
        << std::hex << request;
  }
}

TEST_F(SeccompPolicyTest, PersonalityOnlyForDockersValues) {
  for (std::uint64_t persona :
       {0x0ULL, 0x8ULL, 0x20000ULL, 0x20008ULL, 0xffffffffULL, 0xffffffffffffffffULL}) {
    EXPECT_EQ(decide(SYS_personality, {persona}), kAllow) << std::hex << persona;
  }
  for (std::uint64_t persona : {0x40000ULL /* ADDR_NO_RANDOMIZE */, 0x6ULL, 0x400000ULL,
                                0x0200000ULL /* READ_IMPLIES_EXEC */, 0x1ULL}) {
    EXPECT_EQ(decide(SYS_personality, {persona}), errno_action(ENOSYS)) << std::hex << persona;
  }
}

#endif  // x86_64 || aarch64

// ---------------------------------------------------------------------------------------------
// In a sandbox.

class SeccompTest : public LinuxBackendTest {
 protected:
  static ExecOptions options(std::chrono::milliseconds timeout = std::chrono::seconds(120)) {
    ExecOptions result;
    result.working_directory = kWork;
    result.timeout = timeout;
    return result;
  }
  // Lines of "name=value".
  static std::map<std::string, std::string> parse(const std::string& text) {
    std::map<std::string, std::string> lines;
    std::istringstream stream(text);
    std::string line;
    while (std::getline(stream, line)) {
      const auto equals = line.find('=');
      if (equals == std::string::npos) continue;
      lines[line.substr(0, equals)] = line.substr(equals + 1);
    }
    return lines;
  }
};

TEST_F(SeccompTest, TheProbeFindsEveryDeniedFamilyRefused) {
  auto sandbox = acquire(spec());
  const std::string probe = install_testcase(*sandbox, "seccomp_probe");
  const ExecResult result = sandbox->exec(Command::argv({probe}), options());
  ASSERT_EQ(result.exit_code, 0) << result.stderr_bytes << result.stdout_bytes;
  const auto answers = parse(result.stdout_bytes);
  const auto expected = test_support::expected_probe_answers();
  for (const auto& [name, answer] : answers) {
    const auto found = expected.find(name);
    ASSERT_NE(found, expected.end()) << "the probe tried " << name << ", unknown to this test";
    EXPECT_EQ(answer, found->second) << name;
  }
#if defined(__x86_64__)
  // Every attempt was made, but the i386-only syscalls: on x86_64 they have no number (and
  // i386 numbers kill, see below).
  for (const auto& [name, answer] : expected) {
    if (name == "stime" || name == "vm86" || name == "vm86old") continue;
    EXPECT_TRUE(answers.count(name)) << name << " was not attempted";
  }
#endif
}

#if defined(__x86_64__)
TEST_F(SeccompTest, X32AndI386SyscallsKillTheProcess) {
  auto sandbox = acquire(spec());
  const std::string probe = install_testcase(*sandbox, "seccomp_probe");
  for (const char* abi : {"x32", "i386"}) {
    const ExecResult result = sandbox->exec(Command::argv({probe, abi}), options());
    EXPECT_EQ(result.term_signal, std::optional<int>(SIGSYS))
        << abi << ": " << result.exit_code << " " << result.stdout_bytes;
    EXPECT_EQ(result.stdout_bytes, "") << abi << " got an answer";
  }
}
#endif

TEST_F(SeccompTest, TheFilterIsLoadedForEveryCommand) {
  auto sandbox = acquire(spec());
  const ExecResult status = sh(*sandbox,
                               "grep -E '^(NoNewPrivs|Seccomp|Seccomp_filters):' "
                               "/proc/self/status");
  EXPECT_EQ(status.stdout_bytes, "NoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t1\n");
}

// ---------------------------------------------------------------------------------------------
// Real workloads under the allowlist: each asserts what it computed, not just its exit code.

constexpr const char* kPythonWorkload =
    R"py(import asyncio, hashlib, json, mmap, multiprocessing, os, select, socket, sqlite3, ssl
import subprocess, sys, tempfile, threading


def square(x):
    return x * x


def child(queue):
    queue.put(("child", os.getpid() != os.getppid()))


def tcp_round_trip():
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def serve():
        connection, _ = server.accept()
        with connection:
            connection.sendall(connection.recv(100).upper())

    thread = threading.Thread(target=serve)
    thread.start()
    with socket.create_connection(("127.0.0.1", port)) as client:
        client.sendall(b"ping over tcp")
        reply = client.recv(100)
    thread.join()
    server.close()
    return reply.decode()


async def asyncio_round_trip():
    async def handle(reader, writer):
        writer.write((await reader.readline()).upper())
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"ping over asyncio\n")
    await writer.drain()
    line = await reader.readline()
    writer.close()
    await writer.wait_closed()
    server.close()
    await server.wait_closed()
    process = await asyncio.create_subprocess_exec("echo", "async child",
                                                   stdout=asyncio.subprocess.PIPE)
    out, _ = await process.communicate()
    return [line.decode().strip(), out.decode().strip()]


def readiness():
    left, right = socket.socketpair()
    right.send(b"x")
    selected = select.select([left], [], [], 5)[0] == [left]
    poller = select.poll()
    poller.register(left, select.POLLIN)
    polled = poller.poll(5000)[0][1] & select.POLLIN != 0
    epoll = select.epoll()
    epoll.register(left.fileno(), select.EPOLLIN)
    epolled = epoll.poll(5)[0][1] & select.EPOLLIN != 0
    epoll.close()
    left.close()
    right.close()
    return [selected, polled, epolled]


def main():
    out = {}
    results = []
    lock = threading.Lock()

    def work(n):
        with lock:
            results.append(sum(range(n)))

    threads = [threading.Thread(target=work, args=(10 * i,)) for i in range(1, 5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    out["threads"] = sorted(results)
    out["subprocess"] = subprocess.run(["sh", "-c", "echo from sh; echo to stderr >&2"],
                                       capture_output=True, text=True).stdout.strip()
    with multiprocessing.Pool(2) as pool:
        out["pool"] = pool.map(square, range(6))
    queue = multiprocessing.Queue()
    process = multiprocessing.Process(target=child, args=(queue,))
    process.start()
    out["process"] = list(queue.get(timeout=30))
    process.join()
    out["process_exit"] = process.exitcode
    out["tcp"] = tcp_round_trip()
    out["asyncio"] = asyncio.run(asyncio_round_trip())
    database = sqlite3.connect("work.db")
    database.execute("pragma journal_mode=wal")
    database.execute("create table t (k text, v integer)")
    database.executemany("insert into t values (?, ?)", [("a", 1), ("b", 2), ("c", 3)])
    database.commit()
    out["sqlite"] = database.execute("select group_concat(k), sum(v) from t").fetchone()
    database.close()
    context = ssl.create_default_context()
    out["ssl"] = [context.verify_mode == ssl.CERT_REQUIRED, context.check_hostname,
                  ssl.OPENSSL_VERSION.split()[0]]
    out["json"] = json.loads(json.dumps({"nested": [1, 2.5, "three", None]}))
    out["sha256"] = hashlib.sha256(b"airlock").hexdigest()
    directory = tempfile.mkdtemp()
    for name in ("one", "two", "three"):
        open(os.path.join(directory, name), "w").close()
    out["scandir"] = sorted(entry.name for entry in os.scandir(directory))
    anonymous = mmap.mmap(-1, 4096)
    anonymous.write(b"anonymous map")
    anonymous.seek(0)
    mapped = [anonymous.read(13).decode()]
    with open("mapped.bin", "wb") as handle:
        handle.write(b"file map contents")
    with open("mapped.bin", "r+b") as handle:
        view = mmap.mmap(handle.fileno(), 0)
        mapped.append(view[:8].decode())
        view.close()
    out["mmap"] = mapped
    out["readiness"] = readiness()
    out["cpus"] = os.cpu_count() > 0
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
)py";

TEST_F(SeccompTest, PythonRunsThreadsProcessesSocketsAndItsStandardLibrary) {
  auto sandbox = acquire(spec());
  sandbox->write_file("workload.py", kPythonWorkload, kWork);
  const ExecResult result = sandbox->exec(Command::argv({"python3", "workload.py"}), options());
  ASSERT_EQ(result.exit_code, 0) << result.stderr_bytes;
  EXPECT_EQ(result.stdout_bytes,
            R"({"asyncio": ["PING OVER ASYNCIO", "async child"], "cpus": true, )"
            R"("json": {"nested": [1, 2.5, "three", null]}, )"
            R"("mmap": ["anonymous map", "file map"], "pool": [0, 1, 4, 9, 16, 25], )"
            R"("process": ["child", true], "process_exit": 0, "readiness": [true, true, true], )"
            R"("scandir": ["one", "three", "two"], )"
            R"("sha256": "e17ff958e1a3487cf583033fb295d45d3d030bd18c31441992dc781030fb4f51", )"
            R"("sqlite": ["a,b,c", 6], "ssl": [true, true, "OpenSSL"], "subprocess": "from sh", )"
            R"("tcp": "PING OVER TCP", "threads": [45, 190, 435, 780]})"
            "\n")
      << result.stderr_bytes;
}

constexpr const char* kCoreutilsWorkload = R"sh(set -e
mkdir -p d/sub
printf 'b\na\nc\n' > d/in.txt
ls d
cp d/in.txt d/copy.txt
cp -a d/in.txt d/sub/preserved.txt
mv d/copy.txt d/sub/moved.txt
sort d/sub/moved.txt | tr '\n' ' '; echo
sort -r -n --parallel=2 -S 1M d/in.txt | tr '\n' ' '; echo
find d -type f | sort
tar -cf d.tar d && tar -tf d.tar | sort | tr '\n' ' '; echo
mkdir x && tar -xf d.tar -C x && cat x/d/sub/moved.txt | tr '\n' ' '; echo
stat -c '%s %F %a' d/in.txt
du -b d/in.txt
du -sh d > /dev/null && echo du ok
date -u -d @86400 '+%Y-%m-%d %H:%M:%S'
test "$(date +%s)" -gt 1700000000 && echo clock ok
sha256sum d/in.txt
dd if=/dev/zero of=zero.bin bs=1k count=64 status=none
stat -c %s zero.bin
dd if=d/in.txt bs=1 skip=2 count=1 status=none; echo
echo done
)sh";

TEST_F(SeccompTest, CoreutilsRun) {
  auto sandbox = acquire(spec());
  sandbox->write_file("coreutils.sh", kCoreutilsWorkload, kWork);
  const ExecResult result = sandbox->exec(Command::argv({"sh", "coreutils.sh"}), options());
  ASSERT_EQ(result.exit_code, 0) << result.stderr_bytes << result.stdout_bytes;
  EXPECT_EQ(result.stdout_bytes,
            "in.txt\nsub\n"
            "a b c \n"
            "c b a \n"
            "d/in.txt\nd/sub/moved.txt\nd/sub/preserved.txt\n"
            "d/ d/in.txt d/sub/ d/sub/moved.txt d/sub/preserved.txt \n"
            "b a c \n"
            "6 regular file 644\n"
            "6\td/in.txt\n"
            "du ok\n"
            "1970-01-02 00:00:00\n"
            "clock ok\n"
            "af8fcee01ae24dc6c3e667d5f3aaba900637223e1cf618b92c4c548cf97e81f5  d/in.txt\n"
            "65536\n"
            "a\n"
            "done\n")
      << result.stderr_bytes;
}

constexpr const char* kNodeWorkload = R"js(const fs = require('fs');
const os = require('os');
const path = require('path');
const net = require('net');
const crypto = require('crypto');
const { execFileSync, spawn } = require('child_process');
const { Worker } = require('worker_threads');

async function main() {
  const out = {};
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'node-'));
  fs.writeFileSync(path.join(dir, 'a.txt'), 'written by node');
  fs.mkdirSync(path.join(dir, 'sub'));
  fs.renameSync(path.join(dir, 'a.txt'), path.join(dir, 'sub', 'b.txt'));
  out.fs = [fs.readFileSync(path.join(dir, 'sub', 'b.txt'), 'utf8'), fs.readdirSync(dir)];
  out.fsAsync = await fs.promises.readFile(path.join(dir, 'sub', 'b.txt'), 'utf8');
  out.execFileSync = execFileSync('sh', ['-c', 'echo child says hi']).toString().trim();
  out.spawn = await new Promise((resolve, reject) => {
    const child = spawn('sort', [], { stdio: ['pipe', 'pipe', 'inherit'] });
    let text = '';
    child.stdout.on('data', (chunk) => { text += chunk; });
    child.on('error', reject);
    child.on('close', (code) => resolve([code, text]));
    child.stdin.end('b\nc\na\n');
  });
  out.worker = await new Promise((resolve, reject) => {
    const worker = new Worker(
      "const { parentPort } = require('worker_threads');" +
      "let sum = 0; for (let i = 1; i <= 1000; i++) sum += i; parentPort.postMessage(sum);",
      { eval: true });
    worker.on('message', resolve);
    worker.on('error', reject);
  });
  out.net = await new Promise((resolve, reject) => {
    const server = net.createServer((socket) => {
      socket.on('data', (data) => socket.end(data.toString().toUpperCase()));
    });
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const client = net.connect(server.address().port, '127.0.0.1', () => client.write('ping over net'));
      let reply = '';
      client.on('data', (data) => { reply += data; });
      client.on('end', () => { server.close(); resolve(reply); });
      client.on('error', reject);
    });
  });
  out.sha256 = crypto.createHash('sha256').update('airlock').digest('hex');
  out.timer = await new Promise((resolve) => setTimeout(() => resolve('fired'), 20));
  console.log(JSON.stringify(out));
}
main().catch((error) => { console.error(error); process.exit(1); });
)js";

TEST_F(SeccompTest, NodeRunsFsChildProcessesWorkersAndANetServer) {
  if (!std::filesystem::exists("/usr/bin/node")) {
    GTEST_SKIP() << "SKIPPED: node is not installed (scripts/bootstrap --test installs it)";
  }
  auto sandbox = acquire(spec());
  const ExecResult result = sandbox->exec(Command::argv({"node", "-e", kNodeWorkload}), options());
  ASSERT_EQ(result.exit_code, 0) << result.stderr_bytes;
  EXPECT_EQ(result.stdout_bytes,
            R"({"fs":["written by node",["sub"]],"fsAsync":"written by node",)"
            R"("execFileSync":"child says hi","spawn":[0,"a\nb\nc\n"],"worker":500500,)"
            R"("net":"PING OVER NET",)"
            R"("sha256":"e17ff958e1a3487cf583033fb295d45d3d030bd18c31441992dc781030fb4f51",)"
            R"("timer":"fired"})"
            "\n")
      << result.stderr_bytes;
}

constexpr const char* kThreadedProgram = R"c(#include <pthread.h>
#include <stdio.h>

static long total;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void* add(void* argument) {
  long from = (long)argument;
  long sum = 0;
  for (long i = from; i < from + 1000; ++i) sum += i;
  pthread_mutex_lock(&lock);
  total += sum;
  pthread_mutex_unlock(&lock);
  return NULL;
}

int main(void) {
  pthread_t threads[4];
  for (long i = 0; i < 4; ++i) pthread_create(&threads[i], NULL, add, (void*)(i * 1000));
  for (int i = 0; i < 4; ++i) pthread_join(threads[i], NULL);
  printf("threads=4 total=%ld\n", total);
  return 0;
}
)c";

TEST_F(SeccompTest, GccCompilesAndRunsAThreadedProgram) {
  auto sandbox = acquire(spec());
  sandbox->write_file("threads.c", kThreadedProgram, kWork);
  const ExecResult result =
      sh(*sandbox, "gcc -O2 -pthread -o threads threads.c && ./threads", std::chrono::seconds(120));
  ASSERT_EQ(result.exit_code, 0) << result.stderr_bytes;
  EXPECT_EQ(result.stdout_bytes, "threads=4 total=7998000\n") << result.stderr_bytes;
}

class SeccompBusyboxTest : public SeccompTest {
 protected:
  void SetUp() override {
    SeccompTest::SetUp();
    if (IsSkipped()) return;
    images_ = std::make_unique<TemporaryDirectory>("airlock-linux-image");
    rootfs_ = make_busybox_rootfs(images_->path(), LinuxBackendConfig{}.uid_base);
    if (!rootfs_) GTEST_SKIP() << "SKIPPED: busybox-static is not installed (/bin/busybox)";
  }
  std::unique_ptr<TemporaryDirectory> images_;
  std::optional<std::filesystem::path> rootfs_;
};

constexpr const char* kBusyboxWorkload = R"sh(set -e
mkdir -p d/sub
printf 'pear\napple\nfig\napple\n' > d/fruit.txt
sort d/fruit.txt | uniq -c | sed 's/^ *//' | tr '\n' ';'; echo
awk '{ n += length($0) } END { print "chars", n }' d/fruit.txt
grep -c apple d/fruit.txt
cut -c1-2 d/fruit.txt | head -2 | tail -1
wc -l < d/fruit.txt
seq 1 5 | xargs echo | tr ' ' +
expr 6 \* 7
cp d/fruit.txt d/sub/copy && mv d/sub/copy d/sub/moved && ln -s moved d/sub/link && readlink d/sub/link
tar -czf d.tgz d && mkdir x && tar -xzf d.tgz -C x && find x -type f | sort
gzip -c d/fruit.txt | gunzip | md5sum | cut -d' ' -f1
sha256sum d/fruit.txt | cut -d' ' -f1
stat -c '%s %F' d/fruit.txt
du -s d > /dev/null && echo du ok
date -u -d @0 +%Y-%m-%d
sleep 30 & pid=$!; kill $pid; wait $pid || echo "sleep killed: $?"
ps -o comm | grep -c '^ps$'
echo abc | od -An -c | tr -s ' '
uname -s
id -u
echo done
)sh";

TEST_F(SeccompBusyboxTest, BusyboxAppletsAndPipelinesRun) {
  auto sandbox = acquire(
      spec("busybox", [&](SandboxSpec::Fields& fields) { fields.image = rootfs_->string(); }));
  sandbox->write_file("busybox.sh", kBusyboxWorkload, kWork);
  const ExecResult result = sandbox->exec(Command::argv({"sh", "busybox.sh"}), options());
  ASSERT_EQ(result.exit_code, 0) << result.stderr_bytes << result.stdout_bytes;
  EXPECT_EQ(result.stdout_bytes,
            "2 apple;1 fig;1 pear;\n"
            "chars 17\n"
            "2\n"
            "ap\n"
            "4\n"
            "1+2+3+4+5\n"
            "42\n"
            "moved\n"
            "x/d/fruit.txt\nx/d/sub/moved\n"
            "2eb12aa005ac1d5270af737ff2751764\n"
            "08ac0db682cf1c0387d7a34a1f18a8c2f8b1a734c4ac83d412d903a6fc21161e\n"
            "21 regular file\n"
            "du ok\n"
            "1970-01-01\n"
            "sleep killed: 143\n"
            "1\n"
            " a b c \\n\n"
            "Linux\n"
            "0\n"
            "done\n")
      << result.stderr_bytes;
}

}  // namespace
}  // namespace airlock::linux_backend::testing
