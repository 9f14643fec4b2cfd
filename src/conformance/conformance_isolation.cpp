// The isolation suite: probes that run INSIDE the guest (airlock-isolation-probe, put there
// through the sandbox's own surface) and prove from there what the backend's declared rung and
// egress modes promise. Each probe is an attacker's move with, where one makes sense, a positive
// control; the host's side of a check (a marker process, planted sockets, listeners, an
// allocation while the guest holds a pool) runs here, on the host.
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>
#include <sstream>
#include <thread>

#include "airlock/paths.hpp"
#include "conformance/conformance_internal.hpp"
#include "conformance/conformance_isolation_host.hpp"

namespace airlock::conformance {
namespace detail {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr CapabilitySet kNeeds{Capability::exec, Capability::files_in};
constexpr const char* kProbeName = "airlock-isolation-probe";
constexpr std::uint64_t kProbeOutputCap = 8u << 20;

// The probe installed in one sandbox.
struct Guest {
  Sandbox* sandbox = nullptr;
  std::string binary;   // its guest path
  std::string scratch;  // a directory of its own under the working directory
};

struct IsolationState {
  ConformanceSubject& subject;
  const IsolationOptions& options;
  IsolationDeclarations declared;
  std::string work;
  bool files_out = false;
  bool run_code = false;
  std::unique_ptr<HostProbe> host;
  Guest a;
  std::optional<Guest> b;
  std::string second_error;            // acquiring or installing the second sandbox failed
  std::optional<bool> kernel_differs;  // the guest's kernel is not the host's (asked once)
  std::string kernel_evidence;
  std::string a_ended;  // sandbox A stopped serving during this probe
};

std::string shell_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string joined(const std::vector<std::string>& items, const char* separator = ",") {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : separator) + item;
  return out;
}

std::string mib(unsigned long long bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return text;
}

ProbeOutput run_guest(const Guest& guest, const std::vector<std::string>& arguments,
                      Milliseconds timeout, ExecOptions options = {}) {
  std::vector<std::string> argv{guest.binary};
  argv.insert(argv.end(), arguments.begin(), arguments.end());
  if (options.working_directory.empty()) options.working_directory = guest.scratch;
  options.timeout = timeout;
  options.max_output_bytes = kProbeOutputCap;
  const ExecResult result = guest.sandbox->exec(Command::argv(std::move(argv)), options);
  return ProbeOutput::parse(result.stdout_bytes, result.exit_code, result.stderr_text());
}

std::string ended(const ProbeOutput& out) {
  std::string text = "exit " + std::to_string(out.exit_code);
  if (!out.stderr_text.empty()) text += ", stderr: " + out.stderr_text.substr(0, 300);
  return text;
}

// The usual verdict: any `bad` line fails (the attack got through); a probe that did not finish
// or could not set up its premise (`error`) proves nothing and fails too, never passes.
void judge(ProbeContext& c, const ProbeOutput& out, const std::string& what) {
  const std::string bad = out.summary("bad");
  const std::string error = out.summary("error");
  std::string failure;
  if (!bad.empty()) failure = bad;
  if (!out.done || (out.exit_code != 0 && bad.empty())) {
    failure += std::string(failure.empty() ? "" : " | ") + what + " did not finish: " + ended(out);
  }
  if (!error.empty())
    failure += std::string(failure.empty() ? "" : " | ") + "could not prove: " + error;
  if (!failure.empty()) c.fail(failure);
  c.note(std::to_string(out.of_kind("ok").size()) + " checks held");
}

Guest install(IsolationState& s, Sandbox& sandbox) {
  const std::string base = s.work + "/.airlock-isolation";
  Guest guest{&sandbox, base + "/" + kProbeName, base + "/scratch"};
  sandbox.write_file(guest.binary, s.host->bytes(), s.work);
  sandbox.write_file(guest.scratch + "/.keep", "", s.work);
  ExecOptions options;
  options.working_directory = s.work;
  options.timeout = s.subject.exec_timeout();
  options.max_output_bytes = 64 * 1024;
  const ExecResult chmod = sandbox.exec(Command::argv({"chmod", "0755", guest.binary}), options);
  if (chmod.exit_code != 0) {
    throw ProbeFailed("the guest could not make the probe executable: `chmod 0755` exited " +
                      std::to_string(chmod.exit_code) + ": " + chmod.stderr_text() +
                      " (a guest without chmod cannot run the isolation suite)");
  }
  const ProbeOutput hello = run_guest(guest, {"hello"}, s.subject.exec_timeout());
  if (!hello.done || hello.exit_code != 0 || hello.of_kind("ok").empty()) {
    throw ProbeFailed("the probe does not run in the guest: " + ended(hello));
  }
  return guest;
}

Guest& second(ProbeContext& c, IsolationState& s) {
  if (!s.second_error.empty()) c.fail(s.second_error);
  if (!s.b) {
    Sandbox* other = nullptr;
    try {
      other = s.subject.second_sandbox();
      if (other == nullptr) c.fail("the subject offers no second sandbox");
      s.b = install(s, *other);
    } catch (const ProbeFailed& failed) {
      s.second_error = std::string("the second sandbox: ") + failed.what();
      throw ProbeFailed(s.second_error);
    } catch (const std::exception& error) {
      s.second_error = "the second sandbox could not be acquired or prepared: " + describe(error);
      throw ProbeFailed(s.second_error);
    }
  }
  return *s.b;
}

// The guest kernel is another kernel than the host's: a boot id of its own (a separate kernel
// instance), or, where the guest shows none, another release.
struct KernelView {
  std::string release;
  std::string boot_id;
  bool differs = false;
  std::string evidence;
};

KernelView kernel_view(const ProbeOutput& out) {
  KernelView view;
  view.release = out.info("kernel").value_or("");
  view.boot_id = out.info("boot-id").value_or("");
  const std::string host_release = host_kernel_release();
  const std::string host_boot = host_boot_id();
  if (!view.boot_id.empty() && !host_boot.empty()) {
    view.differs = view.boot_id != host_boot;
    view.evidence = view.differs ? "its boot id " + view.boot_id + " is not the host's " + host_boot
                                 : "its boot id is the host's (" + host_boot + ")";
  } else {
    view.differs = !view.release.empty() && view.release != host_release;
    view.evidence = "no boot id to compare; its kernel release is " + view.release +
                    ", the host's " + host_release;
  }
  view.evidence += " (guest kernel " + view.release + ", host kernel " + host_release + ")";
  return view;
}

bool guest_kernel_differs(IsolationState& s) {
  if (!s.kernel_differs) {
    try {
      const KernelView view = kernel_view(run_guest(s.a, {"kernel"}, s.subject.exec_timeout()));
      s.kernel_differs = view.differs;
      s.kernel_evidence = view.evidence;
    } catch (const std::exception&) {
      s.kernel_differs = false;
    }
  }
  return *s.kernel_differs;
}

// ---- the holding mechanism ---------------------------------------------------------------------

// A guest command run in a host thread: it holds something until it is released.
class Holder {
 public:
  Holder(const Guest& guest, std::vector<std::string> arguments, Milliseconds timeout) {
    thread_ = std::thread([this, guest, arguments = std::move(arguments), timeout] {
      try {
        output_ = run_guest(guest, arguments, timeout);
      } catch (const std::exception& error) {
        error_ = describe(error);
      }
      finished_ = true;
    });
  }
  ~Holder() { join(); }
  Holder(const Holder&) = delete;
  Holder& operator=(const Holder&) = delete;

  bool finished() const { return finished_.load(); }
  void join() {
    if (thread_.joinable()) thread_.join();
  }
  const std::optional<ProbeOutput>& output() const { return output_; }
  const std::string& error() const { return error_; }

