#include "cli/command.hpp"

#include <algorithm>
#include <limits>

namespace airlock::cli {
namespace {

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The closest of `candidates` to `word`, when close enough to be a typo of it.
std::string nearest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_distance = std::numeric_limits<std::size_t>::max();
  for (const auto& candidate : candidates) {
    const std::size_t distance = edit_distance(word, candidate);
    if (distance < best_distance) {
      best_distance = distance;
      best = candidate;
    }
  }
  const std::size_t allowed = std::max<std::size_t>(2, word.size() / 4);
  return best_distance <= allowed ? best : std::string();
}

std::vector<std::string> option_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* option : app.get_options()) {
    for (const auto& name : option->get_lnames()) names.push_back("--" + name);
    for (const auto& name : option->get_snames()) names.push_back("-" + name);
  }
  return names;
}

std::vector<std::string> command_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (!sub->get_name().empty() && !sub->get_group().empty()) names.push_back(sub->get_name());
  }
  return names;
}

// The command path parsed: the root, then each subcommand given.
std::vector<const CLI::App*> parsed_chain(const CLI::App& root) {
  std::vector<const CLI::App*> chain{&root};
  while (!chain.back()->get_subcommands().empty()) {
    chain.push_back(chain.back()->get_subcommands().front());
  }
  return chain;
}

// The first thing the parse did not understand. Unknown options come first, at any level: an
// option's value, or the words after `--` once a command's positionals are full, show up as
// stray arguments because of it (CLI11 hands them to the parent).
void check_chain(const CLI::App& root) {
  const std::vector<const CLI::App*> chain = parsed_chain(root);
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    const CLI::App& app = **it;
    if (app.get_prefix_command()) continue;  // its words are another program's (bench)
    for (const auto& word : app.remaining(false)) {
      if (word.size() < 2 || word[0] != '-' || word == "--") continue;
      const std::string where = command_path(app);
      const std::string name = word.substr(0, word.find('='));
      std::string message = "unknown option '" + name + "' for '" + where + "'";
      if (const std::string near = nearest(name, option_names(app)); !near.empty()) {
        message += "; did you mean " + near + "?";
      } else {
        message += "; see " + where + " --help";
      }
      throw InvalidArgument(message, name);
    }
  }
  for (const CLI::App* app : chain) {
    if (app->get_prefix_command()) continue;
    const std::string where = command_path(*app);
    for (const auto& word : app->remaining(false)) {
      if (word == "--") continue;
      const std::vector<std::string> commands = command_names(*app);
      if (!commands.empty() && app->get_subcommands().empty()) {
        std::string message = "unknown command '" + word + "' for '" + where + "'";
        if (const std::string near = nearest(word, commands); !near.empty()) {
          message += "; did you mean " + near + "?";
        } else {
          std::string known;
          for (const auto& command : commands) known += (known.empty() ? "" : ", ") + command;
          message += " (commands: " + known + ")";
        }
        throw InvalidArgument(message, "command");
      }
      throw InvalidArgument(
          "unexpected argument '" + word + "' for '" + where + "'; see " + where + " --help",
          "argument");
    }
  }
}

void prepare(CLI::App& app, Context& context) {
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    // A prefix command hands everything after its name to another program (bench).
    if (sub->get_prefix_command()) continue;
    add_global_options(*sub, context);
    sub->allow_extras();
    prepare(*sub, context);
  }
}

}  // namespace

std::map<std::string, CommandSetup>& registered_commands() {
  static std::map<std::string, CommandSetup> registered;
  return registered;
}

bool register_command(std::string name, CommandSetup setup) {
  registered_commands()[std::move(name)] = std::move(setup);
  return true;
}

void add_global_options(CLI::App& app, Context& context) {
  if (app.get_option_no_throw("--json") == nullptr) {
    app.add_flag("--json", context.json,
                 "machine-readable output on stdout (errors too: {\"error\": {…}})")
        ->group("Global options");
  }
  if (app.get_option_no_throw("--log-level") == nullptr) {
    CLI::Option* level =
        app.add_option("--log-level", context.log_level, "trace, debug, info, warn, error, off")
            ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}))
            ->group("Global options");
    if (app.get_parent() == nullptr) level->capture_default_str();
  }
}

void prepare_app(CLI::App& app, Context& context) {
  app.allow_extras();
  prepare(app, context);
  // Before any command's own callback: nothing runs on a misspelt option.
  app.parse_complete_callback([&app] { check_unknown(app); });
}

void check_unknown(const CLI::App& app) {
  check_chain(app);
}

InvalidArgument usage_error(const CLI::App& app, const CLI::ParseError& error) {
  try {
    check_unknown(app);
  } catch (const InvalidArgument& named) {
    return named;
  }
  std::string message = error.what();
  if (dynamic_cast<const CLI::RequiredError*>(&error) != nullptr &&
      message.find("subcommand") != std::string::npos) {
    // The deepest command given, which needs one of its own.
    const CLI::App* deepest = parsed_chain(app).back();
    std::string known;
    for (const auto& command : command_names(*deepest)) {
      known += (known.empty() ? "" : ", ") + command;
    }
    message = "'" + command_path(*deepest) + "' needs a command: " + known + " (see " +
              command_path(*deepest) + " --help)";
  }
  return InvalidArgument(message, "usage");
}

std::string command_path(const CLI::App& app) {
  std::string path = app.get_parent() == nullptr ? "airlock" : app.get_name();
  for (const CLI::App* parent = app.get_parent(); parent != nullptr;
       parent = parent->get_parent()) {
    path = (parent->get_parent() == nullptr ? std::string("airlock") : parent->get_name()) + " " +
           path;
  }
  return path;
}

}  // namespace airlock::cli
