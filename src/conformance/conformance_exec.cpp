// The exec suite (never skips: exec is what every sandbox owes) and the egress suite.
#include <chrono>
#include <thread>

#include "airlock/paths.hpp"
#include "conformance/conformance_internal.hpp"

namespace airlock::conformance::detail {
namespace {

using Clock = std::chrono::steady_clock;
constexpr CapabilitySet kExec{Capability::exec};

std::string stripped(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) {
    text.pop_back();
  }
  return text;
}

void timeout_in_time(ProbeContext& c) {
  ExecOptions options;
  options.working_directory = c.work();
  options.timeout = Milliseconds(1000);
  const auto started = Clock::now();
  try {
    c.sandbox().exec(Command::argv({"sleep", "30"}), options);
  } catch (const Timeout&) {
    const double elapsed = std::chrono::duration<double>(Clock::now() - started).count();
    c.check(elapsed >= 0.5 && elapsed <= 4.0, "Timeout arrived after " + std::to_string(elapsed) +
                                                  " s; expected 0.5–4.0 s for a "
                                                  "1 s timeout");
    return;
  } catch (const std::exception& error) {
    c.fail("sleep 30 under a 1 s timeout raised " + describe(error) + "; expected Timeout");
  }
  c.fail("sleep 30 under a 1 s timeout returned normally");
}

void timed_out_command_is_stopped(ProbeContext& c) {
  const std::string marker = c.work() + "/.probe-survivor";
  ExecOptions options;
  options.working_directory = c.work();
  options.timeout = Milliseconds(1000);
  // A backend that cannot establish a command's end disposes of the sandbox instead (acas, as
  // its seed says): then no guest is left to act in or to look in, and this proves nothing
  // either way — the probe says so rather than pass or fail. That may already have happened at
  // the previous probe's timeout.
  auto disposed = [](const SandboxInvalidated& gone) {
    return ProbeSkipped("the backend disposed the sandbox on a timeout (" + gone.message() +
                        "); no guest is left to act in or to look in");
  };
  try {
    c.sandbox().exec(
        Command::argv({"sh", "-c", "sleep 2; printf survived > \"$1\"", "probe", marker}), options);
    c.fail("a command outliving its timeout returned normally; expected Timeout");
  } catch (const Timeout&) {
  } catch (const SandboxInvalidated& gone) {
    throw disposed(gone);
  } catch (const ProbeFailed&) {
    throw;
  } catch (const std::exception& error) {
    c.fail("a command outliving its timeout raised " + describe(error) + "; expected Timeout");
  }
  // Wait past the moment the command would have written, had it been left running.
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  try {
    c.check(!c.guest_test("-e", marker),
            "the timed-out command kept running and wrote its marker after the timeout");
  } catch (const SandboxInvalidated& gone) {
    throw disposed(gone);
  }
}

}  // namespace

