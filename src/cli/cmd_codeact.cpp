// airlock codeact: the `codeact` kind's `execute_code` tool, driven from the command line as a
// host application would drive it for a model —
//   a Python program file, shared files (--file NAME=LOCAL, the "file store" the program may
//   name), declared outputs (--output NAME, landing under --out DIR), optional host tools
//   (--demo-tool registers the built-in demo `lookup_rate`), the router flags of `run`.
// Prints the tool's model-facing result and where each artifact landed.
// Exit code: 0 when the program exited 0; 1 when it failed or the tool refused the call; 124
// when it timed out; 125 when airlock could not run it. SIGINT, SIGTERM and SIGHUP go to the
// program (Python's KeyboardInterrupt for SIGINT); the sandbox is still disposed (unless --keep)
// and airlock exits 128+N. A second one forces the program to stop; a third leaves at once.
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <map>
#include <mutex>

#include "airlock/errors.hpp"
#include "airlock/kinds/codeact.hpp"
#include "airlock/sinks.hpp"
#include "base/unique_fd.hpp"
#include "cli/command.hpp"
#include "cli/common.hpp"
#include "cli/exec_io.hpp"
#include "cli/relayed_backend.hpp"
#include "cli/tokens.hpp"

namespace airlock::cli {
namespace {

namespace codeact = kinds::codeact;

struct CodeactOptions {
  RouterFlags router;
  std::string program;
  std::vector<std::string> files;
  std::vector<std::string> outputs;
  std::string out_dir = ".";
  std::string image;
  std::string scope = "airlock-codeact";
  std::string thread;
  double timeout_seconds = 120;
  bool demo_tool = false;
  bool keep = false;
  bool quiet = false;
};

// Reads a local file whole, refusing past `cap` bytes (the kind's own caps apply again later).
std::string read_local(const std::string& path, std::uint64_t cap, const std::string& flag) {
  base::UniqueFd file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!file) {
    throw InvalidArgument(flag + ": cannot read the local file '" + path + "'",
                          flag.rfind("--", 0) == 0 ? flag.substr(2) : flag);
  }
  std::string content;
  char chunk[65536];
  for (;;) {
    const ssize_t got = ::read(file.get(), chunk, sizeof chunk);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw SystemError("cannot read " + path, errno);
    if (got == 0) return content;
    content.append(chunk, static_cast<std::size_t>(got));
    if (content.size() > cap) {
      throw TransferCapExceeded("files_in.max_bytes_per_file", path, cap, content.size());
    }
  }
}

// The files named with --file: the kind lists these names and reads one only when the program
// is given it.
class LocalFileStore final : public codeact::FileStore {
 public:
  LocalFileStore(std::map<std::string, std::string> files, std::uint64_t cap)
      : files_(std::move(files)), cap_(cap) {}
  std::vector<std::string> list() override {
    std::vector<std::string> names;
    for (const auto& [name, unused] : files_) names.push_back(name);
    return names;
  }
  std::optional<std::string> read(const std::string& name) override {
    auto found = files_.find(name);
    if (found == files_.end()) return std::nullopt;
    return read_local(found->second, cap_, "--file");
  }

