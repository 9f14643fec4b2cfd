// airlock run: one command in a fresh sandbox, start to finish —
//   acquire → put files (--put LOCAL=GUEST) → exec → fetch outputs (--get GUEST into --out DIR)
//   → dispose (unless --keep).
// Exit code: the guest's own; 124 when it timed out; 125 when airlock could not run it.
#include <errno.h>
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <iostream>
#include <random>
#include <sstream>

#include "airlock/backend_factory.hpp"
#include "airlock/errors.hpp"
#include "airlock/outputs.hpp"
#include "airlock/paths.hpp"
#include "airlock/sinks.hpp"
#include "base/unique_fd.hpp"
#include "cli/command.hpp"
#include "cli/common.hpp"

namespace airlock::cli {
namespace {

struct RunOptions {
  RouterFlags router;
  std::string spec_file;
  std::string kind;
  std::string image;
  std::string work_dir;
  std::string scope = "airlock-run";
  std::string thread;
  std::string agent = "cli";
  double timeout_seconds = 60;
  std::uint64_t max_output = std::uint64_t{64} << 20;
  bool truncate = false;
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
  bool shell = false;
  bool forward_stdin = false;
  bool quiet = false;
  std::vector<std::string> command;
};

std::string random_token() {
  std::random_device device;
  std::ostringstream text;
  text << std::hex << device() << device();
  return text.str();
}

// Everything readable from `fd`, refusing past `cap` bytes.
std::string read_all(int fd, std::uint64_t cap, const std::string& what) {
  std::string content;
  char chunk[65536];
  for (;;) {
    const ssize_t got = ::read(fd, chunk, sizeof chunk);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw SystemError("cannot read " + what, errno);
    if (got == 0) return content;
    content.append(chunk, static_cast<std::size_t>(got));
    if (content.size() > cap) throw TransferCapExceeded("files_in.max_bytes_per_file", what, cap);
  }
}

std::string read_local_file(const std::string& path, std::uint64_t cap) {
  base::UniqueFd file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!file) throw InvalidArgument("--put: cannot read the local file '" + path + "'", "put");
  std::string content = read_all(file.get(), cap, path);
  if (content.size() > cap) {
    throw TransferCapExceeded("files_in.max_bytes_per_file", path, cap, content.size());
  }
  return content;
}

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
  // under the same relative name.
  for (const auto& get : options.gets) {
    DeclaredOutput output;
    output.path = get;
    fields.declared_outputs.push_back(output);
  }
  return SandboxSpec(std::move(fields));
}

