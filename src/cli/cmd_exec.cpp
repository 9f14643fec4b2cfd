// airlock exec: one command in a sandbox kept by `airlock run --keep` (or any host), found in the
// backends' durable state as `airlock ls` finds it —
//   by key:  airlock exec --scope S --thread T [--agent A] [--kind K] -- CMD…
//            (run's key semantics: scope airlock-run and agent cli unless given)
//   by id:   airlock exec --id INSTANCE_ID -- CMD…  (or airlock exec INSTANCE_ID CMD… when
//            the command has no options of its own: a word before `--` ends CLI11's positional)
// The same -e/--env-file/-w/-i/-t flags as run; -it with no command is a shell. The sandbox is
// reached, never created: one that is gone or not running is an error, and so is a key that
// names several (give --kind or the id). It is never disposed: `airlock purge` removes it.
// SIGINT, SIGTERM and SIGHUP go to the command; airlock exits 128+N.
// Exit code: the guest's own; 124 when it timed out; 125 when airlock could not run it.
#include <spdlog/spdlog.h>

#include <iostream>

#include "airlock/backend_factory.hpp"
#include "airlock/encoding.hpp"
#include "airlock/errors.hpp"
#include "cli/command.hpp"
#include "cli/common.hpp"
#include "cli/exec_flags.hpp"
#include "cli/exec_io.hpp"
#include "cli/state_backends.hpp"
#include "cli/tokens.hpp"

