// airlock snapshot: a sandbox's state saved, listed and removed (docs/snapshots.md).
//
//   airlock snapshot create --scope S --thread T [--agent A] [--kind K] [--spec F] [--egress …]
//       saves the live sandbox of that key and kind (one kept by `airlock run --keep`, or the
//       daemon's); prints its id. A backend whose sandboxes live only as long as the process
//       that made them (microvm) is saved with `airlock run --snapshot` instead.
//   airlock snapshot ls [--scope S [--thread T]]
//       the snapshots in the backends' durable state (all of them without --scope); --json
//       prints one array of snapshot documents.
//   airlock snapshot rm ID…
//       removes snapshots, whatever conversation took them (the operator's view, like purge).
// Resuming is `airlock run --from-snapshot ID --scope S --thread T -- CMD`.
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <iostream>

#include "airlock/backend_factory.hpp"
#include "airlock/encoding.hpp"
#include "airlock/errors.hpp"
#include "cli/command.hpp"
#include "cli/common.hpp"
#include "cli/state_backends.hpp"

namespace airlock::cli {
namespace {

struct SnapshotOptions {
  RouterFlags router;
  std::string scope = "airlock-run";
  std::string thread;
  std::string agent = "cli";
  std::string kind;
  std::string spec_file;
  std::string image;
  std::string egress;
  std::vector<std::string> allow;
  std::vector<std::string> ids;
  bool scope_given = false;
};

std::string size_text(std::uint64_t bytes) {
  char text[32];
  if (bytes >= (std::uint64_t{1} << 20)) {
    std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  } else {
    std::snprintf(text, sizeof text, "%.1f KiB", static_cast<double>(bytes) / 1024);
  }
  return text;
}

// The spec that names the sandbox: its kind and posture are its identity.
SandboxSpec spec_of(const SnapshotOptions& options) {
  SandboxSpec::Fields fields;
  if (!options.spec_file.empty()) fields = load_spec(options.spec_file).fields();
  if (!options.kind.empty()) fields.kind = options.kind;
  if (fields.kind.empty()) fields.kind = "run";
  if (!options.image.empty()) fields.image = options.image;
  if (!options.egress.empty()) fields.egress = parse_egress(options.egress, "--egress");
  if (!options.allow.empty()) {
    fields.egress_allow = options.allow;
    if (options.egress.empty()) fields.egress = Egress::allowlist;
  }
  return SandboxSpec(std::move(fields));
}

int create(const SnapshotOptions& options, const Context& context) {
  if (options.thread.empty()) {
    throw InvalidArgument("snapshot create: give the sandbox's --thread (and --scope, --agent "
                          "when not run's defaults); airlock ls lists the sandboxes",
                          "thread");
  }
  const SandboxKey key{options.scope, options.thread, options.agent};
  const SandboxSpec spec = spec_of(options);
  auto router = options.router.build("linux");
  // The sandbox must be there already: a snapshot of a fresh one would save nothing of anyone's.
  bool live = false;
  const std::string kind = map_label_value(spec.kind());
  for (const auto& record : router->backend()->list_sandboxes()) {
    const auto label = [&record](const char* name) {
      const auto found = record.labels.find(name);
      return found == record.labels.end() ? std::string() : found->second;
    };
    live = live || (label("airlock.scope") == map_label_value(key.scope) &&
                    label("airlock.thread") == map_label_value(key.thread_id) &&
                    label("airlock.agent") == map_label_value(key.agent_dir) &&
                    label("airlock.kind") == kind && record.state == "running");
  }
  if (!live) {
    throw NotFound("snapshot create: no running '" + spec.kind() + "' sandbox of scope " +
                   key.scope + ", thread " + key.thread_id + ", agent " + key.agent_dir +
                   " (airlock ls lists them; airlock run --snapshot saves one as it ends)");
  }
  const SnapshotRecord saved = router->snapshot(key, spec);
  if (context.json) {
    print_json(json::to_json(saved));
  } else {
    std::cout << saved.id << "\n";
    std::cerr << "airlock: saved " << to_string(saved.content) << ", " << size_text(saved.bytes)
              << "; resume it with airlock run --from-snapshot " << saved.id << " --scope "
              << key.scope << " --thread " << key.thread_id << " -- CMD\n";
  }
  return 0;
}

int list(const SnapshotOptions& options, const Context& context) {
  std::vector<SnapshotRecord> records;
  for (const auto& backend : state_backends(options.router)) {
    for (auto& record : backend->list_snapshots()) {
      const auto label = [&record](const char* name) {
        const auto found = record.labels.find(name);
        return found == record.labels.end() ? std::string() : found->second;
      };
      if (options.scope_given && label("airlock.scope") != map_label_value(options.scope)) continue;
      if (!options.thread.empty() && label("airlock.thread") != map_label_value(options.thread)) {
        continue;
      }
      records.push_back(std::move(record));
    }
  }
  std::sort(records.begin(), records.end(), [](const SnapshotRecord& a, const SnapshotRecord& b) {
    return a.created_at < b.created_at;
  });
  if (context.json) {
    json::Json all = json::Json::array();
    for (const auto& record : records) all.push_back(json::to_json(record));
    print_json(all);
    return 0;
  }
  std::printf("%-29s %-8s %-17s %-12s %-10s %-20s %s\n", "ID", "BACKEND", "HOLDS", "KIND", "SIZE",
              "CREATED", "SCOPE / THREAD (as stored)");
  for (const auto& record : records) {
    const auto label = [&record](const char* name) {
      const auto found = record.labels.find(name);
      return found == record.labels.end() ? std::string("-") : found->second;
    };
    std::printf("%-29s %-8s %-17s %-12s %-10s %-20s %s / %s\n", record.id.c_str(),
                record.backend.c_str(), std::string(to_string(record.content)).c_str(),
                record.kind.c_str(), size_text(record.bytes).c_str(),
                format_utc(record.created_at).c_str(), label("airlock.scope").c_str(),
                label("airlock.thread").c_str());
  }
  return 0;
}

int remove(const SnapshotOptions& options, const Context& context) {
  if (options.ids.empty()) throw InvalidArgument("snapshot rm: name the snapshots to remove", "id");
  int failed = 0;
  json::Json removed = json::Json::array();
  const auto backends = state_backends(options.router);
  for (const auto& id : options.ids) {
    bool found = false;
    for (const auto& backend : backends) {
      if (!backend->find_snapshot(id)) continue;
      found = true;
      if (backend->delete_snapshot(id)) {
        removed.push_back(id);
        if (!context.json) std::cerr << "airlock: removed " << id << "\n";
      } else {
        ++failed;
        std::cerr << "airlock: " << id << " could not be removed whole (see the log)\n";
      }
    }
    if (!found) {
      ++failed;
      std::cerr << "airlock: no snapshot '" << id << "'\n";
    }
  }
  if (context.json) print_json({{"removed", removed}});
  return failed == 0 ? 0 : 1;
}

const bool kSnapshotCommand = register_command("snapshot", [](CLI::App& app, Context& context) {
  auto options = std::make_shared<SnapshotOptions>();
  CLI::App* snapshot =
      app.add_subcommand("snapshot", "save a sandbox's state; list and remove snapshots");
  snapshot->require_subcommand(1);

  CLI::App* create_command =
      snapshot->add_subcommand("create", "save the running sandbox of a key; prints its id");
  options->router.add_to(*create_command);
  create_command->add_option("--scope", options->scope, "the key's scope (default airlock-run)");
  create_command->add_option("--thread", options->thread, "the key's thread")->required();
  create_command->add_option("--agent", options->agent, "the key's agent dir (default cli)");
  create_command->add_option("--kind", options->kind, "the sandbox's kind (default run)");
  create_command->add_option("--spec", options->spec_file,
                             "the spec the sandbox runs under (its kind and egress name it)");
  create_command->add_option("--image", options->image, "the image it runs");
  create_command->add_option("--egress", options->egress, "its egress: closed (default), allowlist");
  create_command->add_option("--allow", options->allow, "a host its allowlist allows (repeatable)");
  create_command->callback([options, &context] {
    spdlog::set_level(spdlog::level::from_str(context.log_level));
    context.exit_code = create(*options, context);
  });

  CLI::App* ls = snapshot->add_subcommand("ls", "list snapshots from the backends' durable state");
  options->router.add_backend_flags_to(*ls);
  ls->add_option("--scope", options->scope, "only this conversation scope's")
      ->each([options](const std::string&) { options->scope_given = true; });
  ls->add_option("--thread", options->thread, "only this thread's");
  ls->callback([options, &context] {
    spdlog::set_level(spdlog::level::from_str(context.log_level));
    context.exit_code = list(*options, context);
  });

  CLI::App* rm = snapshot->add_subcommand("rm", "remove snapshots, whoever took them");
  options->router.add_backend_flags_to(*rm);
  rm->add_option("id", options->ids, "snapshot ids (airlock snapshot ls lists them)")->required();
  rm->callback([options, &context] {
    spdlog::set_level(spdlog::level::from_str(context.log_level));
    context.exit_code = remove(*options, context);
  });
});

}  // namespace
}  // namespace airlock::cli
