// airlock ls: every sandbox the backends' durable state knows about, whoever created it.
//
// A table, or with --json (after `ls` or before it) a JSON array with one object per sandbox:
// the record document the Python binding's list_sandboxes() and airlockd's
// GET /v1/backends/{name}/sandboxes also answer — backend, instance_id, kind, state,
// egress_posture, created_at (unix seconds; 0 when unknown) and labels (as stored: a short,
// label-safe value raw, anything else "sha256-…"). The operator reads the durable state itself
// here, so nothing is digested further.
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <ctime>

#include "cli/command.hpp"
#include "cli/common.hpp"
#include "cli/state_backends.hpp"

namespace airlock::cli {
namespace {

int run_ls(const RouterFlags& flags, const Context& context) {
  json::Json all = json::Json::array();
  std::vector<SandboxRecord> records;
  for (const auto& backend : state_backends(flags)) {
    for (auto& record : backend->list_sandboxes()) records.push_back(std::move(record));
  }
  if (context.json) {
    for (const auto& record : records) all.push_back(json::to_json(record));
    print_json(all);
    return 0;
  }
  std::printf("%-8s %-36s %-16s %-10s %-20s %-8s %s\n", "BACKEND", "INSTANCE", "KIND", "STATE",
              "CREATED", "EGRESS", "SCOPE / THREAD (as stored)");
  for (const auto& record : records) {
    auto label = [&](const char* name) {
      auto found = record.labels.find(name);
      return found == record.labels.end() ? std::string("-") : found->second;
    };
    const auto column = [](const std::string& value) { return value.empty() ? "-" : value; };
    std::printf("%-8s %-36s %-16s %-10s %-20s %-8s %s / %s\n", record.backend.c_str(),
                record.instance_id.c_str(), column(record.kind).c_str(), record.state.c_str(),
                format_utc(record.created_at).c_str(), column(record.egress_posture).c_str(),
                label("airlock.scope").c_str(), label("airlock.thread").c_str());
  }
  return 0;
}

const bool kLsCommand = register_command("ls", [](CLI::App& app, Context& context) {
  auto flags = std::make_shared<RouterFlags>();
  CLI::App* ls = app.add_subcommand("ls", "list sandboxes from the backends' durable state");
  flags->add_backend_flags_to(*ls);
  ls->callback([flags, &context] {
    spdlog::set_level(spdlog::level::from_str(context.log_level));
    context.exit_code = run_ls(*flags, context);
  });
});

}  // namespace
}  // namespace airlock::cli
