// airlock run: one command in a fresh sandbox, start to finish —
//   acquire → put files (--put LOCAL=GUEST, a file or a tree) → exec → fetch outputs (--get
//   GUEST, a file or a tree, into --out DIR) → dispose (unless --keep).
// The command's output streams as it runs (collected with --json). docker's habits: -e, --env-file,
// -w, -i, -t (and -it with no command: a shell); sizes take units (--memory 512m).
// SIGINT, SIGTERM and SIGHUP go to the command; the sandbox is still disposed (unless --keep) and
// airlock exits 128+N. A second one forces the command to stop; a third leaves at once.
// --from-snapshot ID starts the sandbox from a snapshot of the conversation given by --scope and
// --thread (airlock snapshot ls lists them); --snapshot saves the sandbox after the command, before
// it is disposed, and prints the snapshot's id (JSON: "snapshot").
// Exit code: the guest's own; 124 when it timed out; 125 when airlock could not run it.
#include <spdlog/spdlog.h>

#include <iostream>

#include "airlock/backend_factory.hpp"
#include "airlock/errors.hpp"
#include "airlock/outputs.hpp"
#include "airlock/sinks.hpp"
#include "cli/command.hpp"
#include "cli/common.hpp"
#include "cli/exec_flags.hpp"
#include "cli/exec_io.hpp"
#include "cli/sizes.hpp"
#include "cli/tokens.hpp"
#include "cli/transfer.hpp"

