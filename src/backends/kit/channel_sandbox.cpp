#include "backends/kit/channel_sandbox.hpp"

#include <climits>

#include "airlock/errors.hpp"
#include "airlock/paths.hpp"
#include "backends/kit/guest/file_protocol.hpp"

namespace airlock::backend_kit {
namespace {

using Clock = std::chrono::steady_clock;
using namespace guest_kit;

// File-plane operations are bounded by this, not by a caller's timeout: they are ours.
constexpr auto kFileOperationTimeout = std::chrono::seconds(120);
constexpr std::uint64_t kHelperMessageRoom = 64 << 10;

std::string first_line(const std::string& text) {
  const auto newline = text.find('\n');
  return newline == std::string::npos ? text : text.substr(0, newline);
}

// Maps a helper's refusal onto the protocol's errors. `guest_path` is absolute.
[[noreturn]] void raise_file_failure(const ExecResult& result, const std::string& operation,
                                     const std::string& guest_path) {
  const std::string reason = first_line(result.stderr_text());
  const std::string what = operation + " " + guest_path + ": " + reason;
  switch (result.exit_code) {
    case kFileLink:
      throw ConfinementError(what + " (links are never followed)", "symlinks");
    case kFileNotDirectory:
      throw NotADirectory(what, guest_path);
    case kFileNotFound:
      throw NotFound(what, guest_path);
    case kFileIsDirectory:
      throw IsADirectory(what, guest_path);
    case kFileNotRegular:
      throw SystemError(what, 40 /*ELOOP or not regular*/, guest_path);
    case kFileNeedsRecursive:
      throw SystemError(what, 21 /*EISDIR*/, guest_path);
    case kFileSystem: {
      int error_number = 0;
      if (reason.rfind("errno ", 0) == 0) error_number = std::atoi(reason.c_str() + 6);
      throw SystemError(what, error_number, guest_path);
    }
    default:
      throw BackendError("the sandbox's file helper failed",
                         what + " (exit " + std::to_string(result.exit_code) + ")");
  }
}

// confine_guest_path, plus the kernel's own limits: no guest could name a longer path or
// component either, so the file plane refuses them before any exec.
std::string confine(std::string_view path, std::string_view working_directory) {
  std::string absolute = confine_guest_path(path, working_directory);
  if (absolute.size() >= PATH_MAX) {
    throw SystemError("'" + std::string(path.substr(0, 48)) + "…' is longer than PATH_MAX (" +
                          std::to_string(absolute.size()) + " bytes)",
                      ENAMETOOLONG, std::string(path.substr(0, 256)));
  }
  std::size_t start = 1;
  while (start < absolute.size()) {
    const auto slash = absolute.find('/', start);
    const auto end = slash == std::string::npos ? absolute.size() : slash;
    if (end - start > NAME_MAX) {
      throw SystemError("a component of '" + std::string(path.substr(0, 48)) +
                            "…' is longer than NAME_MAX (" + std::to_string(end - start) +
                            " bytes)",
                        ENAMETOOLONG, std::string(path.substr(0, 256)));
    }
    start = end + 1;
  }
  return absolute;
}

std::string relative_to(const std::string& absolute, std::string_view working_directory) {
  const auto relative = guest_path_relative_to(absolute, working_directory);
  if (!relative || relative->empty()) return relative ? "." : absolute;
  return *relative;
}

EntryKind kind_from_word(const std::string& word) {
  if (word == "file") return EntryKind::file;
  if (word == "directory") return EntryKind::directory;
  if (word == "symlink") return EntryKind::symlink;
  return EntryKind::other;
}

}  // namespace

void CommandSlots::acquire(Clock::time_point deadline) {
  std::unique_lock lock(mutex_);
  if (!freed_.wait_until(lock, deadline, [this] { return free_ > 0; })) {
    throw QueuedTimeout(
        "the command waited for a free slot in the sandbox past its deadline; "
        "nothing ran — retry unchanged");
  }
  --free_;
}

void CommandSlots::release() {
  {
    std::lock_guard lock(mutex_);
    ++free_;
  }
  freed_.notify_one();
}

ChannelSandbox::ChannelSandbox(std::shared_ptr<CommandChannel> channel,
                               ChannelSandboxSettings settings, std::string instance_id,
                               SandboxKey key, std::string kind, std::string work_dir)
    : channel_(std::move(channel)),
      settings_(std::move(settings)),
      instance_id_(std::move(instance_id)),
      key_(std::move(key)),
      kind_(std::move(kind)),
      work_dir_(std::move(work_dir)),
      slots_(std::make_shared<CommandSlots>(settings_.max_concurrent_commands)) {}

ExecResult ChannelSandbox::run_guarded(GuestCommand command) {
  slots_->acquire(command.deadline);
  struct Release {
    CommandSlots& slots;
    ~Release() { slots.release(); }
  } release{*slots_};
  return run_in_guest(*channel_, command);
}

ExecResult ChannelSandbox::helper(std::vector<std::string> arguments, std::string stdin_bytes,
                                  bool feed, std::uint64_t max_output) {
  GuestCommand command;
  command.argv = {settings_.helper_path};
  command.argv.insert(command.argv.end(), arguments.begin(), arguments.end());
  command.direct = true;
  command.stdin_bytes = std::move(stdin_bytes);
  command.feed_stdin = feed;
  command.deadline = Clock::now() + kFileOperationTimeout;
  command.max_output_bytes = max_output;
  return run_guarded(std::move(command));
}

ExecResult ChannelSandbox::exec(const Command& command, const ExecOptions& options) {
  check_exec_options(options);
  if (options.terminal) {
    throw NotSupported("the " + settings_.backend +
                       " backend gives no terminal: " + settings_.no_terminal_reason);
  }
  const auto started = Clock::now();
  if (options.timeout.count() <= 0)
    throw InvalidArgument("exec: timeout must be positive", "timeout");
  GuestCommand guest;
  guest.argv = command.arguments();
  guest.working_directory = options.working_directory;
  guest.environment = settings_.base_environment;
  guest.environment.insert(guest.environment.end(), options.environment.begin(),
                           options.environment.end());
  guest.stdin_bytes = options.stdin_bytes;
  guest.feed_stdin = !options.stdin_bytes.empty();
  guest.deadline = started + options.timeout;
  guest.max_output_bytes = options.max_output_bytes.value_or(settings_.output_ceiling_bytes);
  guest.truncate = options.max_output_bytes && options.overflow == OutputOverflow::truncate;
  guest.stop = options.stop;
  guest.on_output = options.on_output;
  guest.stdin_fd = options.stdin_fd;
  guest.control = options.control;
  for (const auto& [name, value] : guest.environment) {
    if (name.empty() || name.find('=') != std::string::npos ||
        name.find('\0') != std::string::npos || value.find('\0') != std::string::npos) {
      throw InvalidArgument(
          "exec: environment variable names must be non-empty, without '=' "
          "or NUL",
          "environment");
    }
  }
  return run_guarded(std::move(guest));
}

ExecResult ChannelSandbox::run_code(std::string_view code, Milliseconds timeout) {
  const auto started = Clock::now();
  if (timeout.count() <= 0) throw InvalidArgument("run_code: timeout must be positive", "timeout");
  GuestCommand guest;
  guest.argv = {"python3", "-"};
  guest.working_directory = work_dir_;
  guest.environment = settings_.base_environment;
  guest.stdin_bytes = std::string(code);
  guest.feed_stdin = true;
  guest.deadline = started + timeout;
  guest.max_output_bytes = settings_.output_ceiling_bytes;
  return run_guarded(std::move(guest));
}

void ChannelSandbox::write_file(std::string_view path, std::string_view content,
                                std::string_view working_directory) {
  const std::string target = confine(path, working_directory);
  if (target == normalize_guest_path(working_directory)) {
    throw ConfinementError("write_file: the working directory itself is not a file",
                           "working_directory");
  }
  if (content.size() > settings_.max_bytes_per_file_in) {
    throw TransferCapExceeded("files_in.max_bytes_per_file", std::string(path),
                              settings_.max_bytes_per_file_in, content.size());
  }
  const ExecResult result = helper({"write", target, std::to_string(content.size())},
                                   std::string(content), true, 64 << 10);
  if (result.exit_code != kFileOk) raise_file_failure(result, "write_file", target);
}

std::optional<SandboxEntry> ChannelSandbox::stat_file(std::string_view path,
                                                      std::string_view working_directory) {
  const std::string target = confine(path, working_directory);
  const ExecResult result = helper({"stat", target}, {}, false, 64 << 10);
  if (result.exit_code != kFileOk) raise_file_failure(result, "stat_file", target);
  const std::string line = first_line(result.stdout_bytes);
  if (line == "absent") return std::nullopt;
  const auto space = line.find(' ');
  SandboxEntry entry;
  entry.path = relative_to(target, working_directory);
  entry.kind = kind_from_word(line.substr(0, space));
  if (entry.kind == EntryKind::file && space != std::string::npos) {
    entry.size_bytes = std::stoull(line.substr(space + 1));
  }
  return entry;
}

std::string ChannelSandbox::read_file(std::string_view path, std::string_view working_directory,
                                      std::uint64_t max_bytes) {
  const std::string target = confine(path, working_directory);
  // The ceiling leaves room for the helper's one-line refusal on stderr; the content itself is
  // checked against max_bytes below.
  ExecResult result;
  try {
    result = helper({"read", target, std::to_string(max_bytes)}, {}, false,
                    max_bytes + kHelperMessageRoom);
  } catch (const ExecOutputLimitExceeded&) {
    throw TransferCapExceeded("max_bytes", target, max_bytes);
  }
  if (result.exit_code == kFileTooLarge) {
    throw TransferCapExceeded("max_bytes", target, max_bytes);
  }
  if (result.exit_code != kFileOk) raise_file_failure(result, "read_file", target);
  if (result.stdout_bytes.size() > max_bytes) {
    throw TransferCapExceeded("max_bytes", target, max_bytes, result.stdout_bytes.size());
  }
  return result.stdout_bytes;
}

std::vector<SandboxEntry> ChannelSandbox::list_dir(std::string_view path,
                                                   std::string_view working_directory) {
  const std::string target = confine(path, working_directory);
  const ExecResult result = helper({"list", target}, {}, false, settings_.output_ceiling_bytes);
  if (result.exit_code != kFileOk) raise_file_failure(result, "list_dir", target);
  std::vector<SandboxEntry> entries;
  const std::string& text = result.stdout_bytes;
  std::size_t start = 0;
  while (start < text.size()) {
    const auto end = text.find('\0', start);
    const std::string record = text.substr(start, end == std::string::npos ? end : end - start);
    start = end == std::string::npos ? text.size() : end + 1;
    const auto first = record.find(' ');
    const auto second = first == std::string::npos ? first : record.find(' ', first + 1);
    if (second == std::string::npos) continue;
    SandboxEntry entry;
    entry.kind = kind_from_word(record.substr(0, first));
    const std::string size = record.substr(first + 1, second - first - 1);
    if (entry.kind == EntryKind::file && size != "-") entry.size_bytes = std::stoull(size);
    const std::string name = record.substr(second + 1);
    entry.path = relative_to(target == "/" ? "/" + name : target + "/" + name, working_directory);
    entries.push_back(std::move(entry));
  }
  return entries;
}

void ChannelSandbox::remove(std::string_view path, std::string_view working_directory,
                            bool recursive) {
  const std::string target = confine(path, working_directory);
  if (target == normalize_guest_path(working_directory)) {
    throw ConfinementError("remove: the working directory itself is refused", "working_directory");
  }
  const ExecResult result = helper({"remove", target, recursive ? "1" : "0"}, {}, false, 64 << 10);
  if (result.exit_code != kFileOk) raise_file_failure(result, "remove", target);
}

}  // namespace airlock::backend_kit
