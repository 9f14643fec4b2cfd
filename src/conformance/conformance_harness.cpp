// The conformance harness: subjects, shared paths, the runner with its gating rules, the race
// driver, and the public run/assert entry points.
#include <atomic>
#include <chrono>
#include <mutex>
#include <random>
#include <thread>

#include "airlock/paths.hpp"
#include "conformance/conformance_internal.hpp"

namespace airlock::conformance {
namespace {

using Clock = std::chrono::steady_clock;

std::string dirname_of(const std::string& absolute) {
  const auto slash = absolute.rfind('/');
  return slash == 0 || slash == std::string::npos ? "/" : absolute.substr(0, slash);
}

// A failure can quote a 4096-byte path; a report line stays readable, cut on a UTF-8 boundary.
std::string bounded(std::string detail) {
  constexpr std::size_t kLimit = 600;
  if (detail.size() <= kLimit) return detail;
  std::size_t cut = kLimit;
  while (cut > 0 && (static_cast<unsigned char>(detail[cut]) & 0xC0) == 0x80) --cut;
  detail.resize(cut);
  return detail + "…";
}

}  // namespace

// ---- subjects and paths ------------------------------------------------------------------------

PosixGuestSubject::PosixGuestSubject(Sandbox& sandbox, std::string working_directory,
                                     CapabilitySet capabilities, Milliseconds exec_timeout)
    : sandbox_(sandbox),
      working_directory_(normalize_guest_path(working_directory)),
      capabilities_(capabilities),
      exec_timeout_(exec_timeout) {
  if (working_directory_.empty() || working_directory_.front() != '/') {
    throw InvalidArgument("conformance: the working directory must be an absolute guest path",
                          "working_directory");
  }
}

void PosixGuestSubject::plant_file(const std::string& absolute_path, std::string_view content) {
  sandbox_.write_file(absolute_path, content, dirname_of(absolute_path));
}

void PosixGuestSubject::declare_isolation(IsolationDeclarations declarations) {
  isolation_ = std::move(declarations);
}

void PosixGuestSubject::offer_second_sandbox(std::function<std::shared_ptr<Sandbox>()> acquire) {
  std::lock_guard lock(second_mutex_);
  acquire_second_ = std::move(acquire);
  second_.reset();
}

std::optional<IsolationDeclarations> PosixGuestSubject::isolation_declarations() const {
  return isolation_;
}

Sandbox* PosixGuestSubject::second_sandbox() {
  std::lock_guard lock(second_mutex_);
  if (!second_ && acquire_second_) {
    auto acquire = std::exchange(acquire_second_, nullptr);  // once, even when it throws
    second_ = acquire();
  }
  return second_.get();
}

void PosixGuestSubject::run_planting(const std::vector<std::string>& argv,
                                     const std::string& what) {
  ExecOptions options;
  options.working_directory = "/";
  options.timeout = exec_timeout_;
  options.max_output_bytes = 64 * 1024;
  const ExecResult result = sandbox_.exec(Command::argv(argv), options);
  if (result.exit_code != 0) {
    const std::string said = result.stderr_text();
    if (said.find("Invalid cross-device link") != std::string::npos) {
      throw PremiseImpossible(what + " is impossible here: " + said);
    }
    throw SystemError("conformance: planting " + what + " failed: " + argv.front() + " exited " +
                          std::to_string(result.exit_code) + ": " + said,
                      0, argv.back());
  }
}

void PosixGuestSubject::plant_symlink(const std::string& absolute_path, const std::string& target) {
  run_planting({"ln", "-sfn", target, absolute_path}, "the link " + absolute_path);
}

void PosixGuestSubject::plant_fifo(const std::string& absolute_path) {
  run_planting({"mkfifo", absolute_path}, "the FIFO " + absolute_path);
}

void PosixGuestSubject::plant_hard_link(const std::string& absolute_path,
                                        const std::string& target) {
  run_planting({"ln", target, absolute_path}, "the hard link " + absolute_path);
}

ConformancePaths ConformancePaths::under(std::string_view working_directory) {
  ConformancePaths paths;
  paths.work = normalize_guest_path(working_directory);
  paths.outside = paths.work + "-outside";
  return paths;
}

std::string ConformancePaths::beyond(std::string_view name) const {
  // work-outside is a sibling: one step up, then across.
  const auto slash = work.rfind('/');
  return "../" + outside.substr(slash + 1) + "/" + std::string(name);
}

ConformancePaths plant_layout(ConformanceSubject& subject) {
  const ConformancePaths paths = ConformancePaths::under(subject.working_directory());
  subject.plant_file(paths.inside(), kInside);
  subject.plant_file(paths.plain(), "not a directory\n");
  subject.plant_file(paths.secret(), kSecret);
  subject.plant_file(paths.nested_secret(), kSecret);
  subject.plant_symlink(paths.linked_directory(), paths.outside);
  subject.plant_symlink(paths.linked_file(), paths.secret());
  return paths;
}

std::string_view to_string(ProbeOutcome outcome) noexcept {
  switch (outcome) {
    case ProbeOutcome::passed:
      return "passed";
    case ProbeOutcome::failed:
      return "failed";
    case ProbeOutcome::skipped:
      return "skipped";
  }
  return "failed";
}

namespace detail {

std::string describe(const std::exception& error) {
  if (const auto* ours = dynamic_cast<const Error*>(&error)) {
    return ours->type() + ": " + ours->message();
  }
  return std::string("exception: ") + error.what();
}

// ---- the probe context
// ---------------------------------------------------------------------------

ExecResult ProbeContext::run(std::vector<std::string> argv, const std::string& working_directory) {
  ExecOptions options;
  options.working_directory = working_directory;
  options.timeout = subject_.exec_timeout();
  options.max_output_bytes = 4 * kReadCap;
  return sandbox().exec(Command::argv(std::move(argv)), options);
}

ExecResult ProbeContext::shell(const std::string& line, const std::string& working_directory) {
  ExecOptions options;
  options.working_directory = working_directory;
  options.timeout = subject_.exec_timeout();
  options.max_output_bytes = 4 * kReadCap;
  return sandbox().exec(Command::shell(line), options);
}

bool ProbeContext::guest_test(std::string_view flag, const std::string& path) {
  const ExecResult result = run({"test", std::string(flag), path});
  if (result.exit_code > 1) {
    fail("the guest could not run `test " + std::string(flag) + " " + path + "`: exit " +
         std::to_string(result.exit_code) + " " + result.stderr_text());
  }
  return result.exit_code == 0;
}

std::string ProbeContext::guest_cat(const std::string& path) {
  const ExecResult result = run({"cat", path});
  if (result.exit_code != 0) {
    fail("`cat " + path + "` in the guest exited " + std::to_string(result.exit_code) + ": " +
         result.stderr_text());
  }
  return result.stdout_bytes;
}

// ---- the runner
// ----------------------------------------------------------------------------------

std::vector<ProbeResult> run_suite(ConformanceSubject& subject, const SuitePlan& plan,
                                   const std::vector<ProbeDefinition>& probes,
                                   const RunOptions& options) {
  const CapabilitySet declared = subject.capabilities();
  if (!options.measure && !declared.contains(plan.gate)) {
    throw InvalidArgument(
        "conformance: the " + plan.suite + " suite needs a subject that declares '" +
            std::string(to_string(plan.gate)) + "' (it declares " + to_string(declared) +
            "); a green run that attacked nothing is worse than no run — measure it instead "
            "for results without a verdict",
        std::string(to_string(plan.gate)));
  }
  ProbeContext context(subject, ConformancePaths::under(subject.working_directory()));
  std::vector<ProbeResult> results;
  if (plan.plant) {
    const auto started = Clock::now();
    try {
      plan.plant(context);
    } catch (const std::exception& error) {
      // Nothing can be attacked without the layout; say so as a failed result rather than a
      // crash, so the report still names the suite and the reason.
      ProbeResult failed;
      failed.suite = plan.suite;
      failed.probe = "plant-the-hostile-layout";
      failed.why = "the suite's premise: the layout its probes attack was planted";
      failed.outcome = ProbeOutcome::failed;
      failed.detail = "planting raised " + describe(error);
      failed.milliseconds =
          std::chrono::duration<double, std::milli>(Clock::now() - started).count();
      failed.measured = options.measure;
      results.push_back(std::move(failed));
      return results;
    }
  }
  for (const auto& probe : probes) {
    ProbeResult result;
    result.suite = plan.suite;
    result.probe = probe.name;
    result.why = probe.why;
    result.reference = probe.reference;
    result.measured = options.measure;
    const CapabilitySet missing = probe.needs.minus(declared);
    if (!options.measure && !missing.empty()) {
      result.outcome = ProbeOutcome::skipped;
      result.detail = "backend does not declare " + to_string(missing);
      results.push_back(std::move(result));
      continue;
    }
    const auto started = Clock::now();
    context.take_note();
    try {
      probe.run(context);
      result.outcome = ProbeOutcome::passed;
    } catch (const ProbeFailed& failed) {
      result.outcome = ProbeOutcome::failed;
      result.detail = failed.what();
    } catch (const ProbeSkipped& skipped) {
      result.outcome = ProbeOutcome::skipped;
      result.detail = skipped.what();
    } catch (const PremiseImpossible& impossible) {
      result.outcome = ProbeOutcome::skipped;
      result.detail = impossible.what();
    } catch (const std::exception& error) {
      result.outcome = ProbeOutcome::failed;
      result.detail = "raised " + describe(error);
    }
    result.milliseconds = std::chrono::duration<double, std::milli>(Clock::now() - started).count();
    result.detail = bounded(std::move(result.detail));
    result.note = context.take_note();
    results.push_back(std::move(result));
  }
  return results;
}

// ---- races
// ---------------------------------------------------------------------------------------

RaceCount race(ProbeContext& context, const std::function<bool()>& to_hostile,
               const std::function<bool()>& to_benign, const std::function<void()>& attack,
               Milliseconds budget) {
  std::atomic<bool> stop{false};
  std::atomic<long> flips{0};
  std::mutex error_mutex;
  std::string flip_error;
  std::thread flipper([&] {
    std::minstd_rand pause(std::random_device{}());
    auto hold = [&] { std::this_thread::sleep_for(std::chrono::microseconds(pause() % 200)); };
    try {
      while (!stop.load()) {
        if (to_hostile()) ++flips;
        hold();
        if (stop.load()) break;
        if (to_benign()) ++flips;
        hold();
      }
    } catch (const std::exception& error) {
      std::lock_guard lock(error_mutex);
      flip_error = describe(error);
    }
  });
  RaceCount count;
  const auto deadline = Clock::now() + budget;
  try {
    while (Clock::now() < deadline && !(count.attacks >= 1000 && flips.load() >= 200)) {
      attack();
      ++count.attacks;
      std::lock_guard lock(error_mutex);
      if (!flip_error.empty()) break;
    }
  } catch (...) {
    stop = true;
    flipper.join();
    throw;
  }
  stop = true;
  flipper.join();
  count.flips = flips.load();
  context.note(
      std::to_string(count.attacks) + " attacks met " + std::to_string(count.flips) + " flips in " +
      std::to_string(
          std::chrono::duration_cast<Milliseconds>(Clock::now() - deadline + budget).count()) +
      " ms");
  if (!flip_error.empty())
    context.fail("the race could not be driven: flipping raised " + flip_error);
  if (count.flips < 2 || count.attacks < 2) {
    context.fail("the race never interleaved (" + std::to_string(count.flips) + " flips, " +
                 std::to_string(count.attacks) + " attacks): nothing was proved");
  }
  return count;
}

std::string overlong_path(const ConformancePaths& paths) {
  std::string relative;
  const std::string name(200, 'n');
  while (paths.work.size() + 1 + relative.size() < 4096) relative += name + "/";
  return relative + "leaf.txt";
}

}  // namespace detail

// ---- entry points
// --------------------------------------------------------------------------------

using detail::run_suite;
using detail::SuitePlan;

namespace {

// No backend creates the working directory; the exec and egress suites do.
void plant_the_working_directory(detail::ProbeContext& context) {
  context.subject().plant_file(context.work() + "/.probe-cwd", "");
}

std::vector<ProbeResult> files_out(ConformanceSubject& subject, const RunOptions& options) {
  return run_suite(subject,
                   {"files_out", Capability::files_out,
                    [](detail::ProbeContext& context) { plant_layout(context.subject()); }},
                   detail::files_out_probes(), options);
}

std::vector<ProbeResult> files_in(ConformanceSubject& subject, const RunOptions& options) {
  return run_suite(subject, {"files_in", Capability::files_in, nullptr}, detail::files_in_probes(),
                   options);
}

std::vector<ProbeResult> exec(ConformanceSubject& subject, const RunOptions& options) {
  return run_suite(subject, {"exec", Capability::exec, plant_the_working_directory},
                   detail::exec_probes(), options);
}

std::vector<ProbeResult> files_delete(ConformanceSubject& subject, const RunOptions& options) {
  return run_suite(subject, {"files_delete", Capability::files_delete, nullptr},
                   detail::files_delete_probes(), options);
}

std::vector<ProbeResult> egress(ConformanceSubject& subject, const RunOptions& options) {
  if (options.allowed_url.empty() || options.denied_url.empty()) {
    throw InvalidArgument(
        "conformance: the egress suite needs an allowed and a denied URL, both answering 2xx "
        "when reached",
        "egress");
  }
  return run_suite(
      subject, {"egress", Capability::exec, plant_the_working_directory},
      detail::egress_probes(options.allowed_url, options.denied_url, options.egress_exec_timeout),
      options);
}

}  // namespace

std::vector<ProbeResult> run_files_out_conformance(ConformanceSubject& subject) {
  return files_out(subject, {});
}

std::vector<ProbeResult> run_files_in_conformance(ConformanceSubject& subject) {
  return files_in(subject, {});
}

std::vector<ProbeResult> run_exec_conformance(ConformanceSubject& subject) {
  return exec(subject, {});
}

std::vector<ProbeResult> run_files_delete_conformance(ConformanceSubject& subject) {
  return files_delete(subject, {});
}

std::vector<ProbeResult> run_egress_conformance(ConformanceSubject& subject,
                                                const std::string& allowed_url,
                                                const std::string& denied_url,
                                                Milliseconds exec_timeout) {
  RunOptions options;
  options.allowed_url = allowed_url;
  options.denied_url = denied_url;
  options.egress_exec_timeout = exec_timeout;
  return egress(subject, options);
}

std::vector<ProbeResult> run_conformance(ConformanceSubject& subject, std::string_view suite,
                                         const RunOptions& options) {
  if (suite == "files_out") return files_out(subject, options);
  if (suite == "files_in") return files_in(subject, options);
  if (suite == "exec") return exec(subject, options);
  if (suite == "files_delete") return files_delete(subject, options);
  if (suite == "egress") return egress(subject, options);
  throw InvalidArgument("conformance: unknown suite \"" + std::string(suite) +
                            "\" (known: egress, exec, files_delete, files_in, files_out)",
                        "suite");
}

std::vector<ProbeResult> measure_files_delete_probes(ConformanceSubject& subject) {
  return files_delete(subject, RunOptions{.measure = true});
}

const std::vector<ProbeResult>& assert_passed(const std::vector<ProbeResult>& results) {
  std::vector<ConformanceFailure::Failed> failures;
  for (const auto& result : results) {
    if (result.measured) {
      throw InvalidArgument(
          "conformance: " + result.suite + "/" + result.probe +
              " was measured, and a measurement carries no verdict; run the suite without "
              "measure to assert it",
          "measure");
    }
    if (result.outcome == ProbeOutcome::failed) {
      failures.push_back({result.suite + "/" + result.probe, result.why, result.detail});
    }
  }
  if (!failures.empty()) throw ConformanceFailure(std::move(failures), results.size());
  return results;
}

std::vector<ProbeResult> assert_files_out_conformance(ConformanceSubject& subject) {
  return assert_passed(run_files_out_conformance(subject));
}
std::vector<ProbeResult> assert_files_in_conformance(ConformanceSubject& subject) {
  return assert_passed(run_files_in_conformance(subject));
}
std::vector<ProbeResult> assert_exec_conformance(ConformanceSubject& subject) {
  return assert_passed(run_exec_conformance(subject));
}
std::vector<ProbeResult> assert_files_delete_conformance(ConformanceSubject& subject) {
  return assert_passed(run_files_delete_conformance(subject));
}
std::vector<ProbeResult> assert_egress_conformance(ConformanceSubject& subject,
                                                   const std::string& allowed_url,
                                                   const std::string& denied_url,
                                                   Milliseconds exec_timeout) {
  return assert_passed(run_egress_conformance(subject, allowed_url, denied_url, exec_timeout));
}

std::vector<ProbeDescription> describe_probes() {
  std::vector<ProbeDescription> out;
  auto add = [&out](const std::string& suite, Capability gate,
                    const std::vector<detail::ProbeDefinition>& probes) {
    for (const auto& probe : probes) {
      out.push_back({suite, probe.name, probe.why, probe.needs.unite({gate}), probe.reference});
    }
  };
  add("files_out", Capability::files_out, detail::files_out_probes());
  add("files_in", Capability::files_in, detail::files_in_probes());
  add("files_delete", Capability::files_delete, detail::files_delete_probes());
  add("exec", Capability::exec, detail::exec_probes());
  add("egress", Capability::exec, detail::egress_probes("", "", Milliseconds(30'000)));
  add("isolation", Capability::files_in, detail::isolation_probe_descriptions());
  return out;
}

}  // namespace airlock::conformance