std::vector<ProbeDefinition> exec_probes() {
  std::vector<ProbeDefinition> probes;
  auto add = [&probes](std::string name, std::string why, bool reference,
                       std::function<void(ProbeContext&)> run) {
    probes.push_back({std::move(name), std::move(why), kExec, reference, std::move(run)});
  };
  add("an-argv-sequence-runs", "an argv runs and its stdout comes back exactly", true,
      [](ProbeContext& c) {
        const ExecResult result = c.run({"printf", "ok-ran"}, c.work());
        c.check(result.exit_code == 0, "printf exited " + std::to_string(result.exit_code));
        c.check(result.stdout_bytes == "ok-ran", "stdout was \"" + result.stdout_text() + "\"");
      });
  add("exit-code-fidelity", "a shell line's exit code comes back exactly (exit 7 is 7)", true,
      [](ProbeContext& c) {
        const ExecResult result = c.shell("exit 7", c.work());
        c.check(result.exit_code == 7, "exit 7 gave " + std::to_string(result.exit_code));
      });
  add("argv-is-quoted", "an argv element reaches the program literally, never re-parsed by a shell",
      true, [](ProbeContext& c) {
        const std::string literal = "a b$(echo injected)c";
        const ExecResult result =
            c.run({"sh", "-c", "printf '%s' \"$1\"", "probe", literal}, c.work());
        c.check(result.stdout_bytes == literal,
                "the argument arrived as \"" + result.stdout_text() + "\"");
      });
  add("working-directory-is-honoured", "a command runs in the working directory it was given", true,
      [](ProbeContext& c) {
        const ExecResult result = c.run({"pwd"}, c.work());
        c.check(stripped(result.stdout_text()) == c.work(),
                "pwd printed \"" + stripped(result.stdout_text()) + "\", not " + c.work());
      });

  // ---- airlock's own (before the timeout probe, which may cost the sandbox elsewhere) ----
  add("stdout-bytes-are-preserved-exactly",
      "output that is not UTF-8 (NUL, 0xFF) comes back byte for byte", false, [](ProbeContext& c) {
        const ExecResult result = c.run({"printf", "\\377\\376\\000\\001"}, c.work());
        c.check(result.stdout_bytes == std::string("\xff\xfe\0\x01", 4),
                "the bytes came back as " + std::to_string(result.stdout_bytes.size()) +
                    " other bytes");
      });
  add("stderr-is-kept-apart-from-stdout", "stdout and stderr come back as two streams", false,
      [](ProbeContext& c) {
        const ExecResult result = c.shell("printf out; printf err >&2", c.work());
        c.check(result.stdout_bytes == "out" && result.stderr_bytes == "err",
                "stdout \"" + result.stdout_text() + "\", stderr \"" + result.stderr_text() + "\"");
      });
  add("an-output-flood-is-refused-whole",
      "a bounded exec past its ceiling raises ExecOutputLimitExceeded and returns nothing, and "
      "the sandbox still serves",
      false, [](ProbeContext& c) {
        c.expect_refused<ExecOutputLimitExceeded>(
            "ExecOutputLimitExceeded",
            "a 1 MiB flood under "
            "a 64 KiB ceiling",
            [&] {
              c.sandbox().exec_bounded(Command::shell("head -c 1048576 /dev/zero"), c.work(),
                                       c.subject().exec_timeout(), 64 * 1024);
            });
        c.check(c.run({"printf", "alive"}, c.work()).stdout_bytes == "alive",
                "the sandbox did not serve a command after the flood");
      });

  add("a-timeout-raises-timeout-error",
      "sleep 30 under a 1 s timeout raises Timeout between 0.5 s and 4 s", true, timeout_in_time);
  add("a-timed-out-command-is-stopped",
      "a command that outlives its timeout is killed: it never acts after the Timeout", false,
      timed_out_command_is_stopped);
  return probes;
}

std::vector<ProbeDefinition> egress_probes(const std::string& allowed_url,
                                           const std::string& denied_url,
                                           Milliseconds exec_timeout) {
  auto reached = [exec_timeout](ProbeContext& c, const std::string& url, std::string& said) {
    ExecOptions options;
    options.working_directory = c.work();
    options.timeout = exec_timeout;
    options.max_output_bytes = 64 * 1024;
    const ExecResult result = c.sandbox().exec(
        Command::shell("curl -s -o /dev/null -w '%{http_code}' --max-time 25 " + posix_quote(url)),
        options);
    const std::string code = stripped(result.stdout_text());
    said = "exit " + std::to_string(result.exit_code) + ", status \"" + code + "\"";
    return result.exit_code == 0 && !code.empty() && code.front() == '2';
  };
  std::vector<ProbeDefinition> probes;
  probes.push_back({"an-allowed-host-is-reachable",
                    "the allowlisted host answers 2xx from inside (the positive control)", kExec,
                    true, [=](ProbeContext& c) {
                      std::string said;
                      const bool ok = reached(c, allowed_url, said);
                      c.check(ok, allowed_url + " was not reached (" + said + ")");
                    }});
  probes.push_back({"a-denied-host-is-refused", "a host off the allowlist is never reached", kExec,
                    true, [=](ProbeContext& c) {
                      std::string said;
                      const bool ok = !reached(c, denied_url, said);
                      c.check(ok, denied_url + " was reached (" + said + ")");
                    }});
  return probes;
}

}  // namespace airlock::conformance::detail
