// The emulator's interpreter (expansion, pipelines, redirections, deadlines, the output
// ceiling) and its filesystem, which is the in-process sandbox's own node map.
#include "emulator.hpp"

#include <poll.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <deque>
#include <mutex>
#include <system_error>

#include "airlock/errors.hpp"
#include "airlock/paths.hpp"

namespace airlock::testing {
namespace {

using emulation::Redirection;
using emulation::ScriptExit;
using emulation::Word;
using emulation::WordPart;

std::string join(const std::string& directory, std::string_view name) {
  return directory == "/" ? "/" + std::string(name) : directory + "/" + std::string(name);
}

std::string base_name(std::string_view path) {
  while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
  const auto slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

// A word's one field: the subset has no unquoted expansion, so nothing is ever split.
std::string expand(const Word& word, const InProcessSandbox::Emulator::Frame& frame) {
  std::string field;
  for (const auto& part : word.parts) {
    if (part.kind == WordPart::Kind::literal) {
      field += part.text;
    } else if (part.text == "$") {
      field += std::to_string(frame.process_id);
    } else {
      const std::size_t index = static_cast<std::size_t>(part.text[0] - '0');
      if (index < frame.positional.size()) field += frame.positional[index];
    }
  }
  return field;
}

}  // namespace

bool emulation::signal_ends_a_process(int number) {
  switch (number) {
    case SIGHUP:
    case SIGINT:
    case SIGQUIT:
    case SIGKILL:
    case SIGUSR1:
    case SIGUSR2:
    case SIGPIPE:
    case SIGALRM:
    case SIGTERM:
      return true;
    default:
      return false;
  }
}

// ---- running -----------------------------------------------------------------------------------

InProcessSandbox::Emulator::Emulator(InProcessSandbox& sandbox, const ExecOptions& options)
    : sandbox_(sandbox),
      options_(options),
      deadline_(std::chrono::steady_clock::now() + options.timeout) {}

std::string InProcessSandbox::Emulator::Io::take_input(Frame& frame) {
  if (input) return std::exchange(*input, std::string());
  if (frame.shared_stdin == nullptr) return {};
  return std::exchange(*frame.shared_stdin, std::string());
}

void InProcessSandbox::Emulator::emit(std::string& stream, std::string_view bytes) {
  if (options_.max_output_bytes) {
    const std::uint64_t limit = *options_.max_output_bytes;
    const std::uint64_t used = stdout_.size() + stderr_.size();
    if (used + bytes.size() > limit) {
      // Refuse: the command is "killed" here and nothing of its output is returned.
      if (options_.overflow == OutputOverflow::refuse) throw ExecOutputLimitExceeded(limit, true);
      stream.append(bytes.substr(0, static_cast<std::size_t>(limit - used)));
      truncated_ = true;
      return;
    }
  }
  stream.append(bytes);
}

void InProcessSandbox::Emulator::check_signals() {
  if (!options_.control) return;
  pollfd wake{options_.control->wake_fd(), POLLIN, 0};
  if (::poll(&wake, 1, 0) <= 0) return;
  for (const int number : options_.control->take().signals) {
    if (emulation::signal_ends_a_process(number)) throw emulation::KilledBySignal{number};
  }
}

void InProcessSandbox::Emulator::check_deadline() {
  check_signals();
  if (options_.stop.stop_requested()) throw Timeout("cancelled", true, stdout_, stderr_);
  if (std::chrono::steady_clock::now() >= deadline_) {
    throw Timeout(
        "the command did not finish within " + std::to_string(options_.timeout.count()) + " ms",
        true, stdout_, stderr_);
  }
}

void InProcessSandbox::Emulator::sleep_for(std::chrono::nanoseconds duration) {
  const auto wake = std::chrono::steady_clock::now() + duration;
  const auto until = std::min(wake, deadline_);
  std::mutex mutex;
  std::condition_variable_any wakeup;
  std::unique_lock lock(mutex);
  if (options_.control) {
    // Wake for the control's requests too: a signal must end a sleep as it would a process.
    const int wake_fd = options_.control->wake_fd();
    for (auto now = std::chrono::steady_clock::now();
         now < until && !options_.stop.stop_requested(); now = std::chrono::steady_clock::now()) {
      check_signals();
      const auto slice =
          std::min<std::chrono::steady_clock::duration>(until - now, std::chrono::milliseconds(10));
      pollfd pending{wake_fd, POLLIN, 0};
      const auto slice_ms = std::chrono::ceil<std::chrono::milliseconds>(slice).count();
      ::poll(&pending, 1, static_cast<int>(slice_ms));
    }
    check_signals();
  } else {
    wakeup.wait_until(lock, options_.stop, until, [] { return false; });
  }
  if (options_.stop.stop_requested() || wake >= deadline_) check_deadline();
}

void InProcessSandbox::Emulator::block_until_deadline() {
  sleep_for(std::chrono::hours(24 * 365));
  check_deadline();
  throw Timeout("the command blocked", true, stdout_, stderr_);
}

std::optional<ExecResult> InProcessSandbox::Emulator::run(const Command& command) {
  const std::vector<std::string>& arguments = command.arguments();
  if (arguments.empty()) return std::nullopt;
  std::optional<emulation::Script> script;
  if (arguments[0] == "sh") {
    if (arguments.size() < 3 || arguments[1] != "-c") return std::nullopt;
    script = emulation::parse_script(arguments[2]);
    if (!script || !emulation::script_is_emulated(*script)) return std::nullopt;
  } else if (!emulation::is_emulated_command(arguments[0])) {
    return std::nullopt;
  }

  const std::string cwd = normalize_guest_path(
      options_.working_directory.empty() ? std::string("/") : options_.working_directory);
  if (cwd.empty() || cwd.front() != '/') {
    throw InvalidArgument("exec: the working directory must be an absolute guest path",
                          "working_directory");
  }
  if (!facts(cwd, cwd, true).is_directory) {
    throw NotFound("exec: the working directory " + cwd + " does not exist in the sandbox", cwd);
  }

  std::string stdin_bytes = options_.stdin_bytes;
  static std::atomic<long> next_process_id{100};
  Frame frame;
  frame.cwd = cwd;
  frame.process_id = ++next_process_id;
  frame.shared_stdin = &stdin_bytes;
  frame.out = [this](std::string_view bytes) { emit(stdout_, bytes); };
  frame.err = [this](std::string_view bytes) { emit(stderr_, bytes); };
  int status = 0;
  std::optional<int> signalled;
  try {
    check_deadline();
    if (script) {
      // sh -c SCRIPT [ARG0 [ARG…]]: ARG0 is $0, the rest are $1….
      if (arguments.size() > 3) {
        frame.positional.assign(arguments.begin() + 3, arguments.end());
      } else {
        frame.positional.assign(1, "sh");
      }
      status = run_script(*script, frame);
    } else {
      Io io;
      frame.positional = {arguments[0]};
      status = run_command(arguments, io, frame);
      frame.out(io.out);
      frame.err(io.err);
    }
  } catch (const ScriptExit& exit) {
    status = exit.code;
  } catch (const emulation::KilledBySignal& killed) {
    status = 128 + killed.number;
    signalled = killed.number;
  }
  ExecResult result;
  result.term_signal = signalled;
  result.stdout_bytes = std::move(stdout_);
  result.stderr_bytes = std::move(stderr_);
  result.exit_code = status;
  result.truncated = truncated_;
  return result;
}

int InProcessSandbox::Emulator::run_script(const emulation::Script& script, Frame& frame) {
  int status = 0;
  for (const auto& list : script.lists) {
    for (std::size_t i = 0; i < list.pipelines.size(); ++i) {
      if (i > 0 && status != 0) break;  // `&&` skips the rest of the list after a failure
      const auto& pipeline = list.pipelines[i];
      std::optional<std::string> piped;
      for (std::size_t c = 0; c < pipeline.commands.size(); ++c) {
        check_deadline();
        const auto& command = pipeline.commands[c];
        const bool last = c + 1 == pipeline.commands.size();
        std::string pipe_out;

        // Where fds 1 and 2 go, after this command's redirections, applied in order.
        struct Destination {
          enum class Kind { frame_out, frame_err, pipe, file, discard } kind;
          std::string path;
        };
        Destination destinations[3] = {
            {Destination::Kind::discard, {}},
            {last ? Destination::Kind::frame_out : Destination::Kind::pipe, {}},
            {Destination::Kind::frame_err, {}}};
        Io io;
        io.input = std::move(piped);
        piped.reset();
        std::vector<std::string> arguments;
        for (const auto& word : command.words) arguments.push_back(expand(word, frame));
        bool redirected = true;
        for (const auto& redirection : command.redirections) {
          if (redirection.operation == Redirection::Operation::duplicate) {
            if (redirection.duplicate_of < 1 || redirection.duplicate_of > 2) {
              redirected = false;
              break;
            }
            destinations[redirection.fd] = destinations[redirection.duplicate_of];
            continue;
          }
          const std::string target = expand(redirection.target, frame);
          if (redirection.operation == Redirection::Operation::read) {
            std::string content;
            if (const int error = read_bytes(frame.cwd, target, content); error != 0) {
              frame.err("sh: cannot open " + target + ": " + errno_text(error) + "\n");
              redirected = false;
              break;
            }
            io.input = std::move(content);
            continue;
          }
          if (target == "/dev/null") {
            destinations[redirection.fd] = {Destination::Kind::discard, {}};
            continue;
          }
          std::string absolute;
          const bool truncate = redirection.operation == Redirection::Operation::write;
          if (const int error = open_for_write(frame.cwd, target, truncate, absolute); error != 0) {
            frame.err("sh: cannot create " + target + ": " + errno_text(error) + "\n");
            redirected = false;
            break;
          }
          destinations[redirection.fd] = {Destination::Kind::file, absolute};
        }
        status = redirected ? run_command(arguments, io, frame) : 1;
        auto route = [&](const Destination& destination, const std::string& bytes) {
          if (bytes.empty()) return;
          switch (destination.kind) {
            case Destination::Kind::frame_out:
              frame.out(bytes);
              break;
            case Destination::Kind::frame_err:
              frame.err(bytes);
              break;
            case Destination::Kind::pipe:
              pipe_out += bytes;
              break;
            case Destination::Kind::file:
              append_bytes(destination.path, bytes);
              break;
            case Destination::Kind::discard:
              break;
          }
        };
        route(destinations[1], io.out);
        route(destinations[2], io.err);
        if (!last) piped = std::move(pipe_out);
      }
    }
  }
  return status;
}

// ---- the filesystem
// ------------------------------------------------------------------------------

InProcessSandbox::Emulator::Lookup InProcessSandbox::Emulator::lookup(const std::string& cwd,
                                                                      std::string_view path,
                                                                      bool follow_final) const {
  Lookup result;
  if (path.empty()) {
    result.error = ENOENT;
    return result;
  }
  if (path.size() >= 4096) {
    result.error = ENAMETOOLONG;
    return result;
  }
  std::deque<std::string> pending;
  auto push_components = [&pending](std::string_view text, bool front) {
    std::vector<std::string> parts;
    std::size_t start = 0;
    while (start <= text.size()) {
      std::size_t end = text.find('/', start);
      if (end == std::string_view::npos) end = text.size();
      if (end > start) parts.emplace_back(text.substr(start, end - start));
      start = end + 1;
    }
    if (front) {
      pending.insert(pending.begin(), parts.begin(), parts.end());
    } else {
      pending.insert(pending.end(), parts.begin(), parts.end());
    }
  };
  std::string current = path.front() == '/' ? std::string("/") : normalize_guest_path(cwd);
  push_components(path, false);
  int links = 0;
  while (!pending.empty()) {
    const std::string component = pending.front();
    pending.pop_front();
    if (component == ".") continue;
    if (component == "..") {
      current = parent_of(current);
      continue;
    }
    if (component.size() > 255) {
      result.error = ENAMETOOLONG;
      return result;
    }
    const auto directory = sandbox_.lstat_kind(current);
    if (!directory || *directory != EntryKind::directory) {
      result.error = directory ? ENOTDIR : ENOENT;
      return result;
    }
    if ((mode_of(current) & 0100) == 0) {
      result.error = EACCES;
      return result;
    }
    const std::string candidate = join(current, component);
    const auto kind = sandbox_.lstat_kind(candidate);
    const bool last = pending.empty();
    if (kind == EntryKind::symlink && (!last || follow_final)) {
      if (++links > 40) {
        result.error = ELOOP;
        return result;
      }
      const std::string& target = sandbox_.nodes_.at(candidate).target;
      if (target.empty()) {
        result.error = ENOENT;
        return result;
      }
      if (target.front() == '/') current = "/";
      push_components(target, true);
      continue;
    }
    if (!kind) {
      if (!last) {
        result.error = ENOENT;
        return result;
      }
      result.path = candidate;
      return result;
    }
    current = candidate;
  }
  result.path = current;
  result.kind = sandbox_.lstat_kind(current);
  return result;
}

unsigned InProcessSandbox::Emulator::mode_of(const std::string& absolute) const {
  if (absolute == "/") return 0755;
  const auto found = sandbox_.nodes_.find(absolute);
  return found == sandbox_.nodes_.end() ? 0 : found->second.mode;
}

bool InProcessSandbox::Emulator::writable_directory(const std::string& absolute) const {
  return (mode_of(absolute) & 0300) == 0300;
}

void InProcessSandbox::Emulator::erase_tree(const std::string& absolute) {
  const bool directory = sandbox_.lstat_kind(absolute) == EntryKind::directory;
  for (auto it = sandbox_.nodes_.begin(); it != sandbox_.nodes_.end();) {
    if (it->first == absolute || (directory && is_under(it->first, absolute))) {
      it = sandbox_.nodes_.erase(it);
    } else {
      ++it;
    }
  }
}

InProcessSandbox::Emulator::Facts InProcessSandbox::Emulator::facts(const std::string& cwd,
                                                                    const std::string& path,
                                                                    bool follow) {
  Facts facts;
  if (path == "/dev/null" || path == "/dev/zero") {
    facts.exists = facts.readable = facts.writable = true;
    return facts;
  }
  std::lock_guard lock(sandbox_.mutex_);
  const Lookup found = lookup(cwd, path, follow);
  if (found.error != 0 || !found.kind) return facts;
  static const Node kRoot{};
  const Node& node = found.path == "/" ? kRoot : sandbox_.nodes_.at(found.path);
  const unsigned mode = mode_of(found.path);
  facts.exists = true;
  facts.is_link = *found.kind == EntryKind::symlink;
  facts.is_directory = *found.kind == EntryKind::directory;
  facts.is_file = *found.kind == EntryKind::file || node.hard_link;
  facts.readable = (mode & 0400) != 0;
  facts.writable = (mode & 0200) != 0;
  facts.executable = (mode & 0100) != 0;
  if (*found.kind == EntryKind::file) facts.size = node.content.size();
  if (node.hard_link) {
    const auto target = sandbox_.nodes_.find(node.target);
    if (target != sandbox_.nodes_.end()) facts.size = target->second.content.size();
  }
  return facts;
}

int InProcessSandbox::Emulator::read_bytes(const std::string& cwd, const std::string& path,
                                           std::string& out) {
  if (path == "/dev/null") {
    out.clear();
    return 0;
  }
  bool fifo = false;
  {
    std::lock_guard lock(sandbox_.mutex_);
    const Lookup found = lookup(cwd, path, true);
    if (found.error != 0) return found.error;
    if (!found.kind) return ENOENT;
    if (*found.kind == EntryKind::directory) return EISDIR;
    if ((mode_of(found.path) & 0400) == 0) return EACCES;
    const Node& node = sandbox_.nodes_.at(found.path);
    if (*found.kind == EntryKind::file) {
      out = node.content;
      return 0;
    }
    if (node.hard_link) {
      const auto target = sandbox_.nodes_.find(node.target);
      if (target == sandbox_.nodes_.end() || target->second.kind != EntryKind::file) return ENOENT;
      out = target->second.content;
      return 0;
    }
    fifo = true;
  }
  if (fifo) block_until_deadline();  // a FIFO with no writer: the read never returns
  return 0;
}

int InProcessSandbox::Emulator::open_for_write(const std::string& cwd, const std::string& path,
                                               bool truncate, std::string& absolute) {
  bool fifo = false;
  {
    std::lock_guard lock(sandbox_.mutex_);
    const Lookup found = lookup(cwd, path, true);
    if (found.error != 0) return found.error;
    if (!found.kind) {
      if (!writable_directory(parent_of(found.path))) return EACCES;
      sandbox_.nodes_[found.path] = Node{EntryKind::file, {}, {}, 0644, false};
      absolute = found.path;
      return 0;
    }
    if (*found.kind == EntryKind::directory) return EISDIR;
    Node& node = sandbox_.nodes_.at(found.path);
    if ((node.mode & 0200) == 0) return EACCES;
    if (node.hard_link) {
      absolute = node.target;
      auto target = sandbox_.nodes_.find(node.target);
      if (target != sandbox_.nodes_.end() && truncate) target->second.content.clear();
      return 0;
    }
    if (*found.kind == EntryKind::other) {
      fifo = true;
    } else {
      if (truncate) node.content.clear();
      absolute = found.path;
      return 0;
    }
  }
  if (fifo) block_until_deadline();  // a FIFO with no reader: the open never returns
  return 0;
}

void InProcessSandbox::Emulator::append_bytes(const std::string& absolute, std::string_view bytes) {
  std::lock_guard lock(sandbox_.mutex_);
  auto found = sandbox_.nodes_.find(absolute);
  if (found == sandbox_.nodes_.end()) {
    // Removed while the command ran: the bytes went to an unlinked file, as on a real kernel.
    return;
  }
  if (found->second.kind == EntryKind::file) found->second.content.append(bytes);
}

int InProcessSandbox::Emulator::make_directory(const std::string& cwd, const std::string& path,
                                               bool parents) {
  std::lock_guard lock(sandbox_.mutex_);
  auto create = [&](const std::string& prefix, bool final) -> int {
    const Lookup found = lookup(cwd, prefix, true);
    if (found.error != 0) return found.error;
    if (found.kind) {
      if (*found.kind == EntryKind::directory) return (final && !parents) ? EEXIST : 0;
      return final ? EEXIST : ENOTDIR;
    }
    if (!writable_directory(parent_of(found.path))) return EACCES;
    sandbox_.nodes_[found.path] = Node{EntryKind::directory, {}, {}, 0755, false};
    return 0;
  };
  if (!parents) return create(path, true);
  std::string prefix = path.front() == '/' ? "/" : "";
  std::size_t start = 0;
  std::vector<std::string> parts;
  while (start <= path.size()) {
    std::size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    if (end > start) parts.push_back(path.substr(start, end - start));
    start = end + 1;
  }
  for (std::size_t i = 0; i < parts.size(); ++i) {
    prefix += (prefix.empty() || prefix == "/" ? "" : "/") + parts[i];
    if (const int error = create(prefix, i + 1 == parts.size()); error != 0) return error;
  }
  return 0;
}

int InProcessSandbox::Emulator::remove_path(const std::string& cwd, const std::string& path,
                                            bool recursive, bool force) {
  const std::string leaf = base_name(path);
  if (leaf == "." || leaf == "..") return EINVAL;
  std::lock_guard lock(sandbox_.mutex_);
  const Lookup found = lookup(cwd, path, false);
  if (found.error != 0) return (force && found.error == ENOENT) ? 0 : found.error;
  if (!found.kind) return force ? 0 : ENOENT;
  if (found.path == "/") return EPERM;
  if (*found.kind == EntryKind::directory && !recursive) return EISDIR;
  if (!writable_directory(parent_of(found.path))) return EACCES;
  erase_tree(found.path);  // a link is a leaf: removing it never reaches its target
  return 0;
}

int InProcessSandbox::Emulator::rename_path(const std::string& cwd, const std::string& from,
                                            const std::string& to) {
  std::lock_guard lock(sandbox_.mutex_);
  const Lookup source = lookup(cwd, from, false);
  if (source.error != 0) return source.error;
  if (!source.kind) return ENOENT;
  if (source.path == "/") return EBUSY;
  // A directory as DEST is refused by `mv` before it gets here (moving into one is not
  // emulated); a link as DEST is replaced, never followed.
  const Lookup destination = lookup(cwd, to, false);
  if (destination.error != 0) return destination.error;
  if (destination.kind == EntryKind::directory) return EISDIR;
  if (destination.path == source.path) return 0;
  if (is_under(destination.path, source.path)) return EINVAL;
  if (!writable_directory(parent_of(source.path)) ||
      !writable_directory(parent_of(destination.path))) {
    return EACCES;
  }
  const bool source_is_directory = *source.kind == EntryKind::directory;
  if (destination.kind) {
    if (source_is_directory) return ENOTDIR;
    erase_tree(destination.path);
  }
  std::vector<std::pair<std::string, Node>> moved;
  for (auto it = sandbox_.nodes_.begin(); it != sandbox_.nodes_.end();) {
    if (it->first == source.path || (source_is_directory && is_under(it->first, source.path))) {
      moved.emplace_back(destination.path + it->first.substr(source.path.size()),
                         std::move(it->second));
      it = sandbox_.nodes_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& [path, node] : moved) sandbox_.nodes_[path] = std::move(node);
  return 0;
}

int InProcessSandbox::Emulator::make_link(const std::string& cwd, const std::string& target,
                                          const std::string& link, bool symbolic, bool force,
                                          bool no_dereference) {
  std::lock_guard lock(sandbox_.mutex_);
  Lookup at = lookup(cwd, link, !no_dereference);
  if (at.error != 0) return at.error;
  if (at.kind == EntryKind::directory) {
    // `ln TARGET DIR` makes DIR/basename(TARGET); with -n a link to a directory is replaced.
    at = lookup(at.path, base_name(target), false);
    if (at.error != 0) return at.error;
  } else {
    at = lookup(cwd, link, false);
    if (at.error != 0) return at.error;
  }
  Node node;
  if (symbolic) {
    node = Node{EntryKind::symlink, {}, target, 0777, false};
  } else {
    const Lookup source = lookup(cwd, target, true);
    if (source.error != 0) return source.error;
    if (!source.kind) return ENOENT;
    if (*source.kind == EntryKind::directory) return EPERM;
    const Node& original = sandbox_.nodes_.at(source.path);
    const std::string shared = original.hard_link ? original.target : source.path;
    node = Node{EntryKind::other, {}, shared, original.mode, true};
  }
  if (at.kind) {
    if (!force) return EEXIST;
    if (*at.kind == EntryKind::directory) return EISDIR;
  }
  if (!writable_directory(parent_of(at.path))) return EACCES;
  if (at.kind) erase_tree(at.path);
  sandbox_.nodes_[at.path] = std::move(node);
  return 0;
}

int InProcessSandbox::Emulator::make_fifo(const std::string& cwd, const std::string& path) {
  std::lock_guard lock(sandbox_.mutex_);
  const Lookup at = lookup(cwd, path, false);
  if (at.error != 0) return at.error;
  if (at.kind) return EEXIST;
  if (!writable_directory(parent_of(at.path))) return EACCES;
  sandbox_.nodes_[at.path] = Node{EntryKind::other, {}, {}, 0644, false};
  return 0;
}

int InProcessSandbox::Emulator::change_mode(const std::string& cwd, const std::string& path,
                                            unsigned mode) {
  std::lock_guard lock(sandbox_.mutex_);
  const Lookup at = lookup(cwd, path, true);
  if (at.error != 0) return at.error;
  if (!at.kind) return ENOENT;
  if (at.path == "/") return EPERM;
  sandbox_.nodes_.at(at.path).mode = mode & 07777;
  return 0;
}

int InProcessSandbox::Emulator::list_names(const std::string& cwd, const std::string& path,
                                           bool all, std::vector<std::string>& names,
                                           bool& is_directory) {
  std::lock_guard lock(sandbox_.mutex_);
  const Lookup at = lookup(cwd, path, true);
  if (at.error != 0) return at.error;
  if (!at.kind) return ENOENT;
  is_directory = *at.kind == EntryKind::directory;
  if (!is_directory) return 0;
  if ((mode_of(at.path) & 0400) == 0) return EACCES;
  for (const auto& [child, node] : sandbox_.nodes_) {
    if (!is_under(child, at.path) || parent_of(child) != at.path) continue;
    const std::string name = base_name(child);
    if (all || name.front() != '.') names.push_back(name);
  }
  return 0;
}

}  // namespace airlock::testing
