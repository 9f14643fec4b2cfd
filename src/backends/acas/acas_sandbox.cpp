#include "backends/acas/acas_sandbox.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>

#include "airlock/encoding.hpp"
#include "airlock/errors.hpp"
#include "airlock/paths.hpp"
#include "backends/kit/guest_paths.hpp"
#include "backends/kit/stdin_to_eof.hpp"

namespace airlock::acas {
namespace {

using backend_kit::entry_path;
using backend_kit::leaf_of;
using backend_kit::parent_of;
using backend_kit::refuse_overlong;

constexpr std::uint64_t kMaxBytesPerFile = 32ull << 20;  // the declared transfer ceiling
// Live stdin is staged as a file before the command runs: no more than a file may hold.
constexpr std::size_t kMaxStagedStdinBytes = kMaxBytesPerFile;

// Exit codes of the guest file scripts.
constexpr int kParentNotCreated = 80;
constexpr int kParentNotEntered = 81;
constexpr int kNotWritten = 82;
constexpr int kNotRenamed = 83;
constexpr int kThroughLink = 86;
constexpr int kIsDirectory = 21;

EntryKind kind_of(const FileInfo& info) {
  if (info.is_symlink) return EntryKind::symlink;
  if (info.is_directory) return EntryKind::directory;
  return EntryKind::file;  // a FIFO, socket or device too: the service does not say
}

// Enters `parent` physically and proves no link led there: a parent swapped for a link since
// the walk shows up as another physical path. From then on the shell's working directory pins
// the real directory.
std::string enter(const std::string& parent, bool create) {
  std::string script = "p=" + posix_quote(parent) + "\n";
  if (create) {
    script += "mkdir -p -- \"$p\" 2>/dev/null || exit " + std::to_string(kParentNotCreated) + "\n";
  }
  script += "cd -P -- \"$p\" 2>/dev/null || exit " + std::to_string(kParentNotEntered) + "\n";
  script += "[ \"$(pwd -P)\" = \"$p\" ] || exit " + std::to_string(kThroughLink) + "\n";
  return script;
}

std::string first_line(std::string_view text) {
  text = text.substr(0, std::min<std::size_t>(text.find('\n'), 200));
  return std::string(text);
}

}  // namespace

AcasSandbox::AcasSandbox(std::shared_ptr<Service> service, SandboxIdentity identity,
                         std::function<void(const AcasSandbox&, const std::string&)> invalidate,
                         std::function<void(const Call&)> revive)
    : service_(std::move(service)),
      identity_(std::move(identity)),
      invalidate_(std::move(invalidate)),
      revive_(std::move(revive)) {
  CredentialRequest request;
  request.purpose = CredentialPurpose::acquire;
  request.scope = identity_.key.scope;
  request.thread_id = identity_.key.thread_id;
  credential_ = service_->credential_for(request);
}

void AcasSandbox::refuse_when_gone() const {
  if (invalid_.load()) {
    throw SandboxInvalidated(
        "this sandbox was disposed because an earlier command's end was unknown; its files are "
        "gone; acquire a new one");
  }
}

Call AcasSandbox::call(Clock::time_point deadline, std::stop_token stop) const {
  return Call{credential_, deadline, std::move(stop)};
}

void AcasSandbox::invalidate(const std::string& why) {
  invalid_.store(true);
  if (invalidated_once_.exchange(true)) return;
  spdlog::warn("acas: sandbox {} invalidated: {}", identity_.id, why);
  if (invalidate_) invalidate_(*this, why);
}

capture::TextReply AcasSandbox::guest(const std::string& script, Clock::time_point deadline,
                                      std::string_view working_directory) const {
  const Call during = call(deadline);
  return revived(during, [&] { return service_->shell(during, identity_.id, script, working_directory); });
}

template <typename Operation>
auto AcasSandbox::revived(const Call& during, Operation&& operation) const -> decltype(operation()) {
  try {
    return operation();
  } catch (const BackendError& refused) {
    if (!revive_ || !refused.response() || refused.response()->status != 409) throw;
  }
  revive_(during);
  return operation();
}

capture::TextReply AcasSandbox::shell(const Call& during, const std::string& script) const {
  return revived(during, [&] { return service_->shell(during, identity_.id, script); });
}

std::optional<FileInfo> AcasSandbox::stat(const Call& during, const std::string& absolute) const {
  return revived(during, [&] { return service_->stat(during, identity_.id, absolute); });
}

std::vector<FileInfo> AcasSandbox::list(const Call& during, const std::string& absolute) const {
  return revived(during, [&] { return service_->list(during, identity_.id, absolute); });
}

http::Response AcasSandbox::read(const Call& during, const std::string& absolute,
                                 std::uint64_t max_bytes) const {
  return revived(during, [&] {
    const std::string route = service_->plane->sandbox_path(identity_.id) + "/files";
    http::Response response = service_->plane->request(during, "GET", route, {{"path", absolute}},
                                                       std::nullopt, max_bytes, false);
    if (response.status == 409) DataPlane::fail("read a file in the sandbox", "GET", route, response);
    return response;
  });
}

GuestStat AcasSandbox::file_stat(const Call& call) const {
  return [this, call](const std::string& absolute) -> std::optional<EntryKind> {
    const auto info = stat(call, absolute);
    if (!info) return std::nullopt;
    return kind_of(*info);
  };
}

std::vector<std::optional<EntryKind>> AcasSandbox::guest_kinds(
    const Call& during, const std::vector<std::string>& absolute) const {
  std::vector<std::optional<EntryKind>> kinds;
  // Batches keep each script well inside one shell argument.
  constexpr std::size_t kBatchBytes = 48u << 10;
  std::size_t next = 0;
  while (next < absolute.size()) {
    std::string names;
    std::size_t end = next;
    while (end < absolute.size() && (end == next || names.size() + absolute[end].size() < kBatchBytes)) {
      names += " " + posix_quote(absolute[end]);
      ++end;
    }
    const std::string script =
        "for p in" + names +
        "; do\n"
        "if [ -L \"$p\" ]; then echo l\n"
        "elif [ -d \"$p\" ]; then echo d\n"
        "elif [ -f \"$p\" ]; then set -- $(ls -ldn -- \"$p\" 2>/dev/null)\n"
        "  if [ \"${2:-}\" = 1 ]; then echo f; else echo h; fi\n"
        "elif [ -e \"$p\" ]; then echo o\n"
        "else echo m; fi\n"
        "done\n";
    const auto reply = shell(during, script);
    const std::size_t count = end - next;
    const bool shaped = reply.exit_code == 0 && reply.stdout_text.size() == 2 * count;
    for (std::size_t i = 0; shaped && i < count; ++i) {
      const char kind = reply.stdout_text[2 * i];
      if (reply.stdout_text[2 * i + 1] != '\n') break;
      switch (kind) {
        case 'l': kinds.emplace_back(EntryKind::symlink); break;
        case 'd': kinds.emplace_back(EntryKind::directory); break;
        case 'f': kinds.emplace_back(EntryKind::file); break;
        case 'h':
        case 'o': kinds.emplace_back(EntryKind::other); break;
        case 'm': kinds.emplace_back(std::nullopt); break;
        default: break;
      }
    }
    if (kinds.size() != end) {
      throw BackendError("the guest did not say what kind of entries it holds",
                         "exit " + std::to_string(reply.exit_code) + ": " +
                             first_line(reply.stderr_text));
    }
    next = end;
  }
  return kinds;
}

// ---- commands -------------------------------------------------------------------------------

ExecResult AcasSandbox::exec(const Command& command, const ExecOptions& options) {
  check_exec_options(options);
  if (options.terminal) {
    throw NotSupported(
        "the acas backend gives no terminal: a command's output is captured to files and read "
        "back when it ends");
  }
  if (options.control) {
    throw NotSupported(
        "the acas backend cannot signal a running command: the service runs one request at a "
        "time and offers no way to reach a command in flight");
  }
  if (options.stdin_fd >= 0 || options.on_output) {
    // The capture protocol stages stdin whole and reads the output back at the end: live stdin
    // is read to its end of file first, and the output is handed over in one piece per stream.
    ExecOptions collected = options;
    collected.on_output = nullptr;
    if (options.stdin_fd >= 0) {
      collected.stdin_bytes = backend_kit::read_stdin_to_eof(
          options.stdin_fd, Clock::now() + options.timeout, options.stop, kMaxStagedStdinBytes);
      collected.stdin_fd = -1;
    }
    ExecResult result = exec(command, collected);
    deliver_collected_output(result, options);
    return result;
  }
  refuse_when_gone();
  const Clock::time_point deadline = Clock::now() + options.timeout;
  const Call during = call(deadline, options.stop);
  const AcasConfig& config = service_->config;
  for (const auto& [name, value] : options.environment) {
    if (!capture::exportable_name(name)) {
      throw InvalidArgument("environment variable name '" + name +
                                "' cannot be exported to the guest's shell",
                            "environment");
    }
  }

  capture::RunPlan plan;
  plan.token = capture::fresh_token();
  plan.scratch = "/tmp/airlock-exec-" + plan.token;
  plan.command = command.is_shell() ? command.line() : posix_join(command.arguments());
  plan.environment = options.environment;
  plan.limit = options.max_output_bytes.value_or(config.max_exec_output_bytes);
  plan.close_on_overflow = options.overflow == OutputOverflow::refuse;
  plan.working_directory =
      options.working_directory.empty() ? identity_.work_dir : options.working_directory;

  // Everything that can fail between here and a complete capture leaves the command's end
  // unknown, save one case: a deadline inside the wait a 429 asked for, before the request ran.
  auto unknown_end = [&](const std::string& why) { invalidate(why); };
  auto timed_out = [&](bool cancelled) -> Timeout {
    return Timeout(cancelled ? "cancelled"
                             : "the command did not finish within its timeout; the sandbox was "
                               "invalidated and is being disposed",
                   false);
  };

  try {
    if (!options.stdin_bytes.empty()) {
      plan.stdin_path = plan.scratch + ".in";
      std::size_t offset = 0;
      const std::size_t chunk = config.write_chunk_bytes;
      bool first = true;
      while (first || offset < options.stdin_bytes.size()) {
        const std::string_view piece =
            std::string_view(options.stdin_bytes).substr(offset, chunk);
        const std::string line = std::string(first ? "umask 077; " : "") + "printf '%s' " +
                                 posix_quote(base64_encode(piece)) + " | base64 -d " +
                                 (first ? ">" : ">>") + posix_quote(*plan.stdin_path);
        const auto reply = shell(during, line);
        if (reply.exit_code != 0) {
          throw BackendError("the sandbox could not stage the command's stdin",
                             first_line(reply.stderr_text));
        }
        offset += piece.size();
        first = false;
      }
    }

    const capture::TextReply reply = shell(during, capture::run_script(plan));
    if (reply.exit_code == capture::kNoWorkingDirectory && reply.stdout_text.empty() &&
        reply.stderr_text.empty()) {
      throw NotFound("the working directory " + plan.working_directory +
                         " does not exist in the sandbox (or cannot be entered)",
                     plan.working_directory);
    }
    const auto [manifest, incomplete] = capture::parse_manifest(reply, plan.token, plan.limit);
    if (!manifest) {
      unknown_end("incomplete capture: " + incomplete.why);
      throw BackendError("the command's output could not be captured (" + incomplete.why +
                         "); the sandbox was invalidated and is being disposed");
    }

    const bool overflow = manifest->stdout_size + manifest->stderr_size > plan.limit;
    auto cleanup = [&] {
      try {
        const auto removed = shell(during, capture::cleanup_script(plan.scratch) +
                                                 (plan.stdin_path ? "rm -f -- " + posix_quote(*plan.stdin_path) + "\n" : ""));
        if (removed.exit_code != 0) {
          spdlog::warn("acas: sandbox {}: the capture's scratch could not be removed (it stays "
                       "until disposal)", identity_.id);
        }
      } catch (const std::exception& failure) {
        spdlog::warn("acas: sandbox {}: removing the capture's scratch failed: {}", identity_.id,
                     failure.what());
      }
    };
    if (overflow && plan.close_on_overflow) {
      // The manifest proves the command's own process ended (a stream past the ceiling lost its
      // reader, and the next write failed); what it left running in the background, nothing here
      // can see — so the kill is not claimed confirmed.
      cleanup();
      throw ExecOutputLimitExceeded(plan.limit, std::nullopt);
    }

    // What is kept: stdout first, then stderr, to the ceiling.
    const std::uint64_t keep_out = std::min(manifest->stdout_size, plan.limit);
    const std::uint64_t keep_err = std::min(manifest->stderr_size, plan.limit - keep_out);
    // Reads the first `keep` bytes of a scratch file of `size` bytes, whole chunks at a time (a
    // chunk holds what the file has there, whatever is kept of it).
    auto fetch = [&](const char* name, std::uint64_t size, std::uint64_t keep) {
      std::string bytes;
      const std::uint32_t chunk = config.capture_chunk_bytes;
      for (std::uint64_t index = 0; index * chunk < keep; ++index) {
        const std::uint64_t expected = std::min<std::uint64_t>(chunk, size - index * chunk);
        const auto answer =
            shell(during, capture::chunk_script(plan.token, plan.scratch, name, index, chunk));
        auto [piece, why] = capture::parse_chunk(answer, plan.token, expected, chunk);
        if (!piece) {
          unknown_end("incomplete capture: " + why.why);
          throw BackendError("the command's output could not be captured (" + why.why +
                             "); the sandbox was invalidated and is being disposed");
        }
        bytes += *piece;
      }
      bytes.resize(keep);
      return bytes;
    };
    ExecResult result;
    result.stdout_bytes = fetch("o", manifest->stdout_size, keep_out);
    result.stderr_bytes = fetch("e", manifest->stderr_size, keep_err);
    result.exit_code = manifest->exit_code;
    result.truncated = overflow;
    cleanup();
    return result;
  } catch (const RetryWaitExpired& expired) {
    if (expired.status() == 429) {
      // The service refused the request before running it: nothing of the command is in flight.
      throw Timeout(
          "the command did not start within its timeout: the sandbox service asked airlock to "
          "wait (HTTP 429) past it",
          true);
    }
    unknown_end("the deadline fell during a retry wait after HTTP " +
                std::to_string(expired.status()));
    throw timed_out(false);
  } catch (const http::Cancelled&) {
    unknown_end("the command was cancelled");
    throw timed_out(true);
  } catch (const http::DeadlineExceeded&) {
    unknown_end("the command's timeout expired");
    throw timed_out(false);
  } catch (const http::TransportError& failure) {
    unknown_end(std::string("the service stopped answering: ") + failure.what());
    throw BackendError("the sandbox service stopped answering during a command; the sandbox was "
                       "invalidated and is being disposed",
                       failure.what());
  } catch (const NotFound&) {
    throw;
  } catch (const ExecOutputLimitExceeded&) {
    throw;
  } catch (const InvalidArgument&) {
    throw;
  } catch (const std::exception& failure) {
    unknown_end(std::string("a command failed: ") + failure.what());
    throw;
  }
}

ExecResult AcasSandbox::run_code(std::string_view, Milliseconds) {
  throw NotSupported(
      "run_code is not declared by the acas backend (the image supplies its own interpreter; run "
      "it with exec)");
}

// ---- files in -------------------------------------------------------------------------------

void AcasSandbox::stage_as_guest(const Call& during, const std::string& absolute,
                                 std::string_view content, bool parent_missing,
                                 std::string_view shown) {
  const std::string parent = parent_of(absolute);
  const std::string name = leaf_of(absolute);
  const std::string scratch = ".airlock-write-" + capture::fresh_token();
  const std::uint32_t chunk = service_->config.write_chunk_bytes;
  auto run = [&](const std::string& script) { return shell(during, script); };
  auto refuse = [&](const capture::TextReply& reply) {
    (void)run(enter(parent, false) + "rm -f -- " + posix_quote(scratch) + "\n");
    switch (reply.exit_code) {
      case kThroughLink:
        throw ConfinementError("'" + std::string(shown) + "' passes through a link");
      case kIsDirectory:
        throw IsADirectory("'" + std::string(shown) + "' is a directory", absolute);
      case kParentNotCreated:
        throw SystemError("the guest could not create the directories of '" + std::string(shown) +
                              "' (its own permissions apply to writes)",
                          EACCES, absolute);
      default:
        throw SystemError("the guest could not write '" + std::string(shown) +
                              "' (its own permissions apply to writes): " +
                              first_line(reply.stderr_text),
                          EACCES, absolute);
    }
  };
  try {
    std::size_t offset = 0;
    bool first = true;
    while (first || offset < content.size()) {
      const std::string_view piece = content.substr(offset, chunk);
      std::string script = enter(parent, first && parent_missing);
      script += "printf '%s' " + posix_quote(base64_encode(piece)) + " | base64 -d " +
                (first ? ">" : ">>") + posix_quote(scratch) + " || exit " +
                std::to_string(kNotWritten) + "\n";
      const auto reply = run(script);
      if (reply.exit_code != 0) refuse(reply);
      offset += piece.size();
      first = false;
    }
    std::string script = enter(parent, false);
    script += "[ -d " + posix_quote(name) + " ] && [ ! -L " + posix_quote(name) + " ] && exit " +
              std::to_string(kIsDirectory) + "\n";
    script += "mv -f -- " + posix_quote(scratch) + " " + posix_quote(name) + " || exit " +
              std::to_string(kNotRenamed) + "\n";
    const auto reply = run(script);
    if (reply.exit_code != 0) refuse(reply);
  } catch (const http::DeadlineExceeded&) {
    throw SystemError("writing '" + std::string(shown) +
                          "' did not finish within the backend's read_timeout_seconds",
                      ETIMEDOUT, absolute);
  }
}

void AcasSandbox::write_file(std::string_view path, std::string_view content,
                             std::string_view working_directory) {
  refuse_when_gone();
  if (content.size() > kMaxBytesPerFile) {
    throw TransferCapExceeded("files_in.max_bytes_per_file", std::string(path), kMaxBytesPerFile,
                              content.size());
  }
  refuse_overlong(path, confine_guest_path(path, working_directory));
  const Call during = call(Clock::now() + service_->config.read_timeout);
  const std::string absolute = confine_guest_write_path(file_stat(during), path, working_directory);
  const auto leaf = stat(during, absolute);
  if (leaf && leaf->is_directory && !leaf->is_symlink) {
    throw IsADirectory("'" + std::string(path) + "' is a directory", absolute);
  }
  const bool parent_missing = !stat(during, parent_of(absolute));
  stage_as_guest(during, absolute, content, parent_missing, path);
}

// ---- files out ------------------------------------------------------------------------------

std::optional<SandboxEntry> AcasSandbox::stat_file(std::string_view path,
                                                   std::string_view working_directory) {
  refuse_when_gone();
  const Call during = call(Clock::now() + service_->config.read_timeout);
  const std::string absolute = confine_guest_path(path, working_directory);
  refuse_overlong(path, absolute);
  refuse_symlinked_parents(file_stat(during), absolute, working_directory);
  const auto info = stat(during, absolute);
  if (!info) return std::nullopt;
  SandboxEntry entry;
  entry.path = entry_path(absolute, working_directory);
  entry.kind = kind_of(*info);
  if (entry.kind == EntryKind::file) {
    const auto guest = guest_kinds(during, {absolute}).front();
    if (!guest) return std::nullopt;
    entry.kind = *guest;
  }
  if (entry.kind == EntryKind::file) entry.size_bytes = info->size;
  return entry;
}

std::string AcasSandbox::read_file(std::string_view path, std::string_view working_directory,
                                   std::uint64_t max_bytes) {
  refuse_when_gone();
  const Call during = call(Clock::now() + service_->config.read_timeout);
  const std::string absolute = confine_guest_path(path, working_directory);
  refuse_overlong(path, absolute);
  refuse_symlinked_parents(file_stat(during), absolute, working_directory);
  const auto info = stat(during, absolute);
  if (!info) throw NotFound("'" + std::string(path) + "' does not exist", absolute);
  if (info->is_symlink) {
    throw SystemError("'" + std::string(path) + "' is a link; links are never read", ELOOP,
                      absolute);
  }
  if (info->is_directory) throw IsADirectory("'" + std::string(path) + "' is a directory", absolute);
  if (info->size > max_bytes) {
    throw TransferCapExceeded("max_bytes", std::string(path), max_bytes, info->size);
  }
  // The file API would open a FIFO and wait on it, and reads a hard link as the file it names:
  // only an entry the guest calls a regular file of one link is read.
  switch (guest_kinds(during, {absolute}).front().value_or(EntryKind::other)) {
    case EntryKind::file:
      break;
    case EntryKind::symlink:
      throw SystemError("'" + std::string(path) + "' is a link; links are never read", ELOOP,
                        absolute);
    case EntryKind::directory:
      throw IsADirectory("'" + std::string(path) + "' is a directory", absolute);
    case EntryKind::other:
      throw SystemError("'" + std::string(path) +
                            "' is not a regular file of one link (a FIFO, a device, a socket or "
                            "a hard link is never read)",
                        0, absolute);
  }
  if (info->size == 0) return {};
  const std::string route = service_->plane->sandbox_path(identity_.id) + "/files";
  http::Response response;
  try {
    response = read(during, absolute, max_bytes);
  } catch (const http::BodyTooLarge&) {
    throw TransferCapExceeded("max_bytes", std::string(path), max_bytes);
  } catch (const http::DeadlineExceeded&) {
    throw SystemError("reading '" + std::string(path) +
                          "' did not finish within the backend's read_timeout_seconds (the "
                          "service's file API cannot tell a FIFO from an empty file)",
                      ETIMEDOUT, absolute);
  }
  if (response.status == 404) throw NotFound("'" + std::string(path) + "' does not exist", absolute);
  if (response.status < 200 || response.status > 299) {
    DataPlane::fail("read a file in the sandbox", "GET", route, response);
  }
  return std::move(response.body);
}

std::vector<SandboxEntry> AcasSandbox::list_dir(std::string_view path,
                                                std::string_view working_directory) {
  refuse_when_gone();
  const Call during = call(Clock::now() + service_->config.read_timeout);
  const std::string absolute = confine_guest_path(path, working_directory);
  refuse_overlong(path, absolute);
  refuse_symlinked_parents(file_stat(during), absolute, working_directory, /*include_self=*/true);
  const auto self = stat(during, absolute);
  if (!self) throw NotFound("'" + std::string(path) + "' does not exist", absolute);
  if (self->is_symlink) {
    throw ConfinementError("'" + std::string(path) + "' is a link; a listing never follows one");
  }
  if (!self->is_directory) {
    throw NotADirectory("'" + std::string(path) + "' is not a directory", absolute);
  }
  const std::string base = entry_path(absolute, working_directory);
  std::vector<SandboxEntry> entries;
  std::vector<std::size_t> files;      // the entries the file API calls files…
  std::vector<std::string> children;   // …and their absolute paths
  for (const FileInfo& info : list(during, absolute)) {
    const bool direct = !info.name.empty() && info.name != "." && info.name != ".." &&
                        info.name.find('/') == std::string::npos &&
                        (info.path.empty() || info.path == (absolute == "/" ? "" : absolute) + "/" + info.name);
    if (!direct) {
      throw BackendError("the sandbox service listed an entry that is not a direct child",
                         "list " + absolute + ": " + info.path.substr(0, 200));
    }
    SandboxEntry entry;
    entry.path = base == "." ? info.name : base + "/" + info.name;
    entry.kind = kind_of(info);
    if (entry.kind == EntryKind::file) entry.size_bytes = info.size;
    const bool file = entry.kind == EntryKind::file;
    entries.push_back(std::move(entry));
    if (file) {
      files.push_back(entries.size() - 1);
      children.push_back((absolute == "/" ? "" : absolute) + "/" + info.name);
    }
  }
  // What the file API calls a file, the guest names (FIFOs, hard links); one that went away
  // since the listing is left out.
  std::vector<SandboxEntry> kept;
  const auto kinds = guest_kinds(during, children);
  std::size_t at = 0;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    if (at < files.size() && files[at] == i) {
      const auto kind = kinds[at++];
      if (!kind) continue;
      if (entries[i].kind == EntryKind::file && *kind != EntryKind::file) {
        entries[i].kind = *kind;
        entries[i].size_bytes.reset();
      }
    }
    kept.push_back(std::move(entries[i]));
  }
  entries = std::move(kept);
  std::sort(entries.begin(), entries.end(),
            [](const SandboxEntry& a, const SandboxEntry& b) { return a.path < b.path; });
  return entries;
}

