// write_file_over_exec / read_file_over_exec: probes, caps, base64 chunks and a staging
// sibling (the contract is in shell_roads.hpp; comments here say why each step is shaped so).
#include "airlock/shell_roads.hpp"

#include <cerrno>
#include <chrono>
#include <random>

#include "airlock/encoding.hpp"
#include "airlock/paths.hpp"

namespace airlock {
namespace {

using Clock = std::chrono::steady_clock;

// What the probe learned about one path of the chain.
struct PathFacts {
  bool link = false;
  bool exists = false;
  bool directory = false;
  bool regular = false;
  bool readable = false;
  bool writable = false;
  bool searchable = false;
};

struct Probe {
  std::vector<std::string> chain;  // "/", "/a", …, the target
  std::vector<PathFacts> facts;
  std::optional<std::uint64_t> size;  // read probes: the target's size when it is regular
};

std::string call_id() {
  static thread_local std::mt19937_64 generator{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id;
  std::uint64_t bits = generator();
  for (int i = 0; i < 12; ++i, bits >>= 4) id += kHex[bits & 0xF];
  return id;
}

std::string parent_of(const std::string& absolute) {
  const auto slash = absolute.rfind('/');
  return slash == 0 ? "/" : absolute.substr(0, slash);
}

// The absolute target, refusing what no guest could name before anything runs.
std::string target_path(std::string_view path, std::string_view working_directory) {
  const std::string spelled(path);
  if (working_directory.empty() || working_directory.front() != '/') {
    throw InvalidArgument("shell road: the working directory \"" + std::string(working_directory) +
                              "\" is not an absolute guest path",
                          "working_directory");
  }
  if (path.empty()) throw FileRefused(FileRefusal::invalid_path, spelled, "the path is empty");
  if (path.find('\0') != std::string_view::npos) {
    throw FileRefused(FileRefusal::invalid_path, "(a path with a NUL byte)",
                      "the path contains a NUL byte");
  }
  if (path.find('\\') != std::string_view::npos) {
    throw FileRefused(FileRefusal::invalid_path, spelled,
                      "the path contains a backslash; guest paths have one grammar (POSIX)");
  }
  const std::string absolute = normalize_guest_path(
      path.front() == '/' ? spelled : std::string(working_directory) + "/" + spelled);
  if (absolute.size() >= 4096) {
    throw FileRefused(FileRefusal::invalid_path, absolute.substr(0, 64) + "…",
                      "the path is 4096 bytes or longer");
  }
  std::size_t start = 1;
  while (start < absolute.size()) {
    std::size_t end = absolute.find('/', start);
    if (end == std::string::npos) end = absolute.size();
    if (end - start > 255) {
      throw FileRefused(FileRefusal::invalid_path, absolute.substr(0, 64) + "…",
                        "a name in the path is longer than 255 bytes");
    }
    start = end + 1;
  }
  return absolute;
}

std::vector<std::string> chain_of(const std::string& absolute) {
  std::vector<std::string> chain{"/"};
  std::string prefix;
  std::size_t start = 1;
  while (start < absolute.size()) {
    std::size_t end = absolute.find('/', start);
    if (end == std::string::npos) end = absolute.size();
    prefix += "/" + absolute.substr(start, end - start);
    chain.push_back(prefix);
    start = end + 1;
  }
  return chain;
}

// Runs every command of one transfer under the transfer's deadline and ceiling rules.
class Road {
 public:
  Road(Sandbox& sandbox, std::string target, Milliseconds timeout, const char* verb)
      : sandbox_(sandbox),
        target_(std::move(target)),
        deadline_(Clock::now() + timeout),
        verb_(verb) {}

  const std::string& target() const { return target_; }

  // exec_bounded through sh in "/". Any failure to learn how the command ended is
  // ShellTransferUnfinished; `over_cap_on_overflow` marks an overflow as the read's own budget.
  ExecResult run(const std::string& line, std::uint64_t ceiling,
                 bool over_cap_on_overflow = false) {
    const auto remaining = std::chrono::duration_cast<Milliseconds>(deadline_ - Clock::now());
    if (remaining.count() <= 0) {
      throw ShellTransferUnfinished("the shell " + std::string(verb_) + " of '" + target_ +
                                    "' ran out of time after " + std::to_string(commands_) +
                                    " command(s); a staging file may remain");
    }
    ++commands_;
    try {
      return sandbox_.exec_bounded(Command::shell(line), "/", remaining, ceiling);
    } catch (const ExecOutputLimitExceeded& overflow) {
      if (over_cap_on_overflow) {
        throw ShellTransferUnfinished("the shell read of '" + target_ +
                                          "' passed its byte budget while it ran (the file grew "
                                          "past the cap); the command was stopped",
                                      true);
      }
      throw ShellTransferUnfinished(
          "a command of the shell " + std::string(verb_) + " of '" + target_ +
          "' printed more than " + std::to_string(overflow.limit()) + " bytes; its end is unknown");
    } catch (const Timeout& timeout) {
      throw ShellTransferUnfinished("a command of the shell " + std::string(verb_) + " of '" +
                                    target_ + "' did not finish in time (" + timeout.message() +
                                    "); its end is unknown");
    } catch (const Error& failure) {
      // The type and message only: a BackendError's detail can name provider endpoints.
      throw ShellTransferUnfinished("a command of the shell " + std::string(verb_) + " of '" +
                                    target_ + "' did not return its result (" + failure.type() +
                                    ": " + failure.message() + "); its end is unknown");
    } catch (const std::exception&) {
      throw ShellTransferUnfinished("a command of the shell " + std::string(verb_) + " of '" +
                                    target_ + "' did not return its result; its end is unknown");
    }
  }

  [[noreturn]] void failed(const std::string& step, const ExecResult& result) {
    std::string said = result.stderr_text();
    if (said.size() > 400) said = said.substr(0, 400) + "…";
    while (!said.empty() && (said.back() == '\n' || said.back() == ' ')) said.pop_back();
    throw ShellTransferFailed("the shell " + std::string(verb_) + " of '" + target_ +
                              "' failed at " + step + ": exit " + std::to_string(result.exit_code) +
                              (said.empty() ? "" : " — " + said));
  }

  Probe probe(bool with_size) {
    Probe probe;
    probe.chain = chain_of(target_);
    std::string line;
    for (const auto& path : probe.chain) {
      const std::string quoted = posix_quote(path);
      for (const char* test : {"L", "e", "d", "f", "r", "w", "x"}) {
        line += std::string("test -") + test + " " + quoted + " && printf " + test + "; ";
      }
      line += "printf '\\n'; ";
    }
    if (with_size)
      line += "test -f " + posix_quote(target_) + " && wc -c < " + posix_quote(target_);
    const ExecResult result = run(line, probe.chain.size() * 8 + 64 + 4096);
    if (result.exit_code != 0 && !with_size) failed("the probe", result);
    const std::string& out = result.stdout_bytes;
    std::size_t position = 0;
    for (std::size_t i = 0; i < probe.chain.size(); ++i) {
      const std::size_t newline = out.find('\n', position);
      if (newline == std::string::npos) failed("the probe (its answer was cut short)", result);
      PathFacts facts;
      for (char flag : out.substr(position, newline - position)) {
        switch (flag) {
          case 'L':
            facts.link = true;
            break;
          case 'e':
            facts.exists = true;
            break;
          case 'd':
            facts.directory = true;
            break;
          case 'f':
            facts.regular = true;
            break;
          case 'r':
            facts.readable = true;
            break;
          case 'w':
            facts.writable = true;
            break;
          case 'x':
            facts.searchable = true;
            break;
          default:
            failed("the probe (it printed something unexpected)", result);
        }
      }
      probe.facts.push_back(facts);
      position = newline + 1;
    }
    if (with_size) {
      std::string rest = out.substr(position);
      while (!rest.empty() && (rest.back() == '\n' || rest.back() == ' ')) rest.pop_back();
      while (!rest.empty() && rest.front() == ' ') rest.erase(rest.begin());
      if (!rest.empty()) {
        std::uint64_t size = 0;
        for (char c : rest) {
          if (c < '0' || c > '9')
            failed("the size probe (it printed something unexpected)", result);
          size = size * 10 + static_cast<std::uint64_t>(c - '0');
        }
        probe.size = size;
      }
    }
    return probe;
  }

 private:
  Sandbox& sandbox_;
  std::string target_;
  Clock::time_point deadline_;
  const char* verb_;
  int commands_ = 0;
};

[[noreturn]] void refuse(FileRefusal refusal, const std::string& path, const std::string& detail) {
  throw FileRefused(refusal, path, detail);
}

// The ancestors' part of both classifications. Returns the index of the deepest existing
// ancestor (every ancestor up to it is a searchable directory); `missing` says whether a deeper
// one is absent.
std::size_t check_ancestors(const Probe& probe, bool& missing) {
  std::size_t deepest = 0;
  missing = false;
  for (std::size_t i = 0; i + 1 < probe.chain.size(); ++i) {
    const PathFacts& facts = probe.facts[i];
    const std::string& path = probe.chain[i];
    if (facts.link) refuse(FileRefusal::invalid_path, probe.chain.back(), path + " is a link");
    if (!facts.exists) {
      missing = true;
      break;
    }
    if (!facts.directory) {
      refuse(FileRefusal::invalid_path, probe.chain.back(), path + " is not a directory");
    }
    if (!facts.searchable) {
      refuse(FileRefusal::permission_denied, probe.chain.back(), "the guest cannot search " + path);
    }
    deepest = i;
  }
  return deepest;
}

std::uint64_t base64_ceiling(std::uint64_t bytes) {
  const std::uint64_t encoded = (bytes + 2) / 3 * 4;
  return encoded + encoded / 64 + 2;  // line breaks, whatever the guest's wrap width
}

}  // namespace

void write_file_over_exec(Sandbox& sandbox, std::string_view path, std::string_view content,
                          std::string_view working_directory, Milliseconds timeout,
                          std::optional<TransferLimits> limits, const ShellRoadOptions& options) {
  const std::string target = target_path(path, working_directory);
  if (limits) {
    if (limits->max_files == 0) {
      throw TransferCapExceeded("files_in.max_files", target, 0, 1);
    }
    if (content.size() > limits->max_bytes_per_file) {
      throw TransferCapExceeded("files_in.max_bytes_per_file", target, limits->max_bytes_per_file,
                                content.size());
    }
    if (content.size() > limits->max_total_bytes) {
      throw TransferCapExceeded("files_in.max_total_bytes", target, limits->max_total_bytes,
                                content.size());
    }
  }
  if (options.chunk_bytes == 0) {
    throw InvalidArgument("shell road: chunk_bytes must be positive", "chunk_bytes");
  }
  if (target == "/") refuse(FileRefusal::is_directory, target, "the target is the root directory");

  Road road(sandbox, target, timeout, "write");
  const Probe probe = road.probe(false);
  bool missing = false;
  const std::size_t deepest = check_ancestors(probe, missing);
  const PathFacts& leaf = probe.facts.back();
  if (!missing) {
    if (leaf.link) refuse(FileRefusal::invalid_path, target, "the target is a link");
    if (leaf.directory) refuse(FileRefusal::is_directory, target, "the target is a directory");
    if (leaf.exists && !leaf.regular) {
      refuse(FileRefusal::invalid_path, target, "the target is not a regular file");
    }
    if (leaf.exists && !leaf.writable) {
      refuse(FileRefusal::permission_denied, target, "the guest cannot write the target");
    }
  }
  // The staging file and any missing parents are created in the deepest existing directory.
  if (!probe.facts[deepest].writable) {
    refuse(FileRefusal::permission_denied, target,
           "the guest cannot create files in " + probe.chain[deepest]);
  }

  const std::string parent = parent_of(target);
  const std::string staging =
      (parent == "/" ? std::string() : parent) + "/.airlock-stage-" + call_id();
  const std::string quoted_staging = posix_quote(staging);
  constexpr std::uint64_t kQuietCeiling = 4096;  // room for an error message, nothing more

  // The first command creates the parents and the staging file; each chunk is appended.
  std::size_t offset = 0;
  bool first = true;
  do {
    const std::string_view chunk = content.substr(offset, options.chunk_bytes);
    std::string line;
    if (first) line = "mkdir -p -- " + posix_quote(parent) + " && ";
    if (chunk.empty()) {
      line += ": > " + quoted_staging;
    } else {
      line += "printf '%s' " + base64_encode(chunk) + " | base64 -d " + (first ? ">" : ">>") + " " +
              quoted_staging;
    }
    const ExecResult result = road.run(line, kQuietCeiling);
    if (result.exit_code != 0) {
      road.run("rm -f -- " + quoted_staging, kQuietCeiling);
      road.failed(first ? "creating the staging file" : "appending a chunk", result);
    }
    offset += chunk.size();
    first = false;
  } while (offset < content.size());

  // Whole or nothing: the staging file must hold every byte before it replaces the target.
  const ExecResult counted = road.run("wc -c < " + quoted_staging, kQuietCeiling);
  std::string count = counted.stdout_text();
  while (!count.empty() && (count.back() == '\n' || count.back() == ' ')) count.pop_back();
  while (!count.empty() && count.front() == ' ') count.erase(count.begin());
  if (counted.exit_code != 0 || count != std::to_string(content.size())) {
    road.run("rm -f -- " + quoted_staging, kQuietCeiling);
    if (counted.exit_code != 0) road.failed("counting the staged bytes", counted);
    throw ShellTransferFailed("the shell write of '" + target + "' staged " + count +
                              " bytes instead of " + std::to_string(content.size()) +
                              "; nothing was moved into place");
  }
  const ExecResult moved =
      road.run("mv -f -- " + quoted_staging + " " + posix_quote(target), kQuietCeiling);
  if (moved.exit_code != 0) {
    road.run("rm -f -- " + quoted_staging, kQuietCeiling);
    road.failed("moving the staged file into place", moved);
  }
}

std::string read_file_over_exec(Sandbox& sandbox, std::string_view path,
                                std::string_view working_directory, Milliseconds timeout,
                                std::uint64_t max_bytes, const ShellRoadOptions&) {
  const std::string target = target_path(path, working_directory);
  if (target == "/") refuse(FileRefusal::is_directory, target, "the target is the root directory");

  Road road(sandbox, target, timeout, "read");
  const Probe probe = road.probe(true);
  bool missing = false;
  check_ancestors(probe, missing);
  if (missing) refuse(FileRefusal::not_found, target, "a parent directory does not exist");
  const PathFacts& leaf = probe.facts.back();
  if (leaf.link) refuse(FileRefusal::invalid_path, target, "the target is a link");
  if (!leaf.exists) refuse(FileRefusal::not_found, target, "the target does not exist");
  if (leaf.directory) refuse(FileRefusal::is_directory, target, "the target is a directory");
  if (!leaf.regular) refuse(FileRefusal::invalid_path, target, "the target is not a regular file");
  if (!leaf.readable) {
    refuse(FileRefusal::permission_denied, target, "the guest cannot read the target");
  }
  if (!probe.size) {
    throw ShellTransferFailed("the shell read of '" + target +
                              "' could not learn the file's size (is `wc` installed?)");
  }
  // Refused before a byte moves; a file that grows afterwards meets the ceiling below.
  if (*probe.size > max_bytes) {
    throw TransferCapExceeded("max_bytes", target, max_bytes, *probe.size);
  }

  const ExecResult result =
      road.run("base64 < " + posix_quote(target), base64_ceiling(max_bytes) + 4096,
               /*over_cap_on_overflow=*/true);
  if (result.exit_code != 0) road.failed("reading the file", result);
  std::string compact;
  compact.reserve(result.stdout_bytes.size());
  for (char c : result.stdout_bytes) {
    if (c != '\n' && c != '\r' && c != ' ') compact += c;
  }
  auto decoded = base64_decode(compact);
  if (!decoded) {
    throw ShellTransferFailed("the shell read of '" + target +
                              "' came back as something other than base64");
  }
  // Counted again on what arrived: the file can have grown within the ceiling's slack.
  if (decoded->size() > max_bytes) {
    throw TransferCapExceeded("max_bytes", target, max_bytes, decoded->size());
  }
  return std::move(*decoded);
}

std::optional<FileRefusal> file_refusal(const std::exception& error) {
  if (dynamic_cast<const NotFound*>(&error) != nullptr) return FileRefusal::not_found;
  if (dynamic_cast<const IsADirectory*>(&error) != nullptr) return FileRefusal::is_directory;
  if (dynamic_cast<const ConfinementError*>(&error) != nullptr) return FileRefusal::invalid_path;
  if (dynamic_cast<const NotADirectory*>(&error) != nullptr) return FileRefusal::invalid_path;
  if (const auto* refused = dynamic_cast<const FileRefused*>(&error)) return refused->refusal();
  if (const auto* system = dynamic_cast<const SystemError*>(&error)) {
    if (system->error_number() == EACCES || system->error_number() == EPERM) {
      return FileRefusal::permission_denied;
    }
  }
  return std::nullopt;
}

std::optional<FileRefusal> entry_refusal(const std::optional<SandboxEntry>& entry) {
  if (!entry) return FileRefusal::not_found;
  switch (entry->kind) {
    case EntryKind::file:
      return std::nullopt;
    case EntryKind::directory:
      return FileRefusal::is_directory;
    case EntryKind::symlink:
    case EntryKind::other:
      return FileRefusal::invalid_path;
  }
  return FileRefusal::invalid_path;
}

}  // namespace airlock