int run(const RunOptions& options, const Context& context) {
  if (options.command.empty()) {
    throw InvalidArgument(
        "run: give the command after --, e.g. airlock run -- python3 -c 'print(1)'", "command");
  }
  if (options.timeout_seconds <= 0) throw InvalidArgument("--timeout must be positive", "timeout");
  const SandboxSpec spec = build_spec(options);
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
  if (!context.json && !options.quiet) {
    std::cerr << "airlock: backend '" << decision.backend << "' ("
              << to_string(decision.backend_isolation) << ") serves kind '" << spec.kind()
              << "' at floor " << to_string(decision.effective_floor) << "\n";
  }

  // The local files are read before anything is started, so a typo costs no sandbox.
  std::vector<std::pair<std::string, std::string>> puts;
  for (const auto& put : options.puts) {
    const auto equals = put.find('=');
    if (equals == std::string::npos || equals == 0 || equals + 1 == put.size()) {
      throw InvalidArgument("--put expects LOCAL=GUEST, got '" + put + "'", "put");
    }
    puts.emplace_back(put.substr(equals + 1),
                      read_local_file(put.substr(0, equals), spec.files_in().max_bytes_per_file));
  }
  if (puts.size() > spec.files_in().max_files) {
    throw TransferCapExceeded("files_in.max_files", "--put", spec.files_in().max_files,
                              puts.size());
  }

  struct Disposer {
    SandboxRouter* router;
    SandboxKey key;
    std::string kind;
    bool keep;
    ~Disposer() {
      if (!keep) router->dispose_kind(key, kind);
    }
  } disposer{router.get(), key, spec.kind(), options.keep};

  auto sandbox = router->acquire(key, spec);
  std::uint64_t total_in = 0;
  for (const auto& [guest, content] : puts) {
    total_in += content.size();
    if (total_in > spec.files_in().max_total_bytes) {
      throw TransferCapExceeded("files_in.max_total_bytes", guest, spec.files_in().max_total_bytes,
                                total_in);
    }
    sandbox->write_file(guest, content, spec.work_dir());
  }

  ExecOptions exec;
  exec.working_directory = spec.work_dir();
  exec.timeout = std::chrono::milliseconds(static_cast<long long>(options.timeout_seconds * 1000));
  exec.max_output_bytes = options.max_output;
  exec.overflow = options.truncate ? OutputOverflow::truncate : OutputOverflow::refuse;
  if (options.forward_stdin) {
    exec.stdin_bytes = read_all(0, spec.files_in().max_bytes_per_file, "stdin");
  }
  std::string line;
  for (const auto& word : options.command) line += (line.empty() ? "" : " ") + word;
  const Command command = options.shell ? Command::shell(line) : Command::argv(options.command);
  const ExecResult result = sandbox->exec(command, exec);

  // Outputs land through the file-system sink: nothing is written outside --out, whatever links
  // sit in it or are raced into it.
  json::Json landed = json::Json::array();
  if (!landing_outputs(spec).empty()) {
    FileSystemSinkOptions sink_options;
    sink_options.create_root = true;
    const OutputSink sink = make_file_system_sink(options.out_dir, sink_options);
    for (const auto& artifact : collect_outputs(*sandbox, spec, &sink)) {
      landed.push_back({{"name", artifact.name},
                        {"landed", artifact.handle ? *artifact.handle : artifact.display}});
    }
  }

  if (context.json) {
    print_json({{"decision", json::to_json(decision)},
                {"instance_id", sandbox->instance_id()},
                {"key", json::to_json(key)},
                {"kept", options.keep},
                {"result", json::to_json(result)},
                {"outputs", landed}});
  } else {
    std::cout.write(result.stdout_bytes.data(),
                    static_cast<std::streamsize>(result.stdout_bytes.size()));
    std::cout.flush();
    std::cerr.write(result.stderr_bytes.data(),
                    static_cast<std::streamsize>(result.stderr_bytes.size()));
    if (result.truncated) {
      std::cerr << "airlock: output truncated at " << options.max_output << " bytes\n";
    }
    for (const auto& output : landed) {
      if (!options.quiet)
        std::cerr << "airlock: landed " << output["landed"].get<std::string>() << "\n";
    }
    if (options.keep && !options.quiet) {
      std::cerr << "airlock: kept " << sandbox->instance_id() << " (scope " << key.scope
                << ", thread " << key.thread_id << "); remove it with airlock purge --scope "
                << key.scope << " --thread " << key.thread_id << "\n";
    }
  }
  return result.exit_code;
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
  command->add_option("--timeout", options->timeout_seconds, "seconds (default 60)");
  command->add_option("--max-output", options->max_output,
                      "ceiling on stdout+stderr in bytes (default 64 MiB); past it the command "
                      "is killed, or with --truncate cut");
  command->add_flag("--truncate", options->truncate, "keep the head past --max-output");
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
  command->add_option("--memory", options->memory, "memory limit in bytes");
  command->add_option("--pids", options->pids, "process limit");
  command->add_option("--cpu", options->cpu, "CPU limit in thousandths of a CPU");
  command->add_option("--disk", options->disk,
                      "what the guest may write in all, in bytes (its work dir, /tmp, image "
                      "writes)");
  command->add_option("--put", options->puts, "LOCAL=GUEST: copy a file in first (repeatable)")
      ->allow_extra_args(false);
  command->add_option("--get", options->gets, "GUEST: fetch a file afterwards (repeatable)")
      ->allow_extra_args(false);
  command->add_option("--out", options->out_dir, "where --get files land (default .)");
  command->add_flag("--keep", options->keep, "leave the sandbox running afterwards");
  command->add_flag("--shell", options->shell, "run the command words as one sh -c line");
  command->add_flag("--stdin", options->forward_stdin, "feed this process's stdin to the command");
  command->add_flag("--quiet", options->quiet, "no airlock notes on stderr");
  command->add_option("command", options->command, "the command (after --)")->expected(-1);
  command->callback([options, &context] {
    spdlog::set_level(spdlog::level::from_str(context.log_level));
    context.exit_code = run(*options, context);
  });
});

}  // namespace
}  // namespace airlock::cli