void AcasSandbox::remove(std::string_view path, std::string_view working_directory,
                         bool recursive) {
  refuse_when_gone();
  const std::string absolute = confine_guest_path(path, working_directory);
  if (absolute == normalize_guest_path(working_directory)) {
    throw ConfinementError("'" + std::string(path) +
                           "' names the working directory itself, which is never removed");
  }
  refuse_overlong(path, absolute);
  const Call during = call(Clock::now() + service_->config.read_timeout);
  refuse_symlinked_parents(file_stat(during), absolute, working_directory);
  const auto leaf = stat(during, absolute);
  if (!leaf) return;  // already gone is success
  if (leaf->is_directory && !leaf->is_symlink && !recursive) {
    throw SystemError("'" + std::string(path) + "' is a directory; removing it needs recursive",
                      EISDIR, absolute);
  }
  // As the guest, from inside the parent (entered physically); rm never follows a link.
  const std::string name = leaf_of(absolute);
  std::string script = "p=" + posix_quote(parent_of(absolute)) + "\n";
  script += "cd -P -- \"$p\" 2>/dev/null || exit 0\n";
  script += "[ \"$(pwd -P)\" = \"$p\" ] || exit " + std::to_string(kThroughLink) + "\n";
  script += "[ -e ./" + posix_quote(name) + " ] || [ -L ./" + posix_quote(name) + " ] || exit 0\n";
  script += std::string("exec rm ") + (recursive ? "-rf" : "-f") + " -- ./" + posix_quote(name) + "\n";
  const auto reply = shell(during, script);
  if (reply.exit_code == kThroughLink) {
    throw ConfinementError("'" + std::string(path) + "' passes through a link");
  }
  if (reply.exit_code != 0) {
    throw SystemError("the guest could not remove '" + std::string(path) + "': " +
                          first_line(reply.stderr_text),
                      EACCES, absolute);
  }
  // Absence is what the file API says, not what rm's exit claims.
  if (stat(during, absolute)) {
    throw SystemError("'" + std::string(path) + "' is still there after the guest removed it",
                      EEXIST, absolute);
  }
}

}  // namespace airlock::acas