 private:
  std::thread thread_;
  std::atomic<bool> finished_{false};
  std::optional<ProbeOutput> output_;
  std::string error_;
};

// The marker, as the file plane sees it — and, when it sees nothing, as the guest itself does: a
// backend whose guest writes stay inside the guest's own kernel (runsc's overlay under an
// engine) shows the host none of them.
std::optional<std::string> read_marker(IsolationState& s, const Guest& guest,
                                       const std::string& path) {
  if (s.files_out) {
    try {
      if (guest.sandbox->stat_file(path, s.work)) {
        return guest.sandbox->read_file(path, s.work, 64 * 1024);
      }
    } catch (const std::exception&) {
      // Asked again through the guest below.
    }
  }
  try {
    const ProbeOutput peek = run_guest(guest, {"peek", "path=" + path}, 10s);
    return peek.info("content");
  } catch (const std::exception&) {
    return std::nullopt;  // polled again; a sandbox that stopped serving shows in the verdict
  }
}

// Waits until the holder wrote `marker` (its content) or ended or the deadline passed.
std::optional<std::string> wait_for_hold(IsolationState& s, const Guest& guest, Holder& holder,
                                         const std::string& marker, Milliseconds within) {
  const auto deadline = Clock::now() + within;
  while (Clock::now() < deadline && !holder.finished()) {
    if (auto held = read_marker(s, guest, marker)) return held;
    std::this_thread::sleep_for(50ms);
  }
  return read_marker(s, guest, marker);
}

// Through the guest first (a host-side write may stay invisible to a guest whose kernel keeps
// its own overlay), then through the file plane.
void release(IsolationState& s, const Guest& guest, const std::string& path) {
  try {
    const ProbeOutput marked = run_guest(guest, {"mark", "path=" + path}, 10s);
    if (marked.done && marked.exit_code == 0) return;
  } catch (const std::exception&) {
  }
  try {
    guest.sandbox->write_file(path, "release\n", s.work);
  } catch (const std::exception&) {
    // The hold ends at its own timeout.
  }
}

bool serves(const Guest& guest) {
  try {
    const ProbeOutput hello = run_guest(guest, {"hello"}, 20s);
    return hello.done && hello.exit_code == 0;
  } catch (const std::exception&) {
    return false;
  }
}

// ---- probes ------------------------------------------------------------------------------------

void host_processes_invisible(ProbeContext& c, IsolationState& s) {
  const std::string marker = "airlock-host-marker-" + random_hex(16);
  const pid_t pid = s.host->start({"idle", "seconds=90", "marker=" + marker});
  struct Stop {
    pid_t pid;
    ~Stop() { stop_process(pid); }
  } stop{pid};
  // The host's own view first: the marker must really be running.
  bool running = false;
  for (int i = 0; i < 100 && !running; ++i) {
    running =
        host_text("/proc/" + std::to_string(pid) + "/cmdline").find(marker) != std::string::npos;
    if (!running) std::this_thread::sleep_for(10ms);
  }
  if (!running) c.fail("could not prove it: the host's marker process did not start");
  const ProbeOutput out = run_guest(
      s.a,
      {"processes", "host-marker-hex=" + hex_encode(marker), "self-marker=self-" + random_hex(12),
       "host-init-hex=" + hex_encode(host_init_cmdline()),
       "host-init-start=" + std::to_string(host_init_start())},
      c.subject().exec_timeout());
  judge(c, out, "the processes probe");
  c.note("host marker pid " + std::to_string(pid) + " invisible; the guest sees " +
         out.info("visible-processes").value_or("?") +
         " processes; its PID 1: " + out.info("pid1").value_or("?").substr(0, 80));
}

void no_capabilities(ProbeContext& c, IsolationState& s) {
  judge(c, run_guest(s.a, {"capabilities", "dir=" + s.a.scratch}, c.subject().exec_timeout()),
        "the capabilities probe");
}

void dangerous_syscalls_refused(ProbeContext& c, IsolationState& s) {
  const ProbeOutput out =
      run_guest(s.a, {"syscalls", "dir=" + s.a.scratch}, c.subject().exec_timeout());
  judge(c, out, "the syscalls probe");
  c.note(std::to_string(out.of_kind("ok").size()) + " attempts refused");
}

void seccomp_on_every_command(ProbeContext& c, IsolationState& s) {
  struct Form {
    std::string name;
    std::function<ProbeOutput()> run;
  };
  const Milliseconds timeout = c.subject().exec_timeout();
  std::vector<Form> forms;
  forms.push_back({"argv", [&] { return run_guest(s.a, {"seccomp"}, timeout); }});
  forms.push_back({"argv in /", [&] {
                     ExecOptions options;
                     options.working_directory = "/";
                     return run_guest(s.a, {"seccomp"}, timeout, options);
                   }});
  forms.push_back({"argv with stdin", [&] {
                     ExecOptions options;
                     options.stdin_bytes = "airlock\n";
                     return run_guest(s.a, {"seccomp"}, timeout, options);
                   }});
  forms.push_back({"argv with environment", [&] {
                     ExecOptions options;
                     options.environment = {{"AIRLOCK_PROBE", "1"}};
                     return run_guest(s.a, {"seccomp"}, timeout, options);
                   }});
  auto shell = [&](const std::string& line) {
    ExecOptions options;
    options.working_directory = s.a.scratch;
    options.timeout = timeout;
    options.max_output_bytes = kProbeOutputCap;
    const ExecResult result = s.a.sandbox->exec(Command::shell(line), options);
    return ProbeOutput::parse(result.stdout_bytes, result.exit_code, result.stderr_text());
  };
  forms.push_back(
      {"shell exec", [&] { return shell("exec " + shell_quote(s.a.binary) + " seccomp"); }});
  forms.push_back(
      {"shell child", [&] { return shell(shell_quote(s.a.binary) + " seccomp; true"); }});
  forms.push_back({"detached grandchild", [&] {
                     // The command returns before its grandchild ends: wait for the probe's last
                     // line (up to 20 s on a loaded host), not for a fixed time.
                     const std::string file = shell_quote(s.a.scratch + "/.seccomp-detached");
                     return shell("(" + shell_quote(s.a.binary) + " seccomp > " + file +
                                  " &) ; i=0; while [ $i -lt 200 ] && ! grep -qx done " + file +
                                  " 2>/dev/null; do sleep 0.1; i=$((i+1)); done; cat " + file);
                   }});
  std::string skipped;
  if (s.run_code) {
    forms.push_back({"run_code", [&] {
                       const std::string code = "import os\nos.execv(" + shell_quote(s.a.binary) +
                                                ", [" + shell_quote(s.a.binary) + ", 'seccomp'])\n";
                       const ExecResult result = s.a.sandbox->run_code(code, timeout);
                       return ProbeOutput::parse(result.stdout_bytes, result.exit_code,
                                                 result.stderr_text());
                     }});
  }
  std::vector<std::string> not_filtered;
  std::vector<std::string> ran;
  std::vector<std::string> retried;
  std::optional<KernelView> kernel;
  for (const auto& form : forms) {
    ProbeOutput out;
    try {
      out = form.run();
      // Up to twice more: a lost exec (an engine's attach that reset, as podman's does under
      // load) is the exec suite's finding, not this one's; a third loss is reported.
      for (int again = 0; again < 2 && !out.done && form.name != "run_code"; ++again) {
        retried.push_back(form.name + " (" + ended(out) + ")");
        out = form.run();
      }
    } catch (const std::exception& error) {
      c.fail("the " + form.name + " form raised " + describe(error));
    }
    if (form.name == "run_code" && (out.exit_code == 127 || !out.done)) {
      skipped =
          "; run_code not checked: the guest has no python3 that runs it (" + ended(out) + ")";
      continue;
    }
    if (!out.done) c.fail("the " + form.name + " form did not finish: " + ended(out));
    if (!kernel) kernel = kernel_view(out);
    const std::string mode = out.info("seccomp").value_or("absent");
    ran.push_back(form.name);
    if (mode != "2") not_filtered.push_back(form.name + ": Seccomp " + mode);
  }
  if (kernel && kernel->differs) {
    // Not the host's kernel: its seccomp field is its own business. What must still hold is
    // that the dangerous calls fail.
    const ProbeOutput out =
        run_guest(s.a, {"syscalls", "dir=" + s.a.scratch}, c.subject().exec_timeout());
    judge(c, out, "the syscalls probe");
    c.note("the guest's kernel is not the host's: " + kernel->evidence +
           "; so the dangerous system calls were attempted instead, and all " +
           std::to_string(out.of_kind("ok").size()) + " were refused" + skipped);
    return;
  }
  if (!not_filtered.empty()) {
    c.fail("a command ran without a seccomp filter (mode 2): " + joined(not_filtered, "; "));
  }
  c.note("Seccomp 2 in " + std::to_string(ran.size()) + " forms (" + joined(ran, ", ") + ")" +
         skipped +
         (retried.empty() ? "" : "; run again after a lost exec: " + joined(retried, "; ")));
}

void read_only_kernel_interfaces(ProbeContext& c, IsolationState& s) {
  judge(c, run_guest(s.a, {"readonly"}, c.subject().exec_timeout()), "the readonly probe");
}

// How long a filesystem walk may run: all the exec allows but a margin for the probe to report.
// A host image shows the host's /usr (150k+ entries here); a cold dentry cache on a loaded
// machine walks it at a few thousand entries a second, and a walk cut short proves nothing.
std::string walk_box(ProbeContext& c) {
  const Milliseconds exec = c.subject().exec_timeout();
  const Milliseconds box = std::max(Milliseconds(20'000), exec - Milliseconds(10'000));
  return "box-ms=" + std::to_string(std::min(box, exec).count());
}

void minimal_devices(ProbeContext& c, IsolationState& s) {
  const ProbeOutput out = run_guest(s.a, {"devices", walk_box(c)}, c.subject().exec_timeout());
  judge(c, out, "the devices probe");
  c.note(out.info("allowed-devices").value_or("?") + " device nodes, all in the minimal set; " +
         out.info("walked").value_or("?") + " walked");
}

void no_host_socket(ProbeContext& c, IsolationState& s) {
  const std::string tag = random_hex(12);
  std::vector<HostListener> listeners;
  std::vector<std::string> planted;
  std::vector<std::string> not_planted;
  for (const char* directory : {"/tmp", "/var/tmp", "/run", "/dev/shm"}) {
    const std::string path = std::string(directory) + "/airlock-isolation-" + tag + ".sock";
    if (auto listener = HostListener::unix_path(path)) {
      listeners.push_back(std::move(*listener));
      planted.push_back(path);
    } else {
      not_planted.push_back(directory);
    }
  }
  const std::string abstract_name = "airlock-isolation-" + tag;
  auto abstract = HostListener::abstract(abstract_name);
  if (planted.empty() && !abstract) c.fail("could not prove it: no host socket could be planted");
  std::vector<std::string> allowed = s.declared.declared_socket_directories;
  if (auto channel = s.a.sandbox->socket_channel()) allowed.push_back(channel->guest_directory);
  for (auto& directory : s.a.sandbox->backend_socket_directories()) {
    allowed.push_back(std::move(directory));
  }
  std::vector<std::string> arguments{"sockets", "dir=" + s.a.scratch, "planted=" + joined(planted),
                                     "allow=" + joined(allowed), walk_box(c)};
  if (abstract) arguments.push_back("abstract-hex=" + hex_encode(abstract_name));
  const ProbeOutput out = run_guest(s.a, arguments, c.subject().exec_timeout());
  std::vector<std::string> reached;
  for (auto& listener : listeners) {
    if (listener.accepted() > 0) reached.push_back(listener.where());
  }
  if (abstract && abstract->accepted() > 0) reached.push_back(abstract->where());
  if (!reached.empty()) {
    c.fail("the host's listeners accepted connections from the guest: " + joined(reached, ", ") +
           (out.summary("bad").empty() ? "" : " | " + out.summary("bad")));
  }
  judge(c, out, "the sockets probe");
  c.note("planted " + joined(planted, ", ") + (abstract ? " and @" + abstract_name : "") +
         (not_planted.empty() ? "" : " (not in " + joined(not_planted, ", ") + ")") +
         "; declared channels " + (allowed.empty() ? "none" : joined(allowed, ", ")) + "; " +
         out.info("walked").value_or(""));
}

void closed_egress_sees_only_loopback(ProbeContext& c, IsolationState& s) {
  judge(c, run_guest(s.a, {"net-view"}, c.subject().exec_timeout()), "the net-view probe");
}

void closed_egress_reaches_nothing(ProbeContext& c, IsolationState& s) {
  auto tcp4 = HostListener::tcp(AF_INET);
  auto tcp6 = HostListener::tcp(AF_INET6);
  auto vsock = HostListener::vsock();
  if (!tcp4) c.fail("could not prove it: the host could not listen on TCP");
  std::vector<std::string> tcp{"127.0.0.1:" + std::to_string(tcp4->port())};
  if (tcp6) tcp.push_back("[::1]:" + std::to_string(tcp6->port()));
  for (const auto& address : host_addresses()) {
    if (address.front() == '[') {
      if (tcp6) tcp.push_back(address + ":" + std::to_string(tcp6->port()));
    } else {
      tcp.push_back(address + ":" + std::to_string(tcp4->port()));
    }
  }
  std::vector<std::string> arguments{"net-reach", "tcp=" + joined(tcp),
                                     "public-tcp=1.1.1.1:443,8.8.8.8:53,[2606:4700:4700::1111]:443",
                                     "public-udp=8.8.8.8:53,1.1.1.1:53"};
  // vsock: only this host's own listener, at the local CID and this host's own CID — never a
  // hypervisor's (inside a VM, CID 2 is the machine that runs the VM, not the sandbox's host).
  std::vector<std::string> vsock_targets;
  if (vsock) {
    vsock_targets.push_back("1:" + std::to_string(vsock->port()));
    if (auto cid = host_vsock_cid()) {
      vsock_targets.push_back(std::to_string(*cid) + ":" + std::to_string(vsock->port()));
    }
    arguments.push_back("vsock=" + joined(vsock_targets));
  }
  const ProbeOutput out = run_guest(s.a, arguments, c.subject().exec_timeout());
  std::vector<std::string> reached;
  if (tcp4->accepted() > 0) reached.push_back(tcp4->where());
  if (tcp6 && tcp6->accepted() > 0) reached.push_back(tcp6->where());
  if (vsock && vsock->accepted() > 0) reached.push_back(vsock->where());
  if (!reached.empty()) {
    c.fail("the host's listeners accepted connections from the guest: " + joined(reached, ", ") +
           (out.summary("bad").empty() ? "" : " | " + out.summary("bad")));
  }
  judge(c, out, "the net-reach probe");
  c.note("refused: " + joined(tcp, " ") + " (host listeners), public TCP and UDP" +
         (vsock_targets.empty() ? std::string(", no vsock listener on this host")
                                : ", vsock " + joined(vsock_targets, " ")));
}

void guest_kernel_not_hosts(ProbeContext& c, IsolationState& s) {
  const ProbeOutput out = run_guest(s.a, {"kernel"}, c.subject().exec_timeout());
  if (!out.done) c.fail("the kernel probe did not finish: " + ended(out));
  const KernelView view = kernel_view(out);
  if (!view.differs) c.fail("the guest runs on the host's kernel: " + view.evidence);
  c.note(view.evidence);
}

void another_sandbox_unreachable(ProbeContext& c, IsolationState& s) {
  Guest& b = second(c, s);
  const std::string token = "airlock-cross-" + random_hex(16);
  std::mt19937 random(std::random_device{}());
  const int shm_key = static_cast<int>(random() % 0x3fffffff) + 1;
  const int msg_key = static_cast<int>(random() % 0x3fffffff) + 1;
  const std::string work_secret = s.work + "/.airlock-isolation/" + token + ".txt";
  const std::string tmp_secret = "/tmp/" + token + ".txt";
  const std::string socket_path = "/tmp/" + token + ".sock";
  const std::string abstract_hex = hex_encode(token);
  const std::string marker = s.a.scratch + "/.cross-" + token;
  const std::string release_path = marker + ".release";
  const Milliseconds hold = s.options.hold_box;
  Holder holder(
      s.a,
      {"cross-plant", "token=" + token, "secrets=" + work_secret + "," + tmp_secret,
       "sock=" + socket_path, "abstract-hex=" + abstract_hex, "shm-key=" + std::to_string(shm_key),
       "msg-key=" + std::to_string(msg_key), "marker=" + marker, "release=" + release_path,
       "hold-ms=" + std::to_string(hold.count())},
      hold + 30s);
  const auto planted = wait_for_hold(s, s.a, holder, marker, 20s);
  struct Release {
    IsolationState& s;
    const std::string& path;
    Holder& holder;
    ~Release() {
      release(s, s.a, path);
      holder.join();
    }
  } released{s, release_path, holder};
  if (!planted) {
    c.fail("could not prove it: sandbox A never finished planting (" +
           (holder.output() ? ended(*holder.output()) + " " + holder.output()->summary("error")
                            : holder.error()) +
           ")");
  }
  if (planted->find("planted") != 0) {
    c.fail("could not prove it: sandbox A could not plant everything (" + *planted + ")");
  }
  const std::vector<std::string> check{"cross-check",
                                       "token-hex=" + hex_encode(token),
                                       "files=" + work_secret + "," + tmp_secret,
                                       "shm-key=" + std::to_string(shm_key),
                                       "msg-key=" + std::to_string(msg_key),
                                       "abstract-hex=" + abstract_hex,
                                       "sock=" + socket_path};
  const std::vector<std::string> things{"file-0",   "file-1", "shm",    "msg",
                                        "abstract", "sock",   "process"};
  const std::vector<std::string> names{"the secret in its work dir", "the secret in /tmp",
                                       "the SysV shm segment",       "the message queue",
                                       "the abstract socket",        "the /tmp socket",
                                       "the marker process"};
  // The positive control: A itself sees everything it planted.
  const ProbeOutput control = run_guest(s.a, check, c.subject().exec_timeout());
  std::vector<std::string> unseen;
  for (std::size_t i = 0; i < things.size(); ++i) {
    const auto answer = control.seen(things[i]);
    if (!answer || !answer->first) {
      unseen.push_back(names[i] + (answer ? " (" + answer->second + ")" : ""));
    }
  }
  if (!control.done || !unseen.empty()) {
    c.fail("could not prove it: the positive control failed — sandbox A itself does not see " +
           joined(unseen, ", ") + " (" + ended(control) + ")");
  }
  const ProbeOutput other = run_guest(b, check, c.subject().exec_timeout());
  if (!other.done) c.fail("the check in sandbox B did not finish: " + ended(other));
  std::vector<std::string> seen;
  for (std::size_t i = 0; i < things.size(); ++i) {
    const auto answer = other.seen(things[i]);
    if (!answer) c.fail("the check in sandbox B said nothing of " + names[i]);
    if (answer->first) seen.push_back(names[i] + " (" + answer->second + ")");
  }
  if (!seen.empty()) c.fail("sandbox B reached sandbox A's " + joined(seen, ", "));
  c.note("sandbox A sees all 7 of its own; sandbox " + b.sandbox->instance_id() +
         " sees none of them");
}

// ---- pools -------------------------------------------------------------------------------------

std::string number(long long value) {
  return std::to_string(value);
}

struct PoolPlan {
  std::string resource;
  std::vector<std::string> arguments;  // cap=… and the resource's own
  bool unprivileged = false;           // the host's check runs where root would bypass a limit
  bool cap_is_failure = false;         // the cap is a fraction of the host's pool
  std::string cap_meaning;
  // The host's own count of the pool, when it keeps one: a /proc file's first number (file-nr,
  // aio-nr, pty/nr), "tasks" (every task on the host, /proc/loadavg) or "memory" (KiB in use,
  // /proc/meminfo): what the guest's hold cost the host, measured.
  std::string host_counter;
  // Set when this host makes the attack impossible to complete (the probe is then skipped).
  std::string premise_impossible;
};

// About what a guest opens and maps in the 20 s fill box here (4.7 M were measured).
constexpr long long kMostFilesABoxReaches = 8'000'000;

std::optional<long long> read_counter(const std::string& counter) {
  if (counter.empty()) return std::nullopt;
  if (counter == "tasks") {
    // "0.12 0.08 0.01 2/345 6789": the fourth field's total is every task the host runs.
    std::istringstream fields(host_text("/proc/loadavg"));
    std::string skip, running;
    fields >> skip >> skip >> skip >> running;
    const auto slash = running.find('/');
    if (slash == std::string::npos) return std::nullopt;
    return std::atoll(running.c_str() + slash + 1);
  }
  if (counter == "memory") {
    std::istringstream meminfo(host_text("/proc/meminfo"));
    std::string key;
    long long value = 0;
    long long total = -1;
    long long available = -1;
    std::string unit;
    while (meminfo >> key >> value >> unit) {
      if (key == "MemTotal:") total = value;
      if (key == "MemAvailable:") available = value;
    }
    if (total < 0 || available < 0) return std::nullopt;
    return total - available;
  }
  const long long value = host_number(counter, -1);
  return value < 0 ? std::nullopt : std::optional<long long>(value);
}

void run_pool(ProbeContext& c, IsolationState& s, const PoolPlan& plan) {
  if (!plan.premise_impossible.empty()) throw ProbeSkipped(plan.premise_impossible);
  Guest& b = second(c, s);
  const std::string token = random_hex(10);
  const std::string marker = s.a.scratch + "/.hold-" + plan.resource + "-" + token;
  const std::string release_path = marker + ".release";
  const Milliseconds box = s.options.fill_box;
  const Milliseconds hold = s.options.hold_box;
  std::vector<std::string> arguments{
      "pool", "resource=" + plan.resource, "marker=" + marker, "release=" + release_path,
      "box-ms=" + std::to_string(box.count()), "hold-ms=" + std::to_string(hold.count()),
      "dir=" + s.a.scratch,
      // Where files are made to be held: memory first, as an
      // attacker would (an overlay's backing files go uncounted).
      "dirs=/dev/shm,/tmp," + s.a.scratch};
  arguments.insert(arguments.end(), plan.arguments.begin(), plan.arguments.end());
  const auto counter_before = read_counter(plan.host_counter);
  Holder holder(s.a, arguments, box + hold + 40s);
  const auto held = wait_for_hold(s, s.a, holder, marker, box + 20s);
  const auto counter_during = held ? read_counter(plan.host_counter) : std::nullopt;
  std::optional<ProbeOutput> host_check;
  std::string host_error;
  std::optional<ProbeOutput> second_check;
  std::string second_error;
  // A sandbox the attack ended (its own memory limit, a guest kernel that gave up): nothing is
  // held any more, but the host and a neighbour must not have paid for it. Later probes are told.
  const bool ended_itself = !held && holder.finished() && !serves(s.a);
  if (ended_itself) s.a_ended = plan.resource;
  if (held || ended_itself) {
    try {
      host_check = s.host->run({"pool-check", "resource=" + plan.resource, "dir=/tmp"},
                               plan.unprivileged, 30s);
    } catch (const std::exception& error) {
      host_error = describe(error);
    }
    try {
      second_check =
          run_guest(b, {"pool-check", "resource=" + plan.resource, "dir=" + b.scratch}, 60s);
    } catch (const std::exception& error) {
      second_error = describe(error);
    }
  }
  release(s, s.a, release_path);
  holder.join();

  const auto& out = holder.output();
  const std::string who = plan.unprivileged ? s.host->unprivileged_name() : s.host->self_name();
  const std::string reached = out ? out->info("reached").value_or("?") : "?";
  const std::string unit = out ? out->info("unit").value_or("") : "";
  const std::string stopped = out ? out->info("stopped").value_or("?") : "?";
  std::string evidence = "the guest held " + reached + " " + unit + " (stopped: " + stopped +
                         (out ? ", " + out->info("workers").value_or("?") + " workers in " +
                                    out->info("fill-ms").value_or("?") + " ms"
                              : std::string()) +
                         ")";
  if (out && out->info("held-at-release") && out->info("held-at-release") != out->info("reached")) {
    evidence += " and " + *out->info("held-at-release") + " when released";
  }
  std::optional<long long> counter_rise;
  if (counter_before && counter_during) {
    counter_rise = *counter_during - *counter_before;
    evidence += "; the host's " +
                (plan.host_counter == "tasks"    ? std::string("task count")
                 : plan.host_counter == "memory" ? std::string("memory in use (KiB)")
                                                 : plan.host_counter) +
                " rose by " + number(*counter_rise);
  }
  if (ended_itself) {
    evidence = "the guest's sandbox ended during the attack, before it held (" +
               (out ? ended(*out) : holder.error()) + "): it hurt only itself if the rest holds";
  } else if (!held) {
    c.fail("could not prove it: the guest never reported that it held the pool (" +
           (out ? ended(*out) + (out->summary("error").empty() ? "" : "; " + out->summary("error"))
                : holder.error()) +
           ")");
  }
  std::vector<std::string> failures;
  auto check_result = [&](const std::optional<ProbeOutput>& check, const std::string& error,
                          const std::string& name) -> std::string {
    if (!error.empty()) {
      failures.push_back(name + " could not even run its allocation: " + error);
      return "could not run";
    }
    if (!check || !check->done) {
      failures.push_back(name + " could not allocate one: " + (check ? ended(*check) : "no run"));
      return "failed";
    }
    if (!check->summary("bad").empty()) {
      failures.push_back(name + " could not allocate one (" + check->summary("bad") + ")");
      return "failed";
    }
    if (!check->summary("error").empty()) {
      failures.push_back(name + " could not try: " + check->summary("error"));
      return "failed";
    }
    return "allocated one";
  };
  const std::string host_said = check_result(host_check, host_error, "the host (" + who + ")");
  const std::string second_said = check_result(second_check, second_error, "a second sandbox");
  if (out && !out->summary("error").empty()) {
    failures.push_back("the guest's attempt could not be made: " + out->summary("error"));
  }
  const long long reached_count = std::atoll(reached.c_str());
  // The box (or a cap that is a fraction of the host's pool) ended the fill before a refusal:
  // inconclusive, or a failure, unless the host shows the guest's objects are not its own — its
  // own count barely moved, or (where it keeps no count) the guest's kernel is another kernel,
  // whose objects are not the host kernel's by construction.
  std::string not_the_hosts_because;
  if (stopped == "box" || (plan.cap_is_failure && stopped == "cap")) {
    if (counter_rise && reached_count > 0 && *counter_rise * 10 < reached_count) {
      not_the_hosts_because = "the host's own count shows the guest's objects are not the host's";
    } else if (!counter_rise && guest_kernel_differs(s)) {
      not_the_hosts_because = "the guest's kernel is not the host's (" + s.kernel_evidence +
                              "): its objects are not the host kernel's";
    }
  }
  const bool not_the_hosts = !not_the_hosts_because.empty();
  if (stopped == "box" && !not_the_hosts) {
    failures.push_back("inconclusive: the guest was still allocating when its " +
                       std::to_string(box.count() / 1000) + " s box ended");
  }
  if (plan.cap_is_failure && stopped == "cap" && !not_the_hosts) {
    failures.push_back("nothing refused the guest before the cap (" + plan.cap_meaning + ")");
  }
  if (!failures.empty()) c.fail("while " + evidence + ": " + joined(failures, "; "));
  c.note(evidence + "; the host (" + who + ") " + host_said + ", a second sandbox " + second_said +
         (not_the_hosts ? "; nothing refused the guest in the box, but " + not_the_hosts_because
                        : "") +
         (out && !out->done ? "; the guest's probe ended " + ended(*out) : ""));
}

void disk_pool(ProbeContext& c, IsolationState& s) {
  Guest& b = second(c, s);
  std::vector<std::string> paths{"/", "/tmp", "/var/tmp", "/var/lib", "/dev/shm", "/run"};
  paths.insert(paths.end(), s.options.host_paths.begin(), s.options.host_paths.end());
  const std::vector<std::string> targets{s.a.scratch, "/tmp", "/dev/shm"};
  const std::string token = random_hex(10);
  const std::string marker = s.a.scratch + "/.hold-disk-" + token;
  const std::string release_base = marker + ".release";
  const Milliseconds box = s.options.fill_box;
  const Milliseconds hold = s.options.hold_box;
  auto previous = host_filesystems(paths);
  Holder holder(s.a,
                {"pool", "resource=disk", "targets=" + joined(targets),
                 "cap=" + std::to_string(s.options.disk_cap_bytes),
                 "inodes=" + std::to_string(s.options.disk_cap_inodes),
                 "box-ms=" + std::to_string(box.count()), "hold-ms=" + std::to_string(hold.count()),
                 "marker=" + marker, "release=" + release_base},
                box + hold * static_cast<long>(targets.size()) + 40s);
  struct Step {
    std::string target;
    bool held = false;
    long long lost_bytes = 0;  // the most any watched host filesystem lost while it was filled
    long long lost_inodes = 0;
    std::string where;  // which filesystem that was
  };
  std::vector<Step> steps;
  std::vector<std::string> failures;
  std::vector<std::pair<std::string, ProbeOutput>> checks;
  for (std::size_t i = 0; i < targets.size(); ++i) {
    Step step{targets[i]};
    const std::string index = "-" + std::to_string(i);
    step.held = wait_for_hold(s, s.a, holder, marker + index, box + 20s).has_value();
    if (!step.held) {
      steps.push_back(step);
      break;
    }
    const auto now = host_filesystems(paths);
    for (const auto& was : previous) {
      const auto found = std::find_if(now.begin(), now.end(),
                                      [&](const FilesystemSpace& f) { return f.path == was.path; });
      if (found == now.end()) continue;
      const long long lost_bytes =
          static_cast<long long>(was.free_bytes) - static_cast<long long>(found->free_bytes);
      const long long lost_inodes =
          static_cast<long long>(was.free_inodes) - static_cast<long long>(found->free_inodes);
      if (lost_bytes > step.lost_bytes) {
        step.lost_bytes = lost_bytes;
        step.where = was.path;
      }
      step.lost_inodes = std::max(step.lost_inodes, lost_inodes);
      if (found->free_bytes < std::max(found->total_bytes / 100, 64ull << 20)) {
        failures.push_back("while " + targets[i] + " was filled the host's filesystem of " +
                           was.path + " was drained to " + mib(found->free_bytes) + " free");
      }
      if (found->total_inodes > 0 &&
          found->free_inodes < std::max(found->total_inodes / 100, 1000ull)) {
        failures.push_back("while " + targets[i] + " was filled the host's filesystem of " +
                           was.path + " was drained to " + std::to_string(found->free_inodes) +
                           " free inodes");
      }
    }
    previous = now;
    if (i + 1 == targets.size()) {
      // Everything held: the host and a second sandbox must still write.
      try {
        checks.emplace_back("the host (" + s.host->unprivileged_name() + ") in /tmp",
                            s.host->run({"pool-check", "resource=disk", "dir=/tmp"}, true, 30s));
      } catch (const std::exception& error) {
        failures.push_back("the host's check raised " + describe(error));
      }
      for (const std::string& where : {b.scratch, std::string("/tmp")}) {
        try {
          checks.emplace_back("a second sandbox in " + where,
                              run_guest(b, {"pool-check", "resource=disk", "dir=" + where}, 60s));
        } catch (const std::exception& error) {
          failures.push_back("a second sandbox's check in " + where + " raised " + describe(error));
        }
      }
    }
    steps.push_back(step);
    release(s, s.a, release_base + index);
  }
  for (std::size_t i = 0; i < targets.size(); ++i) {
    release(s, s.a, release_base + "-" + std::to_string(i));
  }
  holder.join();
  const auto& out = holder.output();
  if (!out || steps.empty() || !steps.back().held || steps.size() != targets.size()) {
    c.fail("could not prove it: the guest never reported that it held every target (" +
           (out ? ended(*out) + " " + out->summary("error") : holder.error()) + ")");
  }
  for (const auto& [name, check] : checks) {
    if (!check.done || !check.summary("bad").empty()) {
      failures.push_back(name + " could not write 1 MiB (" +
                         (check.summary("bad").empty() ? ended(check) : check.summary("bad")) +
                         ")");
    }
  }
  std::string reach;
  const auto lines = out->infos("target");
  for (std::size_t i = 0; i < lines.size() && i < steps.size(); ++i) {
    std::istringstream fields(lines[i]);
    std::string target, bytes, stopped, inodes, inode_stopped;
    fields >> target >> bytes >> stopped >> inodes >> inode_stopped;
    auto value = [](const std::string& field) { return field.substr(field.find('=') + 1); };
    const Step& step = steps[i];
    reach += (reach.empty() ? "" : "; ") + target + ": " + mib(std::stoull(value(bytes))) + " (" +
             value(stopped) + "), " + value(inodes) + " inodes (" + value(inode_stopped) +
             "), the host lost " +
             mib(static_cast<unsigned long long>(std::max(0LL, step.lost_bytes))) +
             (step.where.empty() ? "" : " on " + step.where) + " and " +
             std::to_string(std::max(0LL, step.lost_inodes)) + " inodes";
    if (value(stopped) == "box" || value(inode_stopped) == "box") {
      failures.push_back("inconclusive: " + target + " was still being filled when the box ended");
    }
    if (value(stopped) == "cap" &&
        step.lost_bytes >= static_cast<long long>(s.options.disk_cap_bytes / 2)) {
      failures.push_back(
          target + " took " + mib(s.options.disk_cap_bytes) +
          " with no refusal and the host's filesystem of " + step.where + " lost " +
          mib(static_cast<unsigned long long>(step.lost_bytes)) +
          ": the guest writes there straight onto a host disk, unbounded below the cap");
    }
    if (value(inode_stopped) == "cap" &&
        step.lost_inodes >= static_cast<long long>(s.options.disk_cap_inodes / 2)) {
      failures.push_back(target + " took " + std::to_string(s.options.disk_cap_inodes) +
                         " inodes with no refusal and a host filesystem lost " +
                         std::to_string(step.lost_inodes) + ": unbounded below the cap");
    }
  }
  if (!out->summary("error").empty()) failures.push_back(out->summary("error"));
  if (!failures.empty()) c.fail(joined(failures, "; ") + " — " + reach);
  c.note(reach + "; the host and a second sandbox still wrote 1 MiB");
}

std::vector<PoolPlan> pool_plans() {
  std::vector<PoolPlan> plans;
  const long long cpus = std::max(1L, ::sysconf(_SC_NPROCESSORS_CONF));
  {
    PoolPlan plan{"inotify-instances", {}, false, false, ""};
    plan.arguments = {"cap=" +
                      number(host_number("/proc/sys/fs/inotify/max_user_instances", 128) + 64)};
    plans.push_back(plan);
  }
  {
    PoolPlan plan{"inotify-watches", {}, false, false, ""};
    plan.arguments = {"cap=" +
                      number(host_number("/proc/sys/fs/inotify/max_user_watches", 8192) + 1024)};
    plans.push_back(plan);
  }
  {
    const long long nr = 4096;
    // Each context is charged the events it asked for (at least 4 per CPU) against aio-max-nr.
    const long long per_context = std::max(nr, 4 * cpus);
    PoolPlan plan{"aio", {}, false, false, "", "/proc/sys/fs/aio-nr"};
    plan.arguments = {
        "nr=" + number(nr),
        "cap=" + number(host_number("/proc/sys/fs/aio-max-nr", 65536) / per_context + 8)};
    plans.push_back(plan);
  }
  {
    PoolPlan plan{"ptys", {}, true, false, "", "/proc/sys/kernel/pty/nr"};
    plan.arguments = {"cap=" + number(host_number("/proc/sys/kernel/pty/max", 4096) + 16)};
    plans.push_back(plan);
  }
  {
    const long long file_max = host_number("/proc/sys/fs/file-max", 1 << 20);
    const long long cap = std::min(file_max, kMostFilesABoxReaches) + 4096;
    PoolPlan plan{"files", {}, true, false, "", "/proc/sys/fs/file-nr"};
    plan.arguments = {"cap=" + number(cap), "max-workers=" + number(cap / 60000 + 16)};
    if (file_max > kMostFilesABoxReaches) {
      plan.premise_impossible =
          "the host's fs.file-max is " + number(file_max) + ", more than a guest can open in the " +
          "fill box (" + number(kMostFilesABoxReaches) + "): its file table is bounded by memory " +
          "alone here, and this probe cannot drain it to prove anything";
    }
    plans.push_back(plan);
  }
  {
    const long long size = host_number("/proc/sys/fs/pipe-max-size", 1 << 20);
    const long long soft = host_number("/proc/sys/fs/pipe-user-pages-soft", 16384);
    PoolPlan plan{"pipes", {}, true, false, ""};
    plan.arguments = {"size=" + number(size), "cap=" + number(soft > 0 ? soft + 1024 : 1 << 20)};
    plans.push_back(plan);
  }
  {
    long long total_kib = 0;
    std::istringstream meminfo(host_text("/proc/meminfo"));
    std::string key;
    while (meminfo >> key) {
      if (key == "MemTotal:") {
        meminfo >> total_kib;
        break;
      }
    }
    const long long cap_kib = std::min(total_kib > 0 ? total_kib / 4 : 1LL << 20, 4LL << 20);
    PoolPlan plan{"mlock", {}, true, true, "", "memory"};
    plan.arguments = {"cap=" + number(cap_kib), "max-workers=1000"};
    plan.cap_meaning = mib(static_cast<unsigned long long>(cap_kib) * 1024) +
                       " locked, a quarter of the host's memory (at most 4 GiB)";
    plans.push_back(plan);
  }
  {
    PoolPlan plan{"userns", {}, false, false, ""};
    plan.arguments = {"cap=" + number(host_number("/proc/sys/user/max_user_namespaces", 1024) + 16),
                      "max-workers=64"};
    plans.push_back(plan);
  }
  {
    const long long cap = host_number("/proc/sys/kernel/pid_max", 32768) / 4;
    PoolPlan plan{"tasks", {}, true, true, "", "tasks"};
    plan.arguments = {"cap=" + number(cap)};
    plan.cap_meaning = number(cap) + " tasks, a quarter of the host's pid space";
    plans.push_back(plan);
  }
  return plans;
}

// ---- the list ----------------------------------------------------------------------------------

struct IsolationProbe {
  std::string name;
  std::string why;
  Isolation min_rung = Isolation::container;
  bool needs_closed_egress = false;
  bool needs_second = false;
  // Narrows what a guest can reach of the HOST's kernel (its system calls, its knobs, its
  // devices). A rung above container promises the guest another kernel altogether: there,
  // once the kernel probe shows the guest's kernel is not the host's, this probe proves
  // nothing about the host and is skipped with that evidence as the reason.
  bool guards_host_kernel = false;
  std::function<void(ProbeContext&, IsolationState&)> run;
};

std::vector<IsolationProbe> isolation_probes() {
  std::vector<IsolationProbe> probes;
  auto add = [&probes](std::string name, std::string why,
                       std::function<void(ProbeContext&, IsolationState&)> run) {
    probes.push_back(
        {std::move(name), std::move(why), Isolation::container, false, false, false,
         std::move(run)});
    return &probes.back();
  };
  add("host-processes-are-invisible",
      "a host process with a unique argv is not in the guest's /proc (the probe finds its own "
      "cmdline: the positive control), and PID 1 is not the host's init",
      host_processes_invisible);
  add("the-guest-holds-no-capabilities",
      "CapInh CapPrm CapEff CapBnd CapAmb are zero, capget and PR_CAPBSET_READ agree, "
      "no_new_privs is 1, and chown, DAC override, mknod, raw sockets, sethostname and setuid "
      "all fail",
      no_capabilities);
  auto* seccomp = add("every-command-runs-under-seccomp",
      "Seccomp 2 for an argv, in /, with stdin, with environment, through sh -c (exec and child), "
      "a detached grandchild and run_code; on a guest kernel that is not the host's, the "
      "dangerous calls are attempted instead",
      seccomp_on_every_command);
  seccomp->guards_host_kernel = true;
  auto* dangerous = add("dangerous-syscalls-are-refused",
      "mount, unshare/clone/clone3 of a user namespace, setns, add_key, keyctl, bpf, "
      "perf_event_open, io_uring_setup, userfaultfd, ptrace of a sibling, open_by_handle_at with "
      "a forged handle, AF_VSOCK AF_PACKET AF_ALG sockets: each fails",
      dangerous_syscalls_refused);
  dangerous->guards_host_kernel = true;
  auto* knobs = add("proc-sys-and-sys-are-read-only",
      "/proc/sys and /sys are mounted read-only (ST_RDONLY); opening their files for writing "
      "fails, and so does mkdir in /sys",
      read_only_kernel_interfaces);
  knobs->guards_host_kernel = true;
  auto* devices = add("only-the-minimal-device-nodes-exist",
      "a walk of the visible filesystem (not /proc, /sys) finds no block device and no character "
      "device beyond null zero full random urandom tty console ptmx pts/* (by major:minor); "
      "nodes on nodev mounts outside /dev cannot be opened and do not count",
      minimal_devices);
  devices->guards_host_kernel = true;
  add("no-host-unix-socket-is-reachable",
      "0777 sockets the host listens on in /tmp /var/tmp /run /dev/shm, an abstract one, and "
      "every socket a walk finds refuse the guest, except under a declared channel (the "
      "host-tool socket directory, an egress bridge, the backend's own command channel); the "
      "probe reaches its own (the control)",
      no_host_socket);
  auto* view = add("closed-egress-sees-only-loopback",
                   "/proc/net/route, /proc/net/ipv6_route, /proc/net/dev and netlink's links, "
                   "addresses and routes show lo and nothing else",
                   closed_egress_sees_only_loopback);
  view->needs_closed_egress = true;
  auto* reach = add("closed-egress-reaches-nothing",
                    "a TCP listener of the host's (on loopback and each host address), public TCP "
                    "and UDP addresses, and a vsock listener of the host's (local CID and its own "
                    "CID) are unreachable, and the host's listeners accepted nothing",
                    closed_egress_reaches_nothing);
  reach->needs_closed_egress = true;
  auto* kernel = add("the-guest-kernel-is-not-the-hosts",
                     "the guest's kernel has a boot id of its own (or, without one, another "
                     "release): a rung above container promises another kernel",
                     guest_kernel_not_hosts);
  kernel->min_rung = Isolation::hardened_container;
  auto* cross = add("another-sandbox-is-unreachable",
                    "sandbox A's secret files (work dir, /tmp), SysV shm segment, message queue, "
                    "abstract and /tmp sockets and marker process: A sees all of them (the "
                    "control), a second sandbox sees none",
                    another_sandbox_unreachable);
  cross->needs_second = true;
  struct PoolText {
    const char* name;
    const char* resource;
    const char* why;
  };
  static const PoolText kPools[] = {
      {"inotify-instances-are-bounded", "inotify-instances",
       "the guest creates inotify instances until refused and holds them; the host (its user "
       "owns the sandboxes' user namespaces) and a second sandbox still get one"},
      {"inotify-watches-are-bounded", "inotify-watches",
       "the guest adds inotify watches until refused and holds them; the host and a second "
       "sandbox still add one"},
      {"aio-contexts-are-bounded", "aio",
       "the guest creates AIO contexts (io_setup) until refused and holds them; the host and a "
       "second sandbox still get one (io_setup refused by the filter is a pass)"},
      {"ptys-are-bounded", "ptys",
       "the guest opens /dev/ptmx until refused and holds the ptys; an unprivileged host user "
       "and a second sandbox still get one"},
      {"the-host-file-table-is-bounded", "files",
       "the guest holds open files through mmap after close (past RLIMIT_NOFILE, with more "
       "processes) until refused, up to the host's fs.file-max; an unprivileged host user and a "
       "second sandbox can still open a file"},
      {"pipe-buffer-pages-are-bounded", "pipes",
       "the guest grows pipes (F_SETPIPE_SZ) until refused and holds them; an unprivileged host "
       "user and a second sandbox still get a full default pipe"},
      {"tasks-are-bounded", "tasks",
       "the guest creates threads until refused and holds them (less 8, so the sandbox still "
       "serves); refused before a quarter of the host's pid space, and an unprivileged host user "
       "and a second sandbox can still fork"},
  };
  const auto plans = pool_plans();
  for (const auto& text : kPools) {
    const auto plan = std::find_if(plans.begin(), plans.end(),
                                   [&](const PoolPlan& p) { return p.resource == text.resource; });
    auto* probe = add(text.name, text.why,
                      [plan = *plan](ProbeContext& c, IsolationState& s) { run_pool(c, s, plan); });
    probe->needs_second = true;
  }
  auto* disk = add("host-disk-and-inodes-are-bounded",
                   "the guest fills its work dir, /tmp and /dev/shm (bytes, then inodes) until "
                   "refused or the cap and holds them; no host filesystem beneath the host's "
                   "state is drained, none loses half a cap's worth (writes landing on a host "
                   "disk unbounded), and the host and a second sandbox still write",
                   disk_pool);
  disk->needs_second = true;
  // Last, the attacks that have ended a sandbox here (a guest kernel that gave up on its user
  // namespaces, a sandbox at its own memory limit): a bound, not a failure, but nothing can be
  // attacked in that sandbox afterwards.
  const auto userns = std::find_if(plans.begin(), plans.end(),
                                   [](const PoolPlan& p) { return p.resource == "userns"; });
  auto* namespaces =
      add("user-namespaces-are-bounded",
          "the guest creates user namespaces (nested 32 deep, held by a "
          "descriptor) until refused (refusal of the first is a pass); the host "
          "and a second sandbox can still create one, or are refused by policy",
          [plan = *userns](ProbeContext& c, IsolationState& s) { run_pool(c, s, plan); });
  namespaces->needs_second = true;
  const auto mlock = std::find_if(plans.begin(), plans.end(),
                                  [](const PoolPlan& p) { return p.resource == "mlock"; });
  auto* locked = add("locked-memory-is-bounded",
                     "the guest mlocks and touches memory (past RLIMIT_MEMLOCK, with more "
                     "processes) until refused; it must be refused (or its sandbox ended) before a "
                     "quarter of the host's memory, and an unprivileged host user and a second "
                     "sandbox can still lock a page",
                     [plan = *mlock](ProbeContext& c, IsolationState& s) { run_pool(c, s, plan); });
  locked->needs_second = true;
  return probes;
}

}  // namespace

