#include "backends/docker/seccomp_profile.hpp"

#include <fcntl.h>
#include <seccomp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "airlock/errors.hpp"
#include "backends/kit/guest_seccomp_policy.hpp"
#include "base/syscall_error.hpp"

namespace airlock::docker {
namespace {

using nlohmann::json;
namespace policy = airlock::guest_seccomp;

const char* operator_name(policy::Op op) {
  switch (op) {
    case policy::Op::eq:
      return "SCMP_CMP_EQ";
    case policy::Op::ne:
      return "SCMP_CMP_NE";
    case policy::Op::gt:
      return "SCMP_CMP_GT";
    case policy::Op::masked_eq:
      return "SCMP_CMP_MASKED_EQ";
  }
  return "SCMP_CMP_EQ";
}

json refusal(const json& names, int error) {
  return {{"names", names}, {"action", "SCMP_ACT_ERRNO"}, {"errnoRet", error}};
}

json condition_json(const policy::Condition& condition) {
  return {{"index", condition.argument},
          {"value", condition.value},
          {"valueTwo", condition.value_two},
          {"op", operator_name(condition.op)}};
}

std::string build_profile() {
  std::set<std::string> named;
  json allowed = json::array();
  for (std::span<const char* const> family : policy::kAllowedFamilies) {
    for (const char* name : family) {
      allowed.push_back(name);
      named.insert(name);
    }
  }
  json denied = json::array();
  for (const char* name : policy::kDenied) {
    denied.push_back(name);
    named.insert(name);
  }
  const std::vector<policy::Rule> rules = policy::argument_rules();
  for (const policy::Rule& rule : rules) named.insert(rule.syscall);

  // What the policy leaves out answers ENOSYS by the profile's default — on engines that read
  // defaultErrnoRet. Docker Engine 20.10 does not (its default errno is EPERM, which stops
  // glibc's clone3 → clone fallback, so threads would fail), so every syscall this host's
  // libseccomp knows that the policy does not name is refused with ENOSYS explicitly too.
  json left_out = json::array();
  for (int number = 0; number < 1024; ++number) {
    char* name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, number);
    if (name == nullptr) continue;
    if (!named.contains(name)) left_out.push_back(name);
    std::free(name);
  }

  json syscalls = json::array();
  syscalls.push_back({{"names", allowed}, {"action", "SCMP_ACT_ALLOW"}});
  syscalls.push_back(refusal(denied, policy::kDeniedErrno));
  syscalls.push_back(refusal(left_out, policy::kDefaultErrno));
  // One entry per argument rule: the conditions of one entry must all hold (libseccomp's AND),
  // and the entries of one syscall are alternatives, as the linux backend adds them.
  for (const policy::Rule& rule : rules) {
    json args = json::array();
    for (const policy::Condition& condition : rule.conditions)
      args.push_back(condition_json(condition));
    json entry = rule.allow ? json{{"names", {rule.syscall}}, {"action", "SCMP_ACT_ALLOW"}}
                            : refusal(json::array({rule.syscall}), rule.error);
    entry["args"] = std::move(args);
    syscalls.push_back(std::move(entry));
  }
  // The one argument rule set that leaves values to the default (personality: five values
  // allowed), completed with ENOSYS for the same reason.
  std::vector<std::uint32_t> personas;
  for (std::uint64_t persona : policy::kPersonalities) {
    personas.push_back(static_cast<std::uint32_t>(persona));
  }
  std::vector<std::pair<std::uint32_t, std::uint32_t>> others;
  policy::complement_patterns(personas, 0, 0, others);
  for (const auto& [mask, value] : others) {
    json entry = refusal(json::array({"personality"}), policy::kDefaultErrno);
    entry["args"] = json::array({condition_json({0, policy::Op::masked_eq, mask, value})});
    syscalls.push_back(std::move(entry));
  }

  json profile = {
    {"defaultAction", "SCMP_ACT_ERRNO"},
    {"defaultErrnoRet", policy::kDefaultErrno},
#if defined(__x86_64__)
    {"architectures", {"SCMP_ARCH_X86_64"}},
#elif defined(__aarch64__)
    {"architectures", {"SCMP_ARCH_AARCH64"}},
#endif
    {"syscalls", std::move(syscalls)},
  };
  return profile.dump();
}

}  // namespace

const std::string& guest_seccomp_profile() {
  static const std::string profile = build_profile();
  return profile;
}

SeccompOption::SeccompOption(EngineFlavour flavour) {
  const std::string& profile = guest_seccomp_profile();
  if (flavour == EngineFlavour::docker) {
    value_ = profile;
    return;
  }
  const char* directory = std::getenv("TMPDIR");
  std::string path =
      std::string(directory && *directory ? directory : "/tmp") + "/airlock-seccomp-XXXXXX.json";
  const int fd = ::mkstemps(path.data(), 5);
  if (fd < 0) {
    throw BackendError("the sandbox's seccomp profile could not be written for the engine",
                       base::errno_error("mkstemps", path));
  }
  file_ = path;
  std::size_t written = 0;
  bool ok = ::fchmod(fd, 0644) == 0;
  while (ok && written < profile.size()) {
    const ssize_t step = ::write(fd, profile.data() + written, profile.size() - written);
    if (step < 0 && errno == EINTR) continue;
    ok = step > 0;
    if (ok) written += static_cast<std::size_t>(step);
  }
  ok = ::close(fd) == 0 && ok;
  if (!ok) {
    ::unlink(file_.c_str());
    throw BackendError("the sandbox's seccomp profile could not be written for the engine", path);
  }
  value_ = file_;
}

SeccompOption::~SeccompOption() {
  if (!file_.empty()) ::unlink(file_.c_str());
}

}  // namespace airlock::docker