namespace airlock::cli {
namespace {

struct ExecCommandOptions {
  RouterFlags router;
  ExecFlags exec;
  std::string scope;
  std::string thread;
  std::string agent = "cli";
  std::string kind;
  std::string work_dir;
  std::string id;
};

bool is_digest(const std::string& value) {
  return value.rfind("sha256-", 0) == 0;
}

std::string stored_label(const SandboxRecord& record, const char* name) {
  const auto found = record.labels.find(name);
  return found == record.labels.end() ? std::string() : found->second;
}

// The key a record was made for, from its labels; refused when a part is stored as a digest.
SandboxKey key_of(const SandboxRecord& record) {
  SandboxKey key{stored_label(record, "airlock.scope"), stored_label(record, "airlock.thread"),
                 stored_label(record, "airlock.agent")};
  for (const auto* part : {&key.scope, &key.thread_id, &key.agent_dir}) {
    if (part->empty() || is_digest(*part)) {
      throw InvalidArgument("exec: the sandbox " + record.instance_id +
                                " is stored under a digest of its key, which cannot be read "
                                "back; name it by --scope and --thread instead",
                            "key");
    }
  }
  return key;
}

// The spec that reaches the kept sandbox again: its kind and egress posture as recorded.
SandboxSpec reaching_spec(const SandboxRecord& record, const std::string& work_dir) {
  SandboxSpec::Fields fields;
  fields.kind = record.kind;
  if (!work_dir.empty()) fields.work_dir = work_dir;
  const std::string& posture = record.egress_posture;
  const auto colon = posture.find(':');
  fields.egress = parse_egress(posture.substr(0, colon), "the sandbox's egress posture");
  if (colon != std::string::npos) {
    std::string hosts = posture.substr(colon + 1);
    for (std::size_t start = 0; start <= hosts.size();) {
      const std::size_t comma = std::min(hosts.find(',', start), hosts.size());
      if (comma > start) fields.egress_allow.push_back(hosts.substr(start, comma - start));
      start = comma + 1;
    }
  }
  return SandboxSpec(std::move(fields));
}

SandboxRecord find_kept(const ExecCommandOptions& options, std::vector<std::string>& words) {
  const bool by_key = !options.thread.empty() || !options.scope.empty();
  if (by_key && options.thread.empty()) {
    throw InvalidArgument("exec: --scope needs --thread (or name the sandbox by its id)", "thread");
  }
  std::string id = options.id;
  if (by_key && !id.empty()) {
    throw InvalidArgument("exec: name the sandbox by --scope/--thread or by --id, not both", "id");
  }
  if (!by_key && id.empty()) {
    if (words.empty()) {
      throw InvalidArgument(
          "exec: name the sandbox, by --scope S --thread T or by its id (airlock ls lists "
          "them), then the command after --",
          "sandbox");
    }
    id = words.front();
    words.erase(words.begin());
  }
  const SandboxKey key{options.scope.empty() ? "airlock-run" : options.scope, options.thread,
                       options.agent};
  std::vector<SandboxRecord> matches;
  for (const auto& backend : state_backends(options.router)) {
    for (auto& record : backend->list_sandboxes()) {
      const bool match =
          by_key ? stored_label(record, "airlock.scope") == map_label_value(key.scope) &&
                       stored_label(record, "airlock.thread") == map_label_value(key.thread_id) &&
                       stored_label(record, "airlock.agent") == map_label_value(key.agent_dir) &&
                       (options.kind.empty() || record.kind == options.kind)
                 : record.instance_id == id;
      if (match) matches.push_back(std::move(record));
    }
  }
  const std::string named = by_key ? "scope " + key.scope + ", thread " + key.thread_id +
                                         ", agent " + key.agent_dir +
                                         (options.kind.empty() ? "" : ", kind " + options.kind)
                                   : "id " + id;
  if (matches.empty()) {
    throw NotFound("exec: no kept sandbox for " + named +
                   " in the backends' state (airlock ls lists them)");
  }
  if (matches.size() > 1) {
    std::string listed;
    for (const auto& record : matches) {
      listed += (listed.empty() ? "" : ", ") + record.instance_id + " (kind " + record.kind + ")";
    }
    throw InvalidArgument("exec: " + named + " names " + std::to_string(matches.size()) +
                              " sandboxes: " + listed + "; give --kind or the id",
                          "sandbox");
  }
  if (matches.front().state != "running") {
    throw NotFound("exec: the sandbox " + matches.front().instance_id + " (" + named + ") is " +
                   matches.front().state + ", not running");
  }
  return std::move(matches.front());
}

int run_exec(ExecCommandOptions& options, const Context& context) {
  // First, before anything starts a thread: every later thread inherits the blocked signals.
  SignalRelay relay(options.exec.quiet || context.json);
  options.exec.check();
  std::vector<std::string> words = options.exec.command;
  const SandboxRecord record = find_kept(options, words);
  ExecFlags flags = options.exec;
  flags.command = words;
  const Command command = flags.to_command(
      "exec: give the command after --, e.g. airlock exec --scope S --thread T -- ls (or -it "
      "for a shell)");
  const SandboxKey key = options.thread.empty()
                             ? key_of(record)
                             : SandboxKey{options.scope.empty() ? "airlock-run" : options.scope,
                                          options.thread, options.agent};
  const SandboxSpec spec = reaching_spec(record, options.work_dir);

  json::Json routing = options.router.config("linux");
  routing["selected"] = record.backend;
  auto router = make_router(routing, "config");
  router->ensure_can_serve(spec);
  auto sandbox = router->acquire(key, spec);
  if (sandbox->instance_id() != record.instance_id) {
    // Reaching it made a new one: the kept sandbox ended since it was listed.
    const std::string made = sandbox->instance_id();
    sandbox.reset();
    router->dispose_kind(key, spec.kind(), made);
    throw NotFound("exec: the sandbox " + record.instance_id + " is gone");
  }
  relay.set_abandon_note("left at once; the command may still run in " + record.instance_id);

  ExecResult result;
  if (relay.received()) {
    result.exit_code = relay.exit_code();
  } else {
    result = run_in_foreground(*sandbox, command, flags, spec.work_dir(), context.json, relay);
  }
  const bool interrupted = relay.received() != 0;
  if (context.json) {
    json::Json document{{"instance_id", record.instance_id},
                        {"backend", record.backend},
                        {"key", json::to_json(key)},
                        {"result", json::to_json(result)}};
    if (interrupted) document["interrupted_by"] = signal_name(relay.received());
    print_json(document);
  } else if (result.truncated) {
    std::cerr << "airlock: output truncated at " << flags.max_output << " bytes\n";
  }
  return interrupted ? relay.exit_code() : result.exit_code;
}

const bool kExecCommand = register_command("exec", [](CLI::App& app, Context& context) {
  auto options = std::make_shared<ExecCommandOptions>();
  CLI::App* command = app.add_subcommand(
      "exec", "run a command in a kept sandbox, named by --scope/--thread or by its id");
  options->router.add_to(*command);
  command->add_option("--scope", options->scope, "the key's scope (default airlock-run)");
  command->add_option("--thread", options->thread, "the key's thread");
  command->add_option("--agent", options->agent, "the key's agent dir (default cli)");
  command->add_option("--id", options->id, "the sandbox's instance id (airlock ls lists them)");
  command->add_option("--kind", options->kind, "the sandbox's kind, when the key has several");
  command->add_option("--work-dir", options->work_dir,
                      "the guest work dir the sandbox was made with (default /maf-sandbox/work)");
  options->exec.add_to(*command);
  command->callback([options, &context] {
    spdlog::set_level(spdlog::level::from_str(context.log_level));
    context.exit_code = run_exec(*options, context);
  });
});

}  // namespace
}  // namespace airlock::cli
