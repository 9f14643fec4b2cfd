// What the conformance suites share: the probe context with its refusal helpers, the runner,
// and the race driver. Internal to src/core.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "airlock/conformance.hpp"
#include "airlock/errors.hpp"

namespace airlock::conformance::detail {

// A probe's assertion failed: `what` is the failure text the result carries.
class ProbeFailed : public std::exception {
 public:
  explicit ProbeFailed(std::string what) : what_(std::move(what)) {}
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  std::string what_;
};

// A probe asked to be skipped at run time (its premise is impossible on this subject).
class ProbeSkipped : public std::exception {
 public:
  explicit ProbeSkipped(std::string why) : why_(std::move(why)) {}
  const char* what() const noexcept override { return why_.c_str(); }

 private:
  std::string why_;
};

// "ConfinementError: message" for an airlock error, "exception: what()" for anything else.
std::string describe(const std::exception& error);

class ProbeContext {
 public:
  ProbeContext(ConformanceSubject& subject, ConformancePaths paths)
      : subject_(subject), paths_(std::move(paths)) {}

  ConformanceSubject& subject() { return subject_; }
  Sandbox& sandbox() { return subject_.sandbox(); }
  const ConformancePaths& paths() const { return paths_; }
  const std::string& work() const { return paths_.work; }
  bool declares(Capability capability) const {
    return subject_.capabilities().contains(capability);
  }

  [[noreturn]] void fail(const std::string& what) { throw ProbeFailed(what); }
  // Evidence for the result, kept whatever the outcome (the last note wins).
  void note(std::string text) { note_ = std::move(text); }
  std::string take_note() { return std::exchange(note_, std::string()); }
  void check(bool condition, const std::string& what) {
    if (!condition) fail(what);
  }

  // `call` must raise `Expected` (or a subclass). Returning normally, or raising anything
  // else, fails the probe with `what` and what happened instead.
  template <typename Expected, typename Call>
  void expect_refused(std::string_view expected_name, const std::string& what, Call&& call) {
    try {
      call();
    } catch (const Expected&) {
      return;
    } catch (const ProbeFailed&) {
      throw;
    } catch (const std::exception& error) {
      fail(what + ": raised " + describe(error) + "; expected " + std::string(expected_name));
    }
    fail(what + ": returned normally; expected " + std::string(expected_name));
  }

  // Guest commands, run in "/" unless told otherwise, under the subject's exec timeout.
  ExecResult run(std::vector<std::string> argv, const std::string& working_directory = "/");
  ExecResult shell(const std::string& line, const std::string& working_directory = "/");
  // `test <flag> <path>` in the guest: true on exit 0, false on exit 1, a failure otherwise.
  bool guest_test(std::string_view flag, const std::string& path);
  // The bytes `cat` prints; a failure when cat exits non-zero.
  std::string guest_cat(const std::string& path);

 private:
  ConformanceSubject& subject_;
  ConformancePaths paths_;
  std::string note_;
};

struct ProbeDefinition {
  std::string name;
  std::string why;
  CapabilitySet needs;
  bool reference = true;
  std::function<void(ProbeContext&)> run;
};

std::vector<ProbeDefinition> files_out_probes();
std::vector<ProbeDefinition> files_in_probes();
std::vector<ProbeDefinition> exec_probes();
std::vector<ProbeDefinition> files_delete_probes();
std::vector<ProbeDefinition> egress_probes(const std::string& allowed_url,
                                           const std::string& denied_url,
                                           Milliseconds exec_timeout);

// The isolation suite's probes, for listings (its runner is its own: conformance_isolation.cpp).
std::vector<ProbeDefinition> isolation_probe_descriptions();

struct SuitePlan {
  std::string suite;
  Capability gate;
  // Plants what the suite shares before any probe; null computes the paths only.
  std::function<void(ProbeContext&)> plant;
};

// The runner: the gate (refused when undeclared), the planting, then every probe in order —
// skipped when it needs an undeclared capability, failed on its assertion or on anything it
// raises. A measurement checks no gate and skips nothing.
std::vector<ProbeResult> run_suite(ConformanceSubject& subject, const SuitePlan& plan,
                                   const std::vector<ProbeDefinition>& probes,
                                   const RunOptions& options);

// A race: one thread flips an entry between a hostile and a benign state through the guest
// while this thread attacks it, until `budget` has passed or enough of both happened (1000
// attacks and 200 flips). A flip returns whether it took (the attack may have got in its way:
// a write re-creating a parent, say); each state is held a random moment so both are met. The
// attack reports its own verdict by failing the probe. Returns how many flips took and attacks
// ran; the probe fails when either stayed under two — a race that never interleaved proved
// nothing.
struct RaceCount {
  long flips = 0;
  long attacks = 0;
};
RaceCount race(ProbeContext& context, const std::function<bool()>& to_hostile,
               const std::function<bool()>& to_benign, const std::function<void()>& attack,
               Milliseconds budget = Milliseconds(3000));

// A path relative to the working directory whose absolute form is at least 4096 bytes, made of
// names of at most 200 bytes: the kernel's PATH_MAX, not NAME_MAX, is what refuses it.
std::string overlong_path(const ConformancePaths& paths);

// `call` must be refused as bad input (InvalidArgument) or by the guest's kernel (SystemError,
// ENAMETOOLONG say): never a crash, a hang, or a success.
template <typename Call>
void refused_cleanly(ProbeContext& context, const std::string& what, Call&& call) {
  try {
    call();
  } catch (const InvalidArgument&) {
    return;
  } catch (const SystemError&) {
    return;
  } catch (const ProbeFailed&) {
    throw;
  } catch (const std::exception& error) {
    context.fail(what + ": raised " + describe(error) +
                 "; expected InvalidArgument or SystemError (ENAMETOOLONG)");
  }
  context.fail(what + ": was not refused");
}

}  // namespace airlock::conformance::detail