std::vector<ProbeDefinition> isolation_probe_descriptions() {
  std::vector<ProbeDefinition> out;
  for (const auto& probe : isolation_probes()) {
    std::string why = probe.why;
    if (probe.min_rung != Isolation::container) {
      why += " [" + std::string(to_string(probe.min_rung)) + " and above]";
    }
    if (probe.needs_closed_egress) why += " [egress closed]";
    if (probe.guards_host_kernel) why += " [skipped above container on another kernel]";
    if (probe.needs_second) why += " [a second sandbox]";
    out.push_back({probe.name, why, kNeeds, false, nullptr});
  }
  return out;
}

std::vector<ProbeResult> run_isolation(ConformanceSubject& subject,
                                       const IsolationOptions& options) {
  const CapabilitySet declared = subject.capabilities();
  if (!declared.contains(Capability::exec) || !declared.contains(Capability::files_in)) {
    throw InvalidArgument(
        "conformance: the isolation suite needs a subject that declares exec and files_in (it "
        "declares " +
            to_string(declared) +
            "): the probe is put into the guest and run there; a green run that attacked nothing "
            "is worse than no run",
        declared.contains(Capability::exec) ? "files_in" : "exec");
  }
  const auto declarations = subject.isolation_declarations();
  if (!declarations) {
    throw InvalidArgument(
        "conformance: the isolation suite needs the backend's declared isolation and egress "
        "modes (the subject has none: PosixGuestSubject::declare_isolation)",
        "isolation");
  }
  auto probes = isolation_probes();
  if (!options.only.empty()) {
    for (const auto& name : options.only) {
      if (std::none_of(probes.begin(), probes.end(),
                       [&](const IsolationProbe& probe) { return probe.name == name; })) {
        throw InvalidArgument("conformance: the isolation suite has no probe \"" + name + "\"",
                              "only");
      }
    }
    std::erase_if(probes, [&](const IsolationProbe& probe) {
      return std::find(options.only.begin(), options.only.end(), probe.name) == options.only.end();
    });
  }
  std::vector<ProbeResult> results;
  auto result_of = [](const IsolationProbe& probe) {
    ProbeResult result;
    result.suite = "isolation";
    result.probe = probe.name;
    result.why = probe.why;
    result.reference = false;
    return result;
  };
  if (declarations->isolation < Isolation::container) {
    for (const auto& probe : probes) {
      ProbeResult result = result_of(probe);
      result.outcome = ProbeOutcome::skipped;
      result.detail = "backend declares isolation " +
                      std::string(to_string(declarations->isolation)) +
                      ", below container: the isolation suite promises nothing there";
      results.push_back(std::move(result));
    }
    return results;
  }
  IsolationState state{subject,
                       options,
                       *declarations,
                       normalize_guest_path(subject.working_directory()),
                       declared.contains(Capability::files_out),
                       declared.contains(Capability::run_code),
                       nullptr,
                       {},
                       std::nullopt,
                       {}};
  {
    const auto started = Clock::now();
    try {
      state.host = std::make_unique<HostProbe>(locate_isolation_probe(options.probe),
                                               options.unprivileged_uid, options.unprivileged_gid);
      state.a = install(state, subject.sandbox());
    } catch (const std::exception& error) {
      ProbeResult failed;
      failed.suite = "isolation";
      failed.probe = "install-the-probe";
      failed.why = "the suite's premise: the probe was put into the guest and runs there";
      failed.outcome = ProbeOutcome::failed;
      failed.reference = false;
      failed.detail = dynamic_cast<const ProbeFailed*>(&error) != nullptr
                          ? std::string(error.what())
                          : "raised " + describe(error);
      failed.milliseconds =
          std::chrono::duration<double, std::milli>(Clock::now() - started).count();
      results.push_back(std::move(failed));
      return results;
    }
  }
  ProbeContext context(subject, ConformancePaths::under(state.work));
  for (const auto& probe : probes) {
    ProbeResult result = result_of(probe);
    std::string skip;
    if (declarations->isolation < probe.min_rung) {
      skip = "backend declares isolation " + std::string(to_string(declarations->isolation)) +
             "; this probe proves " + std::string(to_string(probe.min_rung)) + " and above";
    } else if (probe.needs_closed_egress && !declarations->egress_modes.contains(Egress::closed)) {
      skip = "backend does not declare egress closed";
    } else if (probe.needs_closed_egress && declarations->egress != Egress::closed) {
      skip = "this sandbox's egress is " + std::string(to_string(declarations->egress)) +
             ", not closed";
    }
    if (skip.empty() && probe.guards_host_kernel &&
        declarations->isolation >= Isolation::hardened_container) {
      if (!state.kernel_differs) {
        try {
          const KernelView view =
              kernel_view(run_guest(state.a, {"kernel"}, subject.exec_timeout()));
          state.kernel_differs = view.differs;
          state.kernel_evidence = view.evidence;
        } catch (const std::exception& error) {
          state.kernel_differs = false;  // unproven: the probe runs as for a shared kernel
          state.kernel_evidence = "the kernel probe failed: " + describe(error);
        }
      }
      if (*state.kernel_differs) {
        skip = "the guest's kernel is not the host's (" + state.kernel_evidence +
               "): this probe narrows the host kernel's surface, which a " +
               std::string(to_string(declarations->isolation)) +
               " guest does not reach (the-guest-kernel-is-not-the-hosts must hold instead)";
      }
    }
    if (!skip.empty()) {
      result.outcome = ProbeOutcome::skipped;
      result.detail = skip;
      results.push_back(std::move(result));
      continue;
    }
    const auto started = Clock::now();
    context.take_note();
    try {
      if (!state.a_ended.empty()) {
        throw ProbeFailed("could not prove it: sandbox A no longer serves (it ended while the " +
                          state.a_ended + " pool was filled)");
      }
      if (probe.needs_second && state.second_error.empty() && !state.b &&
          subject.second_sandbox() == nullptr) {
        throw ProbeSkipped("the subject offers no second sandbox (another conversation's key)");
      }
      probe.run(context, state);
      result.outcome = ProbeOutcome::passed;
    } catch (const ProbeFailed& failed) {
      result.outcome = ProbeOutcome::failed;
      result.detail = failed.what();
    } catch (const ProbeSkipped& skipped) {
      result.outcome = ProbeOutcome::skipped;
      result.detail = skipped.what();
    } catch (const std::exception& error) {
      result.outcome = ProbeOutcome::failed;
      result.detail = "raised " + describe(error);
    }
    result.milliseconds = std::chrono::duration<double, std::milli>(Clock::now() - started).count();
    if (result.detail.size() > 1500) result.detail = result.detail.substr(0, 1500) + "…";
    result.note = context.take_note();
    results.push_back(std::move(result));
  }
  return results;
}

}  // namespace detail

std::vector<ProbeResult> run_isolation_conformance(ConformanceSubject& subject,
                                                   const IsolationOptions& options) {
  return detail::run_isolation(subject, options);
}

std::vector<ProbeResult> assert_isolation_conformance(ConformanceSubject& subject,
                                                      const IsolationOptions& options) {
  return assert_passed(run_isolation_conformance(subject, options));
}

}  // namespace airlock::conformance
