#include "backends/linux/seccomp_policy.hpp"

#include <errno.h>
#include <seccomp.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "airlock/errors.hpp"
#include "backends/kit/guest_seccomp_policy.hpp"
#include "base/unique_fd.hpp"

namespace airlock::linux_backend {
namespace {

// The allowlist and its argument rules are the shared guest policy
// (src/backends/guest_seccomp_policy.hpp); docs/backends/linux-seccomp.md gives each family's
// reason. A name that is not a syscall on the architecture being compiled for (the 32-bit
// variants, the x86-only ones elsewhere) is skipped. What is not named fails with ENOSYS.
namespace policy = airlock::guest_seccomp;

struct ContextDeleter {
  void operator()(void* context) const { seccomp_release(context); }
};

[[noreturn]] void failed(const std::string& what, int result) {
  throw BackendError("the sandbox's seccomp filter could not be built",
                     what + ": " + std::to_string(-result));
}

int resolve(const char* name) {
  int number = seccomp_syscall_resolve_name(name);
#if defined(__x86_64__) || defined(__aarch64__)
  if (number == __NR_SCMP_ERROR) {
    for (const policy::LateSyscall& late : policy::kLateSyscalls) {
      if (std::string_view(late.name) == name) number = late.number;
    }
  }
#endif
  return number;  // negative: not a syscall here (or a pseudo number for another architecture)
}

class PolicyBuilder {
 public:
  PolicyBuilder() : context_(seccomp_init(SCMP_ACT_ERRNO(policy::kDefaultErrno))) {
    if (!context_) throw BackendError("the sandbox's seccomp filter could not be built", "init");
    if (int rc = seccomp_attr_set(ctx(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
        rc != 0) {
      failed("bad-arch action", rc);
    }
    // no_new_privs is set by the init itself, just before the filter is loaded.
    if (int rc = seccomp_attr_set(ctx(), SCMP_FLTATR_CTL_NNP, 0); rc != 0) {
      failed("nnp attribute", rc);
    }
    // A binary search over syscall numbers instead of one comparison per listed syscall.
    summary_.binary_tree = seccomp_attr_set(ctx(), SCMP_FLTATR_CTL_OPTIMIZE, 2) == 0;
  }

  void allow(std::span<const char* const> names) {
    for (const char* name : names) {
      if (const int number = claim(name, Kind::unconditional); number >= 0) {
        add(SCMP_ACT_ALLOW, number, name, {});
        ++summary_.allowed;
      }
    }
  }

  void deny(std::span<const char* const> names) {
    for (const char* name : names) {
      if (const int number = claim(name, Kind::unconditional); number >= 0) {
        add(SCMP_ACT_ERRNO(policy::kDeniedErrno), number, name, {});
        ++summary_.denied;
      }
    }
  }

  // Rules on a syscall's arguments; `name` must get all its rules through here.
  void rule(const char* name, std::uint32_t action, std::vector<scmp_arg_cmp> conditions) {
    const int number = claim(name, Kind::conditional);
    if (number < 0) return;
    add(action, number, name, conditions);
  }

  std::string export_bpf() {
    for (const auto& [number, kind] : claimed_) {
      if (kind == Kind::conditional) ++summary_.conditional;
    }
    base::UniqueFd memory(::memfd_create("airlock-seccomp", MFD_CLOEXEC));
    if (!memory) throw BackendError("the sandbox's seccomp filter could not be built", "memfd");
    if (int rc = seccomp_export_bpf(ctx(), memory.get()); rc != 0) failed("export", rc);
    struct stat info {};
    if (::fstat(memory.get(), &info) != 0) {
      throw BackendError("the sandbox's seccomp filter could not be built", "fstat");
    }
    std::string program(static_cast<std::size_t>(info.st_size), '\0');
    if (::pread(memory.get(), program.data(), program.size(), 0) !=
        static_cast<ssize_t>(program.size())) {
      throw BackendError("the sandbox's seccomp filter could not be built", "read back");
    }
    summary_.instructions = program.size() / 8;  // sizeof(struct sock_filter)
    if (summary_.instructions >= kSeccompInstructionLimit) {
      throw BackendError("the sandbox's seccomp filter could not be built",
                         std::to_string(summary_.instructions) +
                             " BPF instructions, over the kernel's limit");
    }
    return program;
  }

  const SeccompPolicySummary& summary() const noexcept { return summary_; }

 private:
  enum class Kind { unconditional, conditional };

  scmp_filter_ctx ctx() const noexcept { return context_.get(); }

  // Each syscall is either unconditional (allowed or denied) or conditional, never both: a rule
  // without conditions silently replaces every conditional rule of its syscall.
  int claim(const char* name, Kind kind) {
    const int number = resolve(name);
    if (number < 0) return -1;
    const auto [entry, inserted] = claimed_.emplace(number, kind);
    if (!inserted && (kind == Kind::unconditional || entry->second != kind)) {
      throw BackendError("the sandbox's seccomp filter could not be built",
                         std::string(name) + " is listed twice");
    }
    return number;
  }

  void add(std::uint32_t action, int number, const char* name,
           const std::vector<scmp_arg_cmp>& conditions) {
    const int rc = conditions.empty()
                       ? seccomp_rule_add(ctx(), action, number, 0)
                       : seccomp_rule_add_array(ctx(), action, number,
                                                static_cast<unsigned int>(conditions.size()),
                                                conditions.data());
    if (rc != 0) failed(name, rc);
  }

  std::unique_ptr<void, ContextDeleter> context_;
  std::map<int, Kind> claimed_;
  SeccompPolicySummary summary_;
};

scmp_compare compare_of(policy::Op op) {
  switch (op) {
    case policy::Op::eq:
      return SCMP_CMP_EQ;
    case policy::Op::ne:
      return SCMP_CMP_NE;
    case policy::Op::gt:
      return SCMP_CMP_GT;
    case policy::Op::masked_eq:
      return SCMP_CMP_MASKED_EQ;
  }
  return SCMP_CMP_EQ;
}

void add_argument_rules(PolicyBuilder& builder) {
  for (const policy::Rule& rule : policy::argument_rules()) {
    std::vector<scmp_arg_cmp> conditions;
    for (const policy::Condition& condition : rule.conditions) {
      conditions.push_back(scmp_arg_cmp{condition.argument, compare_of(condition.op),
                                        condition.value, condition.value_two});
    }
    builder.rule(rule.syscall, rule.allow ? SCMP_ACT_ALLOW : SCMP_ACT_ERRNO(rule.error),
                 std::move(conditions));
  }
}

PolicyBuilder build_policy() {
  PolicyBuilder builder;
  for (std::span<const char* const> family : policy::kAllowedFamilies) builder.allow(family);
  builder.deny(policy::kDenied);
  add_argument_rules(builder);
  return builder;
}

}  // namespace

std::string compile_seccomp_filter() { return build_policy().export_bpf(); }

SeccompPolicySummary seccomp_policy_summary() {
  PolicyBuilder policy = build_policy();
  policy.export_bpf();
  return policy.summary();
}

}  // namespace airlock::linux_backend
