// A host process for the linux backend's crash and cross-process tests.
//
//   linux_test_host STATE_DIR acquire SCOPE KIND   acquire one sandbox, print its instance id
//   linux_test_host STATE_DIR hold SCOPE COUNT     acquire COUNT sandboxes (each running a
//                                                  background sleep), print "ready", then wait
//                                                  to be killed
//   linux_test_host STATE_DIR churn SCOPE          acquire, exec and dispose in a loop until
//                                                  killed (a crash lands at a random step)
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <string>

#include "airlock/backends/linux.hpp"
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
  const std::string mode = argv[2];
  const SandboxKey key{argv[3], "thread", "agent"};
  try {
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
    return 1;
  }
  std::cerr << "unknown mode\n";
  return 2;
}