namespace airlock::cli {
namespace {

struct RunOptions {
  RouterFlags router;
  ExecFlags exec;
  std::string spec_file;
  std::string kind;
  std::string image;
  std::string work_dir;
  std::string scope = "airlock-run";
  std::string thread;
  std::string agent = "cli";
  std::string egress;
  std::vector<std::string> allow;
  std::vector<std::uint64_t> allow_ports;
  std::optional<std::uint64_t> memory;
  std::optional<std::uint64_t> disk;
  std::optional<std::uint64_t> pids;
  std::optional<std::uint64_t> cpu;
  std::vector<std::string> puts;
  std::vector<std::string> gets;
  std::string out_dir = ".";
  bool keep = false;
  std::string from_snapshot;
  bool snapshot = false;
};

SandboxSpec build_spec(const RunOptions& options) {
  SandboxSpec::Fields fields;
  if (!options.spec_file.empty()) fields = load_spec(options.spec_file).fields();
  if (!options.kind.empty()) fields.kind = options.kind;
  if (fields.kind.empty()) fields.kind = "run";
  if (!options.image.empty()) fields.image = options.image;
  if (!options.work_dir.empty()) fields.work_dir = options.work_dir;
  if (!options.egress.empty()) fields.egress = parse_egress(options.egress, "--egress");
  if (!options.allow.empty()) {
    fields.egress_allow = options.allow;
    if (options.egress.empty()) fields.egress = Egress::allowlist;
  }
  if (options.memory) fields.resources.memory_bytes = options.memory;
  if (options.disk) fields.resources.disk_bytes = options.disk;
  if (options.pids) fields.resources.pids = options.pids;
  if (options.cpu) fields.resources.cpu_millis = options.cpu;
  // Each --get is a declared output: fetched after the command, under spec.files_out, landing
  // under the same relative name (a directory is expanded to its files when it is fetched).
  for (const auto& get : options.gets) {
    DeclaredOutput output;
    output.path = get;
    fields.declared_outputs.push_back(output);
  }
  return SandboxSpec(std::move(fields));
}

// The spec the outputs are collected under: `spec` with each --get directory replaced by the
// files found under it.
SandboxSpec collection_spec(const SandboxSpec& spec, std::vector<DeclaredOutput> outputs) {
  SandboxSpec::Fields fields = spec.fields();
  fields.declared_outputs = std::move(outputs);
  return SandboxSpec(std::move(fields));
}

int run(const RunOptions& options, const Context& context) {
  // First, before anything starts a thread: every later thread inherits the blocked signals.
  SignalRelay relay(options.exec.quiet || context.json);
  options.exec.check();
  const Command command = options.exec.to_command(
      "run: give the command after --, e.g. airlock run -- python3 -c 'print(1)' (or -it for a "
      "shell)");
  const SandboxSpec spec = build_spec(options);
  if (!options.from_snapshot.empty() && options.thread.empty()) {
    throw InvalidArgument(
        "--from-snapshot resumes a snapshot within the conversation that took it: give its "
        "--thread (and --scope, when not airlock-run); airlock snapshot ls lists them",
        "thread");
  }
  const SandboxKey key{options.scope,
                       options.thread.empty() ? "run-" + random_token() : options.thread,
                       options.agent};
  json::Json routing = options.router.config("linux");
  if (!options.allow_ports.empty()) {
    // The ports are the linux backend's egress policy (they are not part of a spec).
    for (auto& entry : routing["backends"]) {
      if (entry.value("type", "") == "linux") entry["egress_ports"] = options.allow_ports;
    }
  }
  auto router = make_router(routing, "config");
  const RoutingDecision decision = router->ensure_can_serve(spec);
  if (!context.json && !options.exec.quiet) {
    std::cerr << "airlock: backend '" << decision.backend << "' ("
              << to_string(decision.backend_isolation) << ") serves kind '" << spec.kind()
              << "' at floor " << to_string(decision.effective_floor) << "\n";
  }

  // The local files are read before anything is started, so a typo costs no sandbox.
  const std::vector<GuestFile> puts = read_puts(options.puts, spec.files_in());

  struct Disposer {
    SandboxRouter* router;
    SandboxKey key;
    std::string kind;
    bool keep;
    ~Disposer() {
      if (!keep) router->dispose_kind(key, kind);
    }
  } disposer{router.get(), key, spec.kind(), options.keep};
  relay.set_abandon_note("left at once: the sandbox may still run; airlock purge --scope " +
                         key.scope + " --thread " + key.thread_id + " removes it");

  auto sandbox = options.from_snapshot.empty() ? router->acquire(key, spec)
                                               : router->resume(key, spec, options.from_snapshot);
  for (const auto& file : puts) {
    if (relay.received()) break;
    sandbox->write_file(file.guest_path, file.content, spec.work_dir());
  }
  // A signal that came before the command started: nothing runs.
  ExecResult result;
  if (relay.received()) {
    result.exit_code = relay.exit_code();
  } else {
    result =
        run_in_foreground(*sandbox, command, options.exec, spec.work_dir(), context.json, relay);
  }
  const bool interrupted = relay.received() != 0;

  // Outputs land through the file-system sink: nothing is written outside --out, whatever links
  // sit in it or are raced into it. An interrupted command's outputs are not fetched.
  json::Json landed = json::Json::array();
  std::vector<std::string> notes;
  if (!interrupted && !landing_outputs(spec).empty()) {
    const SandboxSpec collect = collection_spec(
        spec, expand_gets(*sandbox, options.gets, spec.work_dir(), spec.files_out(), notes));
    FileSystemSinkOptions sink_options;
    sink_options.create_root = true;
    const OutputSink sink = make_file_system_sink(options.out_dir, sink_options);
    for (const auto& artifact : collect_outputs(*sandbox, collect, &sink)) {
      landed.push_back({{"name", artifact.name},
                        {"landed", artifact.handle ? *artifact.handle : artifact.display}});
    }
  }

  // Saved after the outputs are out, before the sandbox is disposed: what the command left.
  std::optional<SnapshotRecord> saved;
  if (options.snapshot && !interrupted) {
    saved = router->snapshot(key, spec);
    if (!context.json && !options.exec.quiet) {
      std::cerr << "airlock: saved " << saved->id << " (" << to_string(saved->content) << ", "
                << (saved->bytes >> 20) << " MiB); resume it with airlock run --from-snapshot "
                << saved->id << " --scope " << key.scope << " --thread " << key.thread_id
                << " -- CMD\n";
    }
  }

  if (context.json) {
    json::Json document{
        {"decision", json::to_json(decision)}, {"instance_id", sandbox->instance_id()},
        {"key", json::to_json(key)},           {"kept", options.keep},
        {"result", json::to_json(result)},     {"outputs", landed}};
    if (interrupted) document["interrupted_by"] = signal_name(relay.received());
    if (saved) document["snapshot"] = json::to_json(*saved);
    if (!notes.empty()) document["notes"] = notes;
    print_json(document);
  } else {
    if (result.truncated) {
      std::cerr << "airlock: output truncated at " << options.exec.max_output << " bytes\n";
    }
    if (!options.exec.quiet) {
      for (const auto& line : notes) std::cerr << "airlock: " << line << "\n";
      for (const auto& output : landed) {
        std::cerr << "airlock: landed " << output["landed"].get<std::string>() << "\n";
      }
    }
    if (options.keep && !options.exec.quiet) {
      std::cerr << "airlock: kept " << sandbox->instance_id() << " (scope " << key.scope
                << ", thread " << key.thread_id << "); run in it with airlock exec --scope "
                << key.scope << " --thread " << key.thread_id
                << " -- CMD, remove it with airlock purge --scope " << key.scope << " --thread "
                << key.thread_id << "\n";
    }
  }
  return interrupted ? relay.exit_code() : result.exit_code;
}

const bool kRunCommand = register_command("run", [](CLI::App& app, Context& context) {
  auto options = std::make_shared<RunOptions>();
  CLI::App* command = app.add_subcommand(
      "run", "run one command in a fresh sandbox: put files, exec, fetch outputs, dispose");
  options->router.add_to(*command);
  command->add_option("--spec", options->spec_file, "a sandbox spec (JSON) to start from");
  command->add_option("--kind", options->kind, "the workload kind (default: run)");
  command->add_option("--image", options->image, "the image (linux: host, or a rootfs path)");
  command->add_option("--work-dir", options->work_dir,
                      "the guest work dir (default /maf-sandbox/work)");
  command->add_option("--scope", options->scope, "the key's scope (default airlock-run)");
  command->add_option("--thread", options->thread, "the key's thread (default: a fresh one)");
  command->add_option("--agent", options->agent, "the key's agent dir (default cli)");
  command->add_option("--egress", options->egress, "closed (default) or allowlist");
  // One value per flag (--allow, --allow-port, --put, --get): a vector option that may take
  // several would swallow the `--` before the command, and the command's own flags would then
  // be parsed as ours.
  command
      ->add_option("--allow", options->allow, "a host allowed out (repeatable; implies allowlist)")
      ->allow_extra_args(false);
  command
      ->add_option("--allow-port", options->allow_ports,
                   "a port allowed out (repeatable; default 443)")
      ->allow_extra_args(false);
  add_size_option(*command, "--memory", options->memory, "memory limit (512m, 2g, …)");
  command->add_option("--pids", options->pids, "process limit");
  command->add_option("--cpu", options->cpu, "CPU limit in thousandths of a CPU");
  add_size_option(*command, "--disk", options->disk,
                  "what the guest may write in all (its work dir, /tmp, image writes): 1g, …");
  command
      ->add_option("--put", options->puts,
                   "LOCAL=GUEST: copy a file or a directory tree in first (repeatable; links "
                   "inside a tree are refused)")
      ->allow_extra_args(false);
  command
      ->add_option("--get", options->gets,
                   "GUEST: fetch a file or a directory tree afterwards (repeatable; links are "
                   "skipped)")
      ->allow_extra_args(false);
  command->add_option("--out", options->out_dir, "where --get files land (default .)");
  command->add_flag("--keep", options->keep, "leave the sandbox running afterwards");
  command->add_option("--from-snapshot", options->from_snapshot,
                      "start from this snapshot of the conversation (--scope, --thread)");
  command->add_flag("--snapshot", options->snapshot,
                    "save the sandbox after the command (its snapshot id is printed)");
  options->exec.add_to(*command);
  command->callback([options, &context] {
    spdlog::set_level(spdlog::level::from_str(context.log_level));
    context.exit_code = run(*options, context);
  });
});

}  // namespace
}  // namespace airlock::cli
