// airlock conformance: every suite against a fresh sandbox of one backend; a table or JSON;
// non-zero on any failure.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <random>

#include "airlock/backend_factory.hpp"
#include "airlock/conformance.hpp"
#include "airlock/errors.hpp"
#include "cli/command.hpp"
#include "cli/common.hpp"

namespace airlock::cli {
namespace {

using conformance::ProbeOutcome;
using conformance::ProbeResult;

constexpr int kExitProbesFailed = 1;
const std::vector<std::string> kSuites = {"files_out", "files_in", "files_delete", "egress",
                                          "isolation", "snapshot", "exec"};

struct ConformanceOptions {
  RouterFlags router;
  std::vector<std::string> suites;
  std::string allowed_url;
  std::string denied_url;
  std::vector<std::string> egress_allow;
  std::string work_dir = kDefaultWorkDir;
  std::string image;
  double exec_timeout_seconds = 60;
  double fill_box_seconds = 20;
  bool list = false;
  std::vector<std::string> isolation_probes;  // empty: all
  // The rung the isolation suite proves, when not the declared one: the evidence for (or
  // against) raising a backend's declaration. Empty: the declared rung.
  std::string isolation_rung;
};

struct SuiteReport {
  std::string suite;
  std::string status;  // ran, skipped, measured (no verdict), error
  std::string reason;
  std::vector<ProbeResult> results;
  json::Json error;  // a suite that could not run: the error, in every command's shape
};

std::string random_hex(int digits) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::random_device device;
  std::string out;
  for (int i = 0; i < digits; ++i) out += kHex[device() & 0xF];
  return out;
}

// "https://user@host:8443/path" → "host"; "http://[::1]:80/" → "::1".
std::string host_of(const std::string& url, const std::string& flag) {
  const auto scheme = url.find("://");
  if (scheme == std::string::npos) {
    throw InvalidArgument(flag + ": \"" + url + "\" is not a URL (scheme://host/…)", flag);
  }
  std::string authority = url.substr(scheme + 3);
  authority = authority.substr(0, authority.find_first_of("/?#"));
  if (const auto at = authority.rfind('@'); at != std::string::npos) authority.erase(0, at + 1);
  if (!authority.empty() && authority.front() == '[') {
    authority = authority.substr(1, authority.find(']') - 1);
  } else if (const auto colon = authority.rfind(':'); colon != std::string::npos) {
    authority.erase(colon);
  }
  if (authority.empty()) throw InvalidArgument(flag + ": \"" + url + "\" names no host", flag);
  return authority;
}

json::Json capability_list(CapabilitySet set) {
  json::Json out = json::Json::array();
  set.for_each(
      [&out](Capability capability) { out.push_back(std::string(to_string(capability))); });
  return out;
}

// --list: every probe, its suite, what it needs and whether the reference has it.
int list_probes(bool as_json) {
  const auto probes = conformance::describe_probes();
  if (as_json) {
    json::Json out = json::Json::array();
    for (const auto& probe : probes) {
      out.push_back({{"suite", probe.suite},
                     {"probe", probe.probe},
                     {"why", probe.why},
                     {"needs", capability_list(probe.needs)},
                     {"reference", probe.reference}});
    }
    print_json(out);
    return 0;
  }
  for (const auto& probe : probes) {
    std::printf("%-13s %-62s %-9s %s\n    %s\n", probe.suite.c_str(), probe.probe.c_str(),
                probe.reference ? "reference" : "airlock", to_string(probe.needs).c_str(),
                probe.why.c_str());
  }
  return 0;
}

// Where the serving backend keeps its state on the host (its configured directories, else the
// default state directory): the filesystems beneath them are what a guest must not drain.
std::vector<std::string> host_state_paths(const json::Json& document, const std::string& backend) {
  std::vector<std::string> out;
  if (document.contains("backends") && document["backends"].is_array()) {
    for (const auto& entry : document["backends"]) {
      if (!entry.is_object() || entry.value("type", "") != backend) continue;
      for (const char* field : {"state_dir", "image_store", "data_root"}) {
        if (entry.contains(field) && entry[field].is_string()) {
          out.push_back(entry[field].get<std::string>());
        }
      }
    }
  }
  if (const char* state = std::getenv("AIRLOCK_STATE_DIR"); state != nullptr && *state) {
    out.emplace_back(state);
  }
  out.emplace_back("/var/lib/airlock");
  return out;
}

SandboxSpec spec_for(const ConformanceOptions& options, CapabilitySet capabilities,
                     std::vector<std::string> egress_allow) {
  SandboxSpec::Fields fields;
  fields.kind = egress_allow.empty() ? "conformance" : "conformance-egress";
  fields.work_dir = options.work_dir;
  if (!options.image.empty()) fields.image = options.image;
  // Only what a sandbox can be asked for: the vocabulary-only capabilities are never required.
  capabilities.erase(Capability::snapshot);
  capabilities.erase(Capability::attached_identity);
  fields.required_capabilities = capabilities;
  if (!egress_allow.empty()) {
    fields.egress = Egress::allowlist;
    fields.egress_allow = std::move(egress_allow);
  }
  return SandboxSpec(fields);
}

// Runs one suite, turning a refusal or a crash of the run itself into a report line.
SuiteReport run_one(const std::string& suite,
                    const std::function<std::vector<ProbeResult>()>& run) {
  SuiteReport report{suite, "ran", {}, {}};
  try {
    report.results = run();
  } catch (const std::exception& error) {
    report.status = "error";
    report.reason = error_detail(error);
    report.error = error_object(error);
  }
  return report;
}

int report(const std::vector<SuiteReport>& suites, const json::Json& header, bool as_json) {
  int passed = 0;
  int failed = 0;
  int skipped = 0;
  std::vector<std::string> skipped_suites;
  bool any_failure = false;
  for (const auto& suite : suites) {
    if (suite.status == "error") any_failure = true;
    if (suite.status == "skipped") skipped_suites.push_back(suite.suite);
    for (const auto& result : suite.results) {
      if (suite.status == "measured") continue;  // no verdict
      if (result.outcome == ProbeOutcome::passed) ++passed;
      if (result.outcome == ProbeOutcome::failed) ++failed;
      if (result.outcome == ProbeOutcome::skipped) ++skipped;
    }
  }
  any_failure = any_failure || failed > 0;
  if (as_json) {
    json::Json out = header;
    json::Json list = json::Json::array();
    for (const auto& suite : suites) {
      json::Json probes = json::Json::array();
      for (const auto& result : suite.results) {
        json::Json probe{
            {"probe", result.probe},
            {"why", result.why},
            {"result", std::string(conformance::to_string(result.outcome))},
            {"ms", static_cast<double>(static_cast<long>(result.milliseconds * 10)) / 10},
            {"reference", result.reference}};
        if (!result.detail.empty()) probe["detail"] = result.detail;
        if (!result.note.empty()) probe["note"] = result.note;
        probes.push_back(std::move(probe));
      }
      json::Json entry{{"suite", suite.suite}, {"status", suite.status}, {"probes", probes}};
      if (!suite.reason.empty()) entry["reason"] = suite.reason;
      if (!suite.error.is_null()) entry["error"] = suite.error;
      list.push_back(std::move(entry));
    }
    out["suites"] = list;
    out["summary"] = {{"passed", passed},
                      {"failed", failed},
                      {"skipped", skipped},
                      {"suites_skipped", skipped_suites}};
    out["conformant"] = !any_failure;
    print_json(out);
    return any_failure ? kExitProbesFailed : 0;
  }
  std::printf("%-13s %-62s %-8s %8s\n", "suite", "probe", "result", "ms");
  for (const auto& suite : suites) {
    if (suite.results.empty()) {
      std::printf("%-13s %-62s %-8s %8s  %s\n", suite.suite.c_str(), "(suite)",
                  suite.status.c_str(), "-", suite.reason.c_str());
      continue;
    }
    if (suite.status == "measured") {
      std::printf("%-13s %s\n", suite.suite.c_str(), suite.reason.c_str());
    }
    for (const auto& result : suite.results) {
      const std::string outcome(conformance::to_string(result.outcome));
      // A skip says why; a passed race says how hard it attacked.
      const std::string& aside = result.outcome == ProbeOutcome::skipped  ? result.detail
                                 : result.outcome == ProbeOutcome::passed ? result.note
                                                                          : std::string();
      std::printf("%-13s %-62s %-8s %8.1f%s%s\n", suite.suite.c_str(), result.probe.c_str(),
                  outcome.c_str(), result.milliseconds, aside.empty() ? "" : "  ", aside.c_str());
    }
  }
  bool header_printed = false;
  for (const auto& suite : suites) {
    for (const auto& result : suite.results) {
      if (result.outcome != ProbeOutcome::failed) continue;
      if (!header_printed)
        std::printf("\nfailures%s:\n", suite.status == "measured" ? " (measured)" : "");
      header_printed = true;
      std::printf("  %s/%s: %s\n    proves: %s\n", suite.suite.c_str(), result.probe.c_str(),
                  result.detail.c_str(), result.why.c_str());
    }
  }
  for (const auto& suite : suites) {
    if (suite.status != "error") continue;
    std::printf("\nthe %s suite could not run: %s\n", suite.suite.c_str(), suite.reason.c_str());
  }
  std::string skipped_list;
  for (const auto& suite : skipped_suites)
    skipped_list += (skipped_list.empty() ? "" : ", ") + suite;
  std::printf("\n%d passed, %d failed, %d skipped; suites skipped: %s — %s\n", passed, failed,
              skipped, skipped_list.empty() ? "none" : skipped_list.c_str(),
              any_failure ? "NOT conformant" : "conformant");
  return any_failure ? kExitProbesFailed : 0;
}

int run_conformance(const ConformanceOptions& options, const Context& context) {
  const bool as_json = context.json;
  if (options.list) return list_probes(as_json);
  std::vector<std::string> suites = options.suites.empty() ? kSuites : options.suites;
  for (const auto& suite : suites) {
    if (std::find(kSuites.begin(), kSuites.end(), suite) == kSuites.end()) {
      throw InvalidArgument(
          "--suite: unknown suite \"" + suite +
              "\" (known: files_out, files_in, files_delete, egress, isolation, exec)",
          "suite");
    }
  }
  if (options.allowed_url.empty() != options.denied_url.empty()) {
    throw InvalidArgument(
        "--allowed-url and --denied-url go together: the allowed host is the "
        "denied probe's positive control",
        "egress");
  }
  if (options.router.backends.empty() && options.router.config_file.empty()) {
    throw InvalidArgument("choose the backend to attack with --backend NAME", "backend");
  }
  if (!(options.exec_timeout_seconds > 0)) {
    throw InvalidArgument("--exec-timeout must be positive", "exec-timeout");
  }
  if (!(options.fill_box_seconds > 0) || options.fill_box_seconds > 3600) {
    throw InvalidArgument("--fill-box must be more than 0 and at most 3600 seconds", "fill-box");
  }

  const json::Json document = options.router.config("linux");
  std::vector<std::string> notes;
  // Learn the serving backend's rung with no floor, then route with the floor at that rung
  // (or at the operator's --min-isolation, which is honoured as given).
  json::Json probing = document;
  probing["min_isolation"] = "none";
  const auto unfloored = make_router(probing, "config");
  if (!unfloored->enabled()) throw NoSandboxBackend("no sandbox backend is configured");
  const auto backend = unfloored->backend();
  RouterOptions router_options = unfloored->options();
  const Floor given = options.router.floor();
  router_options.min_isolation =
      given.rung.empty() ? backend->isolation() : parse_isolation(given.rung, given.source);
  router_options.selected = backend->name();
  const std::string floor_note =
      given.rung.empty()
          ? "floor lowered to " + std::string(to_string(router_options.min_isolation)) +
                ", the backend's own rung (the default floor is microvm)"
          : "floor " + std::string(to_string(router_options.min_isolation)) + " as given by " +
                given.source;
  SandboxRouter router(unfloored->backends(), router_options);

  const CapabilitySet declared = backend->capabilities().value_or(kDefaultCapabilities);
  const SandboxKey key{"airlock-conformance", random_hex(16), "conformance"};
  const Milliseconds exec_timeout(static_cast<long>(options.exec_timeout_seconds * 1000));

  const EgressSet egress_modes = backend->egress_modes().value_or(EgressSet{});
  const Isolation attacked_rung = options.isolation_rung.empty()
                                      ? backend->isolation()
                                      : parse_isolation(options.isolation_rung, "--isolation-rung");
  if (!options.isolation_rung.empty()) {
    notes.push_back("the isolation suite proves " + std::string(to_string(attacked_rung)) +
                    " (--isolation-rung), not the declared " +
                    std::string(to_string(backend->isolation())) +
                    ": its verdict is evidence about that rung, not about the declaration");
  }
  json::Json header{{"backend", backend->name()},
                    {"isolation", std::string(to_string(backend->isolation()))},
                    {"egress_modes", to_string(egress_modes)},
                    {"floor", std::string(to_string(router_options.min_isolation))},
                    {"floor_note", floor_note},
                    {"capabilities", capability_list(declared)},
                    {"work_dir", options.work_dir},
                    {"notes", notes}};
  if (!options.isolation_rung.empty()) header["isolation_rung"] = to_string(attacked_rung);
  if (!as_json) {
    std::printf("airlock conformance: backend '%s' (%s); %s\n", backend->name().c_str(),
                std::string(to_string(backend->isolation())).c_str(), floor_note.c_str());
    for (const auto& note : notes) std::printf("  note: %s\n", note.c_str());
  }

  std::vector<SuiteReport> reports;
  auto wanted = [&](const std::string& suite) {
    return std::find(suites.begin(), suites.end(), suite) != suites.end();
  };
  std::shared_ptr<Sandbox> sandbox;
  try {
    sandbox = router.acquire(key, spec_for(options, declared, {}));
  } catch (...) {
    router.dispose(key);
    throw;
  }
  header["instance_id"] = sandbox->instance_id();
  if (!as_json) {
    std::printf("  sandbox %s, work directory %s, declares %s\n\n", sandbox->instance_id().c_str(),
                options.work_dir.c_str(), to_string(declared).c_str());
  }
  conformance::PosixGuestSubject subject(*sandbox, options.work_dir, declared, exec_timeout);

  auto gated = [&](const std::string& suite, Capability gate,
                   const std::function<std::vector<ProbeResult>()>& run) {
    if (!wanted(suite)) return;
    if (!declared.contains(gate)) {
      reports.push_back({suite,
                         "skipped",
                         "backend does not declare " + std::string(to_string(gate)) +
                             "; the suite is refused rather than run green on nothing",
                         {}});
      if (gate == Capability::files_delete) {
        SuiteReport measured =
            run_one(suite, [&] { return conformance::measure_files_delete_probes(subject); });
        measured.status = "measured";
        measured.reason = "measured without a verdict (files_delete is not declared):";
        reports.push_back(std::move(measured));
      }
      return;
    }
    reports.push_back(run_one(suite, run));
  };

  gated("files_out", Capability::files_out,
        [&] { return conformance::run_files_out_conformance(subject); });
  gated("files_in", Capability::files_in,
        [&] { return conformance::run_files_in_conformance(subject); });
  gated("files_delete", Capability::files_delete,
        [&] { return conformance::run_files_delete_conformance(subject); });
  if (wanted("egress")) {
    if (options.allowed_url.empty()) {
      reports.push_back({"egress",
                         "skipped",
                         "no --allowed-url/--denied-url given: the egress suite needs two hosts "
                         "that answer 2xx",
                         {}});
    } else {
      std::vector<std::string> hosts = options.egress_allow;
      if (hosts.empty()) hosts.push_back(host_of(options.allowed_url, "--allowed-url"));
      host_of(options.denied_url, "--denied-url");
      const SandboxKey egress_key{key.scope, key.thread_id + "-egress", key.agent_dir};
      reports.push_back(run_one("egress", [&] {
        std::shared_ptr<Sandbox> allowlisted;
        try {
          allowlisted = router.acquire(egress_key, spec_for(options, declared, hosts));
          conformance::PosixGuestSubject egress_subject(*allowlisted, options.work_dir, declared,
                                                        exec_timeout);
          auto results = conformance::run_egress_conformance(egress_subject, options.allowed_url,
                                                             options.denied_url);
          router.dispose(egress_key);
          return results;
        } catch (...) {
          router.dispose(egress_key);
          throw;
        }
      }));
    }
  }
  // From inside the guest: what the declared rung and egress modes promise, in two sandboxes of
  // their own (egress closed) under two more keys, disposed after — it exhausts pools, and a
  // sandbox may end at its own memory limit.
  if (wanted("isolation")) {
    if (!declared.contains(Capability::exec) || !declared.contains(Capability::files_in)) {
      reports.push_back({"isolation",
                         "skipped",
                         "backend does not declare exec and files_in (the probe is put into the "
                         "guest and run there); the suite is refused rather than run green on "
                         "nothing",
                         {}});
    } else if (attacked_rung < Isolation::container) {
      reports.push_back(
          {"isolation",
           "skipped",
           (options.isolation_rung.empty() ? "backend declares isolation " : "--isolation-rung ") +
               std::string(to_string(attacked_rung)) +
               ", below container: the isolation suite promises nothing there",
           {}});
    } else {
      const SandboxKey own_key{key.scope, key.thread_id + "-isolation", key.agent_dir};
      const SandboxKey peer_key{key.scope, key.thread_id + "-isolation-peer", key.agent_dir};
      reports.push_back(run_one("isolation", [&] {
        struct Dispose {
          SandboxRouter& router;
          const SandboxKey& own;
          const SandboxKey& peer;
          ~Dispose() {
            router.dispose(own);
            router.dispose(peer);
          }
        } dispose{router, own_key, peer_key};
        const auto attacked = router.acquire(own_key, spec_for(options, declared, {}));
        conformance::PosixGuestSubject isolation_subject(*attacked, options.work_dir, declared,
                                                         exec_timeout);
        isolation_subject.declare_isolation({attacked_rung, egress_modes, Egress::closed, {}});
        isolation_subject.offer_second_sandbox(
            [&] { return router.acquire(peer_key, spec_for(options, declared, {})); });
        conformance::IsolationOptions isolation;
        isolation.host_paths = host_state_paths(document, backend->name());
        isolation.only = options.isolation_probes;
        isolation.fill_box = Milliseconds(static_cast<long>(options.fill_box_seconds * 1000));
        return conformance::run_isolation_conformance(isolation_subject, isolation);
      }));
    }
  }
  // Snapshots: the suite drives the backend through routers of its own, under a scope of its
  // own, and disposes of it (snapshots included) at the end.
  gated("snapshot", Capability::snapshot, [&] {
    conformance::SnapshotSuiteOptions snapshot_options;
    snapshot_options.backend = backend;
    snapshot_options.floor = router_options.min_isolation;
    snapshot_options.work_dir = options.work_dir;
    snapshot_options.exec_timeout = exec_timeout;
    snapshot_options.spec = [&options](Egress egress) {
      SandboxSpec::Fields fields;
      fields.kind = "conformance-snapshot";
      fields.work_dir = options.work_dir;
      if (!options.image.empty()) fields.image = options.image;
      fields.required_capabilities = {Capability::exec, Capability::files_in,
                                      Capability::files_out};
      fields.egress = egress;
      if (egress == Egress::allowlist) fields.egress_allow = {"snapshot-conformance.example"};
      return SandboxSpec(std::move(fields));
    };
    return conformance::run_snapshot_conformance(snapshot_options);
  });
  // Last: a timeout may cost the sandbox on some providers.
  gated("exec", Capability::exec, [&] { return conformance::run_exec_conformance(subject); });
  router.dispose(key);
  return report(reports, header, as_json);
}

const bool kConformanceCommand = register_command("conformance", [](CLI::App& app,
                                                                    Context& context) {
  auto options = std::make_shared<ConformanceOptions>();
  CLI::App* command = app.add_subcommand(
      "conformance",
      "attack a fresh sandbox of one backend with every conformance suite; a table (or --json) "
      "of probes, non-zero on any failure");
  options->router.add_to(*command);
  command->add_option("--suite", options->suites,
                      "run only this suite (repeatable): files_out, files_in, files_delete, "
                      "egress, isolation, snapshot, exec");
  command->add_option("--isolation-probe", options->isolation_probes,
                      "isolation suite: run only this probe (repeatable; see --list)");
  command->add_option("--isolation-rung", options->isolation_rung,
                      "isolation suite: prove this rung instead of the declared one (evidence "
                      "for or against a declaration; the declaration itself is unchanged)");
  command->add_flag("--list", options->list, "list every probe (suite, name, needs, why) and exit");
  command->add_option("--allowed-url", options->allowed_url,
                      "egress suite: a URL on the allowlist that answers 2xx");
  command->add_option("--denied-url", options->denied_url,
                      "egress suite: a URL off the allowlist that would answer 2xx");
  command->add_option("--egress-allow", options->egress_allow,
                      "egress suite: the allowlist (repeatable; default: --allowed-url's host)");
  command->add_option("--work-dir", options->work_dir, "the guest working directory attacked")
      ->capture_default_str();
  command->add_option("--image", options->image, "the image the sandbox runs (backend's syntax)");
  command
      ->add_option("--exec-timeout", options->exec_timeout_seconds,
                   "seconds one probe command may take")
      ->capture_default_str();
  command
      ->add_option("--fill-box", options->fill_box_seconds,
                   "isolation suite: seconds the guest may spend exhausting one pool (a slower "
                   "guest, an emulated one say, needs more to reach a limit or the cap)")
      ->capture_default_str();
  command->callback([options, &context] {
    spdlog::set_level(spdlog::level::from_str(context.log_level));
    context.exit_code = run_conformance(*options, context);
  });
});

}  // namespace
}  // namespace airlock::cli
