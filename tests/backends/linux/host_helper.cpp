// A host process for the linux backend's crash and cross-process tests.
//
//   linux_test_host STATE_DIR acquire SCOPE KIND   acquire one sandbox, print its instance id
//   linux_test_host STATE_DIR hold SCOPE COUNT     acquire COUNT sandboxes (each running a
//                                                  background sleep), print "ready", then wait
//                                                  to be killed
//   linux_test_host STATE_DIR pool SCOPE COUNT     a backend whose warm pool keeps COUNT
//                                                  sandboxes of the default shape: print each
//                                                  ready one's instance id, then "ready", then
//                                                  wait to be killed
//   linux_test_host STATE_DIR churn SCOPE          acquire, exec and dispose in a loop until
//                                                  killed (a crash lands at a random step)
//   linux_test_host STATE_DIR probe SCOPE          acquire one sandbox and report, one fact per
//                                                  line, what its boundary looks like; then
//                                                  purge everything
//
// $AIRLOCK_TEST_DELEGATED_CGROUPS (colon-separated) becomes the config's delegated_cgroups.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>

#include "airlock/backends/linux.hpp"
#include "airlock/conformance.hpp"
#include "airlock/errors.hpp"

using namespace airlock;

namespace {

SandboxSpec spec_for(const std::string& kind) {
  SandboxSpec::Fields fields;
  fields.kind = kind;
  return SandboxSpec(std::move(fields));
}

ExecOptions quick() {
  ExecOptions options;
  options.working_directory = kDefaultWorkDir;
  options.timeout = std::chrono::seconds(30);
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::cerr << "usage: linux_test_host STATE_DIR acquire|hold|churn SCOPE [KIND|COUNT]\n";
    return 2;
  }
  LinuxBackendConfig config;
  config.state_dir = argv[1];
  if (const char* delegated = std::getenv("AIRLOCK_TEST_DELEGATED_CGROUPS")) {
    std::string list = delegated;
    for (std::size_t start = 0; start < list.size();) {
      std::size_t end = list.find(':', start);
      if (end == std::string::npos) end = list.size();
      if (end > start) config.delegated_cgroups.push_back(list.substr(start, end - start));
      start = end + 1;
    }
  }
  const std::string mode = argv[2];
  const SandboxKey key{argv[3], "thread", "agent"};
  try {
    if (mode == "pool" && argc == 5) {
      config.pool.size = static_cast<std::uint32_t>(std::atoi(argv[4]));
      config.pool.prewarm = true;
      auto backend = make_linux_backend(config);
      for (int attempt = 0; attempt < 600; ++attempt) {
        std::vector<std::string> ready;
        for (const auto& entry : backend->list_sandboxes()) {
          if (entry.state == "pooled") ready.push_back(entry.instance_id);
        }
        if (ready.size() >= config.pool.size) {
          for (const auto& id : ready) std::cout << id << "\n";
          std::cout << "ready" << std::endl;
          for (;;) ::pause();
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      std::cerr << "the pool never filled\n";
      return 1;
    }
    auto backend = make_linux_backend(config);
    if (mode == "acquire" && argc == 5) {
      auto sandbox = backend->acquire(key, spec_for(argv[4]));
      std::cout << sandbox->instance_id() << std::endl;
      return 0;
    }
    if (mode == "hold" && argc == 5) {
      const int count = std::atoi(argv[4]);
      for (int i = 0; i < count; ++i) {
        auto sandbox = backend->acquire(key, spec_for("held-" + std::to_string(i)));
        sandbox->exec(Command::shell("sleep 1000 > /dev/null 2>&1 &"), quick());
        std::cout << sandbox->instance_id() << std::endl;
      }
      std::cout << "ready" << std::endl;
      for (;;) ::pause();
    }
    if (mode == "probe") {
      std::shared_ptr<Sandbox> sandbox;
      try {
        sandbox = backend->acquire(key, spec_for("probe"));
      } catch (const InvalidArgument& refused) {
        std::cout << "refused=" << refused.check() << "\n" << refused.what() << std::endl;
        return 0;
      }
      const ExecResult facts = sandbox->exec(
          Command::shell("echo uid=$(id -u); grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' "
                         "/proc/self/status | tr -d '\t'; echo procs=$(ls /proc | grep -c "
                         "'^[0-9]'); echo x > /usr/probe 2>/dev/null && echo usr=writable || "
                         "echo usr=read-only; cat /etc/shadow >/dev/null 2>&1 && echo shadow=read "
                         "|| echo shadow=denied; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d "
                         "' ' | sed 's/^/netdev=/'; test -e /home && echo home=shown || "
                         "echo home=hidden; echo groups=$(grep '^Groups:' /proc/self/status | "
                         "tr -cd '0-9 ' | tr -s ' ')"),
          quick());
      std::cout << facts.stdout_bytes;
      // Who the guest's root is on the host: the init's uid, from its record.
      for (const auto& entry : std::filesystem::directory_iterator(
               std::filesystem::path(argv[1]) / "linux")) {
        std::stringstream read;
        read << std::ifstream(entry.path() / "record.json").rdbuf();
        const std::string text = read.str();
        const auto at = text.find("\"init_pid\": ");
        if (at == std::string::npos) continue;
        const long pid = std::atol(text.c_str() + at + 12);
        std::ifstream status("/proc/" + std::to_string(pid) + "/status");
        std::string line;
        while (std::getline(status, line)) {
          if (line.rfind("Uid:", 0) == 0) {
            std::istringstream fields(line.substr(4));
            long uid = -1;
            fields >> uid;
            std::cout << "init_host_uid=" << uid << "\n";
          }
        }
      }
      // A file only this host user may read, in a host directory the guest is shown.
      if (const char* secret = std::getenv("AIRLOCK_TEST_USER_SECRET")) {
        const ExecResult read = sandbox->exec(
            Command::argv({"cat", secret}), quick());
        std::cout << "user_secret=" << (read.exit_code == 0 ? "read" : "denied") << "\n";
      }
      sandbox->write_file("a/b.txt", "round trip", kDefaultWorkDir);
      std::cout << "file=" << sandbox->read_file("a/b.txt", kDefaultWorkDir, 100) << "\n";
      sandbox->exec(Command::shell("ln -s /etc link"), quick());
      try {
        sandbox->write_file("link/x", "y", kDefaultWorkDir);
        std::cout << "link=followed\n";
      } catch (const ConfinementError&) {
        std::cout << "link=refused\n";
      }
      // The file plane's conformance suites against this very sandbox: links planted by the
      // guest, raced, FIFOs, hard links — whichever side of the boundary the plane runs on.
      {
        conformance::PosixGuestSubject subject(*sandbox, kDefaultWorkDir,
                                               *backend->capabilities());
        int failed = 0;
        int passed = 0;
        for (const auto& results : {conformance::run_files_out_conformance(subject),
                                    conformance::run_files_in_conformance(subject),
                                    conformance::run_files_delete_conformance(subject)}) {
          for (const auto& result : results) {
            if (result.outcome == conformance::ProbeOutcome::failed) {
              ++failed;
              std::cout << "conformance_failure=" << result.suite << "/" << result.probe << ": "
                        << result.detail << "\n";
            } else if (result.outcome == conformance::ProbeOutcome::passed) {
              ++passed;
            }
          }
        }
        std::cout << "file_conformance=" << (failed == 0 && passed > 20 ? "passed" : "failed")
                  << "\n";
      }
      ExecOptions short_timeout = quick();
      short_timeout.timeout = std::chrono::milliseconds(300);
      try {
        sandbox->exec(Command::argv({"sleep", "30"}), short_timeout);
      } catch (const Timeout& timeout) {
        std::cout << "timeout_confirmed=" << timeout.kill_confirmed().value_or(false) << "\n";
      }
      SandboxSpec::Fields limited;
      limited.kind = "limited";
      limited.resources.pids = 10;
      try {
        auto bounded = backend->acquire(key, SandboxSpec(limited));
        std::cout << "limits=accepted\n";
        // Twenty background sleeps under a limit of ten processes: some must be refused.
        const ExecResult forks = bounded->exec(
            Command::shell("for i in $(seq 20); do sleep 1 & done 2>&1 | grep -c . ; wait"),
            quick());
        std::cout << "pids=" << (forks.stdout_bytes != "0\n" ? "bounded" : "unbounded") << "\n";
      } catch (const InvalidArgument&) {
        std::cout << "limits=refused\n";
      }
      std::cout << "purged=" << backend->purge_all() << std::endl;
      return 0;
    }
    if (mode == "churn") {
      for (unsigned round = 0;; ++round) {
        const std::string kind = "churn-" + std::to_string(round % 3);
        auto sandbox = backend->acquire(key, spec_for(kind));
        sandbox->exec(Command::argv({"true"}), quick());
        if (round % 2 == 0) backend->dispose_kind(key, kind, sandbox->instance_id());
      }
    }
  } catch (const Error& error) {
    std::cerr << error_detail(error) << std::endl;
    // A probe that failed half-way leaves nothing running behind it.
    if (mode == "probe") {
      try {
        make_linux_backend(config)->purge_all();
      } catch (...) {
      }
    }
    return 1;
  }
  std::cerr << "unknown mode\n";
  return 2;
}