 private:
  std::map<std::string, std::string> files_;
  std::uint64_t cap_;
};

// A demonstration tool, clearly not a data source: fixed, made-up exchange rates.
HostTool demo_lookup_rate() {
  return HostTool{
      "lookup_rate",
      "DEMO: a fixed, made-up exchange rate from one currency to EUR (USD, GBP, JPY, CHF)",
      {{"currency", ToolParameter::Type::string}},
      [](const json::Json& arguments) -> json::Json {
        static const std::map<std::string, double> kTable{
            {"USD", 0.92}, {"GBP", 1.17}, {"JPY", 0.0061}, {"CHF", 1.05}, {"EUR", 1.0}};
        const std::string currency = arguments["currency"].get<std::string>();
        auto found = kTable.find(currency);
        if (found == kTable.end()) throw std::runtime_error("no demo rate for " + currency);
        return json::Json{
            {"currency", currency}, {"to", "EUR"}, {"rate", found->second}, {"demo", true}};
      },
      HostToolDeclaration(SourceIntegrity::trusted, std::nullopt, Identity::app)};
}

int exit_code_for(const std::string& text) {
  if (text.rfind("Error: the program timed out", 0) == 0) return kExitTimeout;
  if (text.rfind("Error:", 0) == 0) return 1;
  // The kind reports a non-zero exit as a final "exit code: N" line of the program's part.
  if (text.rfind("exit code: ", 0) == 0 || text.find("\nexit code: ") != std::string::npos) {
    return 1;
  }
  return 0;
}

int run_codeact(const CodeactOptions& options, const Context& context) {
  // First, before anything starts a thread: every later thread inherits the blocked signals.
  SignalRelay relay(options.quiet || context.json);
  if (options.timeout_seconds <= 0) throw InvalidArgument("--timeout must be positive", "timeout");
  codeact::SpecOptions spec_options;
  if (!options.image.empty()) spec_options.image = options.image;
  if (!options.outputs.empty()) spec_options.outputs = codeact::Outputs::declared;
  if (options.demo_tool) {
    auto registry = std::make_shared<HostToolRegistry>();
    registry->register_tool(demo_lookup_rate());
    spec_options.host_tools = registry;
  }
  const std::string program =
      read_local(options.program, spec_options.files_in.max_bytes_per_file, "program");

  std::map<std::string, std::string> shared;
  json::Json file_names = json::Json::array();
  for (const auto& file : options.files) {
    const auto equals = file.find('=');
    if (equals == std::string::npos || equals == 0 || equals + 1 == file.size()) {
      throw InvalidArgument("--file expects NAME=LOCAL, got '" + file + "'", "file");
    }
    const std::string name = file.substr(0, equals);
    const std::string local = file.substr(equals + 1);
    if (::access(local.c_str(), R_OK) != 0) {
      throw InvalidArgument("--file: cannot read the local file '" + local + "'", "file");
    }
    shared[name] = local;
    file_names.push_back(name);
  }

  const auto configured = options.router.build("linux");
  // The kind runs the program's exec itself: the relay reaches it through the backends.
  const auto router = relayed_router(*configured, relay);
  const SandboxSpec spec = codeact::codeact_sandbox_spec(spec_options);
  const RoutingDecision decision = router->ensure_can_serve(spec);
  if (!context.json && !options.quiet) {
    std::cerr << "airlock: backend '" << decision.backend << "' ("
              << to_string(decision.backend_isolation) << ") serves kind '" << spec.kind()
              << "' at floor " << to_string(decision.effective_floor) << "\n";
  }

  const std::string thread = options.thread.empty() ? "codeact-" + random_token() : options.thread;
  codeact::ToolOptions tool_options;
  tool_options.router = router.get();
  tool_options.context.current_scope = [scope = options.scope] { return scope; };
  tool_options.context.current_thread_id = [thread] { return std::optional<std::string>(thread); };
  tool_options.spec = spec_options;
  tool_options.exec_timeout =
      std::chrono::milliseconds(static_cast<long long>(options.timeout_seconds * 1000));
  if (!shared.empty()) {
    tool_options.file_store =
        std::make_shared<LocalFileStore>(shared, spec_options.files_in.max_bytes_per_file);
  }
  // The file-system sink lands the outputs; the wrapper only remembers where.
  auto landed = std::make_shared<std::vector<std::pair<std::string, std::string>>>();
  if (!options.outputs.empty()) {
    FileSystemSinkOptions sink_options;
    sink_options.create_root = true;
    // Absolute, so the landed paths printed are usable from anywhere.
    OutputSink sink =
        make_file_system_sink(std::filesystem::absolute(options.out_dir), sink_options);
    tool_options.output_sink = OutputSink{
        [inner = sink.deliver, landed](const Artifact& artifact) {
          LandedArtifact result = inner(artifact);
          landed->emplace_back(result.name, result.handle ? *result.handle : result.display);
          return result;
        },
        sink.normalization};
  }

  struct Disposer {
    SandboxRouter* router;
    std::string scope;
    std::string thread;
    bool keep;
    ~Disposer() {
      if (!keep) router->dispose_scope(scope, thread);
    }
  } disposer{router.get(), options.scope, thread, options.keep};
  relay.set_abandon_note("left at once: the sandbox may still run; airlock purge --scope " +
                         options.scope + " --thread " + thread + " removes it");

  auto tool = codeact::make_codeact_tool(std::move(tool_options));
  if (!tool) throw BackendError("the router is disabled; codeact cannot run", "codeact");
  json::Json arguments{{"code", program}};
  if (!file_names.empty()) arguments["files"] = file_names;
  if (!options.outputs.empty()) arguments["outputs"] = options.outputs;
  // A signal that came before the program started: nothing runs.
  if (relay.received()) return relay.exit_code();
  const std::string text = tool->invoke(arguments);

  if (context.json) {
    json::Json artifacts = json::Json::array();
    for (const auto& [name, where] : *landed) {
      artifacts.push_back({{"name", name}, {"landed", where}});
    }
    json::Json document{{"decision", json::to_json(decision)},
                        {"key", json::to_json(SandboxKey{options.scope, thread, "codeact"})},
                        {"kept", options.keep},
                        {"result", text},
                        {"outputs", artifacts}};
    if (relay.received()) document["interrupted_by"] = signal_name(relay.received());
    print_json(document);
  } else {
    std::cout << text << "\n";
    std::cout.flush();
    if (!options.quiet) {
      for (const auto& [name, where] : *landed) {
        std::cerr << "airlock: landed " << name << " at " << where << "\n";
      }
      if (options.keep) {
        std::cerr << "airlock: kept the sandbox (scope " << options.scope << ", thread " << thread
                  << "); remove it with airlock purge --scope " << options.scope << " --thread "
                  << thread << "\n";
      }
    }
  }
  return relay.received() ? relay.exit_code() : exit_code_for(text);
}

const bool kCodeactCommand = register_command("codeact", [](CLI::App& app, Context& context) {
  auto options = std::make_shared<CodeactOptions>();
  CLI::App* command = app.add_subcommand(
      "codeact",
      "run a Python program through the codeact kind (execute_code): shared files, host tools, "
      "declared outputs");
  options->router.add_to(*command);
  command->add_option("program", options->program, "the Python program file")->required();
  // One value per flag, like run's --put/--get: a repeatable option must not swallow what follows.
  command
      ->add_option("--file", options->files,
                   "NAME=LOCAL: a file the program is given as NAME (repeatable)")
      ->allow_extra_args(false);
  command
      ->add_option("--output", options->outputs,
                   "NAME: a file the program writes, landed under --out (repeatable)")
      ->allow_extra_args(false);
  command->add_option("--out", options->out_dir, "where --output files land (default .)");
  command->add_option("--image", options->image, "the image (linux: host, or a stored image)");
  command->add_option("--scope", options->scope, "the key's scope (default airlock-codeact)");
  command->add_option("--thread", options->thread, "the key's thread (default: a fresh one)");
  command->add_option("--timeout", options->timeout_seconds, "seconds (default 120)");
  command->add_flag("--demo-tool", options->demo_tool,
                    "register the built-in DEMO host tool lookup_rate(currency) (fixed, made-up "
                    "rates)");
  command->add_flag("--keep", options->keep, "leave the sandbox running afterwards");
  command->add_flag("--quiet", options->quiet, "no airlock notes on stderr");
  command->callback([options, &context] {
    spdlog::set_level(spdlog::level::from_str(context.log_level));
    context.exit_code = run_codeact(*options, context);
  });
});

}  // namespace
}  // namespace airlock::cli
