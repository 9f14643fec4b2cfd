#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <random>
#include <thread>

#include "airlock/encoding.hpp"
#include "airlock/error_table.hpp"
#include "airlock/errors.hpp"
#include "airlock/paths.hpp"
#include "airlock/testing.hpp"
#include "emulator.hpp"

namespace airlock::testing {
namespace {

// A guest kernel refuses these before looking anything up; so does the fake.
void refuse_overlong(const std::string& absolute) {
  constexpr int kNameTooLong = 36;  // ENAMETOOLONG
  if (absolute.size() >= 4096) {
    throw SystemError("the guest path is " + std::to_string(absolute.size()) +
                          " bytes; a path must be shorter than 4096",
                      kNameTooLong, absolute.substr(0, 64) + "…");
  }
  std::size_t start = 1;
  while (start < absolute.size()) {
    std::size_t end = absolute.find('/', start);
    if (end == std::string::npos) end = absolute.size();
    if (end - start > 255) {
      throw SystemError("a component of the guest path is " + std::to_string(end - start) +
                            " bytes; a name must be at most 255",
                        kNameTooLong, absolute.substr(0, 64) + "…");
    }
    start = end + 1;
  }
}

}  // namespace

// What a backend with one sandbox per key knows of its live sandboxes (to label their
// snapshots and list them), and the snapshots themselves, shared with each sandbox it makes so
// that snapshot() finds them — and finds them gone, not dangling, once the backend is.
struct SnapshotShelf {
  struct Origin {
    SandboxKey key;
    std::string kind;
    std::string posture;
    std::string image;
    std::string work_dir;
    std::map<std::string, std::string> labels;
    std::chrono::system_clock::time_point created_at;
  };
  struct Stored {
    SnapshotRecord record;
    std::map<std::string, InProcessSandbox::Node> nodes;
  };

  std::mutex mutex;
  std::string backend;
  std::optional<SnapshotContent> content;
  Milliseconds duration{0};
  std::map<std::string, Origin> origins;             // by instance id: the live sandboxes
  std::map<std::string, Stored, std::less<>> shelved;  // by snapshot id
};

namespace {

// "snap-" and 24 hex digits, unguessable.
std::string new_snapshot_id() {
  static std::mutex mutex;
  static std::random_device device;
  std::lock_guard lock(mutex);
  std::uniform_int_distribution<unsigned> digit(0, 15);
  std::string id = "snap-";
  for (int i = 0; i < 24; ++i) id.push_back("0123456789abcdef"[digit(device)]);
  return id;
}

bool of_conversation(const std::map<std::string, std::string>& labels, std::string_view scope,
                     std::optional<std::string_view> thread_id) {
  const auto label = [&labels](const char* name) {
    const auto found = labels.find(name);
    return found == labels.end() ? std::string() : found->second;
  };
  return label("airlock.scope") == map_label_value(scope) &&
         (!thread_id || label("airlock.thread") == map_label_value(*thread_id));
}

}  // namespace

class InProcessSandbox::Running {
 public:
  explicit Running(InProcessSandbox& sandbox) : sandbox_(sandbox) {
    std::lock_guard lock(sandbox_.mutex_);
    if (sandbox_.capturing_) {
      throw BackendError(
          "the sandbox is frozen while a snapshot of it is taken: the command was refused "
          "(SandboxRouter::snapshot is an exclusive call, so no command admitted by the "
          "router meets this)");
    }
    ++sandbox_.running_;
  }
  ~Running() {
    std::lock_guard lock(sandbox_.mutex_);
    --sandbox_.running_;
  }
  Running(const Running&) = delete;
  Running& operator=(const Running&) = delete;

 private:
  InProcessSandbox& sandbox_;
};

std::exception_ptr scripted_error(std::string_view type, const std::string& message) {
  if (type == "Timeout") return std::make_exception_ptr(Timeout(message));
  const ErrorKind* kind = find_error_kind(type);
  if (kind == nullptr || !kind->concrete || kind->raise_example == nullptr) {
    throw InvalidArgument("\"" + std::string(type) +
                              "\" is not an airlock error type that can be raised (e.g. Timeout, "
                              "BackendError, NotFound, SandboxTransferCapExceeded)",
                          "type");
  }
  try {
    kind->raise_example(message);
  } catch (...) {
    return std::current_exception();
  }
  throw InvalidArgument("\"" + std::string(type) + "\" raised nothing", "type");
}

InProcessSandbox::InProcessSandbox(InProcessSandboxOptions options, SandboxKey key,
                                   std::string kind)
    : options_(std::move(options)), key_(std::move(key)), kind_(std::move(kind)) {
  for (const auto& entry : options_.seeds) seed_locked(entry);
}

// ---- the in-memory filesystem ----------------------------------------------------------------

std::optional<EntryKind> InProcessSandbox::lstat_kind(const std::string& absolute) const {
  if (absolute == "/") return EntryKind::directory;
  auto found = nodes_.find(absolute);
  if (found == nodes_.end()) return std::nullopt;
  return found->second.kind;
}

void InProcessSandbox::make_parents(const std::string& absolute) {
  std::string parent = parent_of(absolute);
  std::vector<std::string> missing;
  while (parent != "/" && !nodes_.contains(parent)) {
    missing.push_back(parent);
    parent = parent_of(parent);
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    nodes_[*it] = Node{EntryKind::directory, {}, {}, 0755, false};
  }
}

void InProcessSandbox::seed_file(const std::string& path, std::string content) {
  std::lock_guard lock(mutex_);
  const std::string absolute = normalize_guest_path(path);
  make_parents(absolute);
  nodes_[absolute] = Node{EntryKind::file, std::move(content), {}, 0644, false};
}

void InProcessSandbox::seed_directory(const std::string& path) {
  std::lock_guard lock(mutex_);
  const std::string absolute = normalize_guest_path(path);
  make_parents(absolute);
  nodes_[absolute] = Node{EntryKind::directory, {}, {}, 0755, false};
}

void InProcessSandbox::seed_symlink(const std::string& path, std::string target) {
  std::lock_guard lock(mutex_);
  const std::string absolute = normalize_guest_path(path);
  make_parents(absolute);
  nodes_[absolute] = Node{EntryKind::symlink, {}, std::move(target), 0777, false};
}

void InProcessSandbox::seed_other(const std::string& path) {
  std::lock_guard lock(mutex_);
  const std::string absolute = normalize_guest_path(path);
  make_parents(absolute);
  nodes_[absolute] = Node{EntryKind::other, {}, {}, 0644, false};
}

void InProcessSandbox::seed_locked(const SeedEntry& entry) {
  if (entry.path.empty() || entry.path.front() != '/') {
    throw InvalidArgument("seed: '" + entry.path + "' is not an absolute guest path", "seeds");
  }
  const std::string absolute = normalize_guest_path(entry.path);
  if (absolute == "/") throw InvalidArgument("seed: the root cannot be seeded", "seeds");
  make_parents(absolute);
  switch (entry.kind) {
    case EntryKind::file:
      nodes_[absolute] = Node{EntryKind::file, entry.content, {}, 0644, false};
      return;
    case EntryKind::directory:
      nodes_[absolute] = Node{EntryKind::directory, {}, {}, 0755, false};
      return;
    case EntryKind::symlink:
      nodes_[absolute] = Node{EntryKind::symlink, {}, entry.content, 0777, false};
      return;
    case EntryKind::other:
      nodes_[absolute] = Node{EntryKind::other, {}, {}, 0644, false};
      return;
  }
}

void InProcessSandbox::seed(const SeedEntry& entry) {
  std::lock_guard lock(mutex_);
  seed_locked(entry);
}

// ---- faults ------------------------------------------------------------------------------------

void InProcessSandbox::script_output(std::string marker, ExecResult answer) {
  std::lock_guard lock(mutex_);
  for (auto& [known, existing] : options_.outputs) {
    if (known == marker) {
      existing = std::move(answer);
      return;
    }
  }
  options_.outputs.emplace_back(std::move(marker), std::move(answer));
}

void InProcessSandbox::set_default_stdout(std::string stdout_bytes) {
  std::lock_guard lock(mutex_);
  options_.default_stdout = std::move(stdout_bytes);
}

void InProcessSandbox::set_exec_error(std::exception_ptr error) {
  std::lock_guard lock(mutex_);
  options_.raises = std::move(error);
}

void InProcessSandbox::misreport_size(const std::string& path, std::optional<std::uint64_t> size) {
  std::lock_guard lock(mutex_);
  options_.stat_sizes[normalize_guest_path(path)] = size;
}

void InProcessSandbox::report_true_sizes() {
  std::lock_guard lock(mutex_);
  options_.stat_sizes.clear();
}

void InProcessSandbox::hang_reads(const std::string& path, Milliseconds bound) {
  if (bound <= Milliseconds(0)) {
    throw InvalidArgument("hang_reads: the bound must be positive (a hang never lasts forever)",
                          "bound");
  }
  std::lock_guard lock(mutex_);
  options_.hanging_reads.insert(normalize_guest_path(path));
  options_.read_hang_bound = bound;
}

void InProcessSandbox::release_reads() {
  {
    std::lock_guard lock(mutex_);
    options_.hanging_reads.clear();
    ++release_generation_;
  }
  reads_released_.notify_all();
}

int InProcessSandbox::hanging_reads() const {
  std::lock_guard lock(mutex_);
  return hanging_now_;
}

std::optional<std::uint64_t> InProcessSandbox::reported_size(const std::string& absolute,
                                                             std::uint64_t real) const {
  const auto fault = options_.stat_sizes.find(absolute);
  return fault == options_.stat_sizes.end() ? std::optional<std::uint64_t>(real) : fault->second;
}

void InProcessSandbox::wait_out_hang(std::unique_lock<std::mutex>& lock,
                                     const std::string& absolute, std::string_view path) {
  if (!options_.hanging_reads.contains(absolute)) return;
  const Milliseconds bound = options_.read_hang_bound;
  const std::uint64_t generation = release_generation_;
  ++hanging_now_;
  const bool released =
      reads_released_.wait_for(lock, bound, [&] { return release_generation_ != generation; });
  --hanging_now_;
  if (!released) {
    throw Timeout("the read of '" + std::string(path) + "' hung for " +
                  std::to_string(bound.count()) + " ms (a scripted fault) and was given up");
  }
}

std::optional<ExecResult> InProcessSandbox::scripted_answer(std::string_view text) const {
  for (const auto& [marker, answer] : options_.outputs) {
    if (text.find(marker) != std::string_view::npos) return answer;
  }
  return std::nullopt;
}

void InProcessSandbox::set_mode(const std::string& path, unsigned mode) {
  std::lock_guard lock(mutex_);
  auto found = nodes_.find(normalize_guest_path(path));
  if (found == nodes_.end()) {
    throw NotFound("set_mode: '" + path + "' does not exist in the in-process sandbox", path);
  }
  found->second.mode = mode & 07777;
}

std::optional<std::string> InProcessSandbox::contents(const std::string& path) const {
  std::lock_guard lock(mutex_);
  auto found = nodes_.find(normalize_guest_path(path));
  if (found == nodes_.end() || found->second.kind != EntryKind::file) return std::nullopt;
  return found->second.content;
}

int InProcessSandbox::commands_running() const {
  std::lock_guard lock(mutex_);
  return running_;
}

SnapshotRecord InProcessSandbox::snapshot() {
  const std::shared_ptr<SnapshotShelf> shelf = shelf_.lock();
  if (!shelf) {
    throw NotSupported(
        "this in-process sandbox keeps no snapshots: only a testing backend with one sandbox per "
        "key (shared_sandbox false) takes them, and only while it exists");
  }
  Milliseconds duration{0};
  {
    std::lock_guard lock(shelf->mutex);
    duration = shelf->duration;
  }
  std::map<std::string, Node> files;
  {
    std::lock_guard lock(mutex_);
    if (running_ > 0) {
      throw BackendError("the sandbox is running " + std::to_string(running_) +
                         " command(s): a snapshot is taken between commands (run it as an "
                         "exclusive call, as SandboxRouter::snapshot does)");
    }
    if (capturing_) throw BackendError("a snapshot of this sandbox is already being taken");
    capturing_ = true;
    files = nodes_;
  }
  struct Thaw {
    InProcessSandbox& sandbox;
    ~Thaw() {
      std::lock_guard lock(sandbox.mutex_);
      sandbox.capturing_ = false;
    }
  } thaw{*this};
  if (duration > Milliseconds(0)) std::this_thread::sleep_for(duration);

  std::lock_guard lock(shelf->mutex);
  const auto origin = shelf->origins.find(instance_id());
  if (origin == shelf->origins.end()) {
    throw NotFound("sandbox instance " + instance_id() +
                   " was disposed of: there is nothing left to save");
  }
  SnapshotRecord record;
  record.id = new_snapshot_id();
  record.backend = shelf->backend;
  record.content = shelf->content.value_or(SnapshotContent::filesystem);
  record.kind = origin->second.kind;
  record.egress_posture = origin->second.posture;
  record.image = origin->second.image;
  record.work_dir = origin->second.work_dir;
  record.labels = origin->second.labels;
  record.source_instance_id = instance_id();
  for (const auto& [path, node] : files) {
    record.bytes += path.size() + node.content.size() + node.target.size();
  }
  record.created_at = std::chrono::system_clock::now();
  shelf->shelved.emplace(record.id, SnapshotShelf::Stored{record, std::move(files)});
  return record;
}

bool InProcessSandbox::exists(const std::string& path) const {
  std::lock_guard lock(mutex_);
  return lstat_kind(normalize_guest_path(path)).has_value();
}

std::optional<EntryKind> InProcessSandbox::kind_of(const std::string& path) const {
  std::lock_guard lock(mutex_);
  return lstat_kind(normalize_guest_path(path));
}

std::vector<RecordedCommand> InProcessSandbox::commands() const {
  std::lock_guard lock(mutex_);
  return commands_;
}

std::vector<RecordedProgram> InProcessSandbox::programs() const {
  std::lock_guard lock(mutex_);
  return programs_;
}

// ---- Sandbox ---------------------------------------------------------------------------------

void InProcessSandbox::write_file(std::string_view path, std::string_view content,
                                  std::string_view working_directory) {
  std::lock_guard lock(mutex_);
  const std::string absolute = confine_guest_write_path(
      [this](const std::string& p) { return lstat_kind(p); }, path, working_directory);
  refuse_overlong(absolute);
  if (auto existing = lstat_kind(absolute); existing && *existing == EntryKind::directory) {
    throw IsADirectory("'" + std::string(path) + "' is a directory", absolute);
  }
  make_parents(absolute);
  nodes_[absolute] = Node{EntryKind::file, std::string(content), {}, 0644, false};
}

namespace {

// A bounded exec's ceiling holds for a scripted answer too.
ExecResult within_ceiling(ExecResult result, const ExecOptions& options) {
  const std::uint64_t size = result.stdout_bytes.size() + result.stderr_bytes.size();
  if (options.max_output_bytes && size > *options.max_output_bytes) {
    if (options.overflow == OutputOverflow::refuse) {
      throw ExecOutputLimitExceeded(*options.max_output_bytes, true);
    }
    result.stdout_bytes.resize(
        std::min<std::size_t>(result.stdout_bytes.size(), *options.max_output_bytes));
    result.stderr_bytes.resize(std::min<std::size_t>(
        result.stderr_bytes.size(), *options.max_output_bytes - result.stdout_bytes.size()));
    result.truncated = true;
  }
  return result;
}

}  // namespace

namespace {

// The emulator runs a command on its input all at once, so live stdin is read to its end of
// file first, within the exec's timeout (a Timeout names stdin when the caller never closes it).
std::string read_stdin_to_eof(const ExecOptions& options) {
  const auto deadline = std::chrono::steady_clock::now() + options.timeout;
  std::string bytes;
  char buffer[65536];
  while (true) {
    if (options.stop.stop_requested()) throw Timeout("cancelled while reading stdin", true);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      throw Timeout("stdin_fd did not reach its end of file within " +
                        std::to_string(options.timeout.count()) + " ms",
                    true);
    }
    pollfd readable{options.stdin_fd, POLLIN, 0};
    const int ready = ::poll(&readable, 1, static_cast<int>(std::min<long long>(left.count(), 50)));
    if (ready < 0 && errno != EINTR) throw SystemError("poll on stdin_fd failed", errno);
    if (ready <= 0) continue;
    if ((readable.revents & POLLNVAL) != 0) {
      throw InvalidArgument(
          "exec: stdin_fd " + std::to_string(options.stdin_fd) + " is not an open descriptor",
          "stdin_fd");
    }
    const ssize_t got = ::read(options.stdin_fd, buffer, sizeof buffer);
    if (got == 0) return bytes;
    if (got < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      throw SystemError("read from stdin_fd failed", errno);
    }
    bytes.append(buffer, static_cast<std::size_t>(got));
  }
}

}  // namespace

ExecResult InProcessSandbox::exec(const Command& command, const ExecOptions& caller_options) {
  check_exec_options(caller_options);
  if (caller_options.terminal) {
    throw NotSupported("the testing backend cannot give a command a terminal");
  }
  Running running(*this);
  ExecResult result = exec_collected(command, caller_options);
  deliver_collected_output(result, caller_options);
  return result;
}

ExecResult InProcessSandbox::exec_collected(const Command& command,
                                            const ExecOptions& caller_options) {
  const std::string line = command.display();
  std::exception_ptr raises;
  std::optional<ExecResult> scripted;
  std::string default_stdout;
  {
    std::lock_guard lock(mutex_);
    commands_.push_back({line, caller_options.working_directory, caller_options.timeout});
    raises = options_.raises;
    scripted = scripted_answer(line);
    default_stdout = options_.default_stdout;
  }
  // The reference fake's order: record, raise, then a scripted marker answers.
  if (raises) std::rethrow_exception(raises);
  ExecOptions options = caller_options;
  if (options.stdin_fd >= 0) {
    options.stdin_bytes = read_stdin_to_eof(options);
    options.stdin_fd = -1;
  }
  if (scripted) return within_ceiling(std::move(*scripted), options);
  if (options_.emulate_commands) {
    try {
      if (auto emulated = Emulator(*this, options).run(command)) return *emulated;
    } catch (const Timeout& timeout) {
      if (!options.on_output) throw;
      // Streaming: what ran before the deadline goes to the callback, not into the error.
      ExecResult partial;
      partial.stdout_bytes = timeout.partial_stdout();
      partial.stderr_bytes = timeout.partial_stderr();
      deliver_collected_output(partial, options);
      throw Timeout(timeout.message(), timeout.kill_confirmed());
    }
  }
  ExecResult result;
  if (options_.unemulated_not_found) {
    result.stderr_bytes = "sh: " + command.arguments().front() +
                          ": not found (the in-process emulator does not run this command line)\n";
    result.exit_code = 127;
  } else {
    result.stdout_bytes = std::move(default_stdout);
  }
  return within_ceiling(std::move(result), options);
}

ExecResult InProcessSandbox::run_code(std::string_view code, Milliseconds timeout) {
  Running running(*this);
  std::exception_ptr raises;
  std::optional<ExecResult> scripted;
  ExecResult result;
  {
    std::lock_guard lock(mutex_);
    programs_.push_back({std::string(code), timeout});
    raises = options_.raises;
    scripted = scripted_answer(code);
    result.stdout_bytes = options_.default_stdout;
  }
  if (raises) std::rethrow_exception(raises);
  return scripted ? *scripted : result;
}

std::optional<SandboxEntry> InProcessSandbox::stat_file(std::string_view path,
                                                        std::string_view working_directory) {
  std::lock_guard lock(mutex_);
  const std::string absolute = confine_guest_path(path, working_directory);
  refuse_overlong(absolute);
  refuse_symlinked_parents([this](const std::string& p) { return lstat_kind(p); }, absolute,
                           working_directory);
  auto kind = lstat_kind(absolute);
  if (!kind) return std::nullopt;
  SandboxEntry entry;
  entry.path = *guest_path_relative_to(absolute, working_directory);
  if (entry.path.empty()) entry.path = ".";
  entry.kind = *kind;
  if (*kind == EntryKind::file) {
    entry.size_bytes = reported_size(absolute, nodes_.at(absolute).content.size());
  }
  return entry;
}

std::string InProcessSandbox::read_file(std::string_view path, std::string_view working_directory,
                                        std::uint64_t max_bytes) {
  std::unique_lock lock(mutex_);
  const std::string absolute = confine_guest_path(path, working_directory);
  refuse_overlong(absolute);
  wait_out_hang(lock, absolute, path);
  refuse_symlinked_parents([this](const std::string& p) { return lstat_kind(p); }, absolute,
                           working_directory);
  auto kind = lstat_kind(absolute);
  if (!kind) throw NotFound("'" + std::string(path) + "' does not exist", absolute);
  switch (*kind) {
    case EntryKind::file: {
      const std::string& content = nodes_.at(absolute).content;
      if (content.size() > max_bytes) {
        throw TransferCapExceeded("max_bytes", std::string(path), max_bytes, content.size());
      }
      return content;
    }
    case EntryKind::directory:
      throw IsADirectory("'" + std::string(path) + "' is a directory", absolute);
    case EntryKind::symlink:
      throw SystemError("'" + std::string(path) + "' is a link; links are never read", 40,
                        absolute);
    case EntryKind::other:
      break;
  }
  throw SystemError("'" + std::string(path) + "' is not a regular file", 0, absolute);
}

std::vector<SandboxEntry> InProcessSandbox::list_dir(std::string_view path,
                                                     std::string_view working_directory) {
  std::lock_guard lock(mutex_);
  const std::string absolute = confine_guest_path(path, working_directory);
  refuse_overlong(absolute);
  refuse_symlinked_parents([this](const std::string& p) { return lstat_kind(p); }, absolute,
                           working_directory, /*include_self=*/true);
  auto kind = lstat_kind(absolute);
  if (!kind) throw NotFound("'" + std::string(path) + "' does not exist", absolute);
  if (*kind != EntryKind::directory) {
    throw NotADirectory("'" + std::string(path) + "' is not a directory", absolute);
  }
  std::vector<SandboxEntry> entries;
  for (const auto& [child, node] : nodes_) {
    if (!is_under(child, absolute) || parent_of(child) != absolute) continue;
    SandboxEntry entry;
    entry.path = *guest_path_relative_to(child, working_directory);
    entry.kind = node.kind;
    if (node.kind == EntryKind::file) entry.size_bytes = reported_size(child, node.content.size());
    entries.push_back(std::move(entry));
  }
  std::sort(entries.begin(), entries.end(),
            [](const SandboxEntry& a, const SandboxEntry& b) { return a.path < b.path; });
  return entries;
}

void InProcessSandbox::remove(std::string_view path, std::string_view working_directory,
                              bool recursive) {
  std::lock_guard lock(mutex_);
  const std::string absolute = confine_guest_path(path, working_directory);
  refuse_overlong(absolute);
  if (absolute == normalize_guest_path(working_directory)) {
    throw ConfinementError("'" + std::string(path) +
                           "' names the working directory itself, which is never removed");
  }
  refuse_symlinked_parents([this](const std::string& p) { return lstat_kind(p); }, absolute,
                           working_directory);
  auto kind = lstat_kind(absolute);
  if (!kind) return;  // already gone is success
  if (*kind == EntryKind::directory && !recursive) {
    throw SystemError("'" + std::string(path) + "' is a directory; removing it needs recursive", 21,
                      absolute);
  }
  // A link has no children: removing it never reaches what it points at.
  for (auto it = nodes_.begin(); it != nodes_.end();) {
    if (it->first == absolute || (*kind == EntryKind::directory && is_under(it->first, absolute))) {
      it = nodes_.erase(it);
    } else {
      ++it;
    }
  }
}

// ---- the backend -----------------------------------------------------------------------------

InProcessSandboxBackend::InProcessSandboxBackend(InProcessBackendOptions options)
    : options_(std::move(options)),
      shared_(std::make_shared<InProcessSandbox>(options_.sandbox)),
      shelf_(std::make_shared<SnapshotShelf>()) {
  shelf_->backend = options_.name;
  shelf_->content = options_.snapshot_content;
  shelf_->duration = options_.snapshot_duration;
}

std::shared_ptr<InProcessSandbox> InProcessSandboxBackend::make_sandbox_locked(
    const SandboxKey& key, const SandboxSpec& spec) {
  InProcessSandboxOptions sandbox_options = options_.sandbox;
  sandbox_options.instance_id = "in-process-" + std::to_string(next_instance_++);
  auto sandbox = std::make_shared<InProcessSandbox>(sandbox_options, key, spec.kind());
  sandbox->shelf_ = shelf_;
  {
    std::lock_guard lock(shelf_->mutex);
    shelf_->origins[sandbox->instance_id()] =
        SnapshotShelf::Origin{key,
                              spec.kind(),
                              spec.egress_posture(),
                              spec.image().value_or(""),
                              spec.work_dir(),
                              sandbox_labels(key, spec),
                              std::chrono::system_clock::now()};
  }
  live_[{key, spec.kind(), spec.egress_posture()}] = sandbox;
  return sandbox;
}

InProcessSandboxBackend::LiveMap::iterator InProcessSandboxBackend::forget_locked(
    LiveMap::iterator slot) {
  const std::string instance = slot->second->instance_id();
  disposed_instances_.push_back(instance);
  {
    std::lock_guard lock(shelf_->mutex);
    shelf_->origins.erase(instance);
  }
  return live_.erase(slot);
}

std::shared_ptr<Sandbox> InProcessSandboxBackend::acquire(const SandboxKey& key,
                                                          const SandboxSpec& spec) {
  std::lock_guard lock(mutex_);
  if (options_.acquire_error) std::rethrow_exception(options_.acquire_error);
  keys_.push_back(key);
  specs_.push_back(spec);
  if (!options_.sandbox_per_key) return shared_;
  const auto slot = live_.find({key, spec.kind(), spec.egress_posture()});
  if (slot != live_.end()) return slot->second;
  return make_sandbox_locked(key, spec);
}

void InProcessSandboxBackend::dispose(const SandboxKey& key) noexcept {
  std::lock_guard lock(mutex_);
  disposed_.push_back(key);
  if (options_.dispose_fails) return;
  for (auto it = live_.begin(); it != live_.end();) {
    it = std::get<0>(it->first) == key ? forget_locked(it) : std::next(it);
  }
}

bool InProcessSandboxBackend::dispose_kind(const SandboxKey& key, std::string_view kind,
                                           std::optional<std::string_view> instance_id) noexcept {
  std::lock_guard lock(mutex_);
  disposed_kinds_.emplace_back(key, std::string(kind));
  if (options_.dispose_fails) return false;
  for (auto it = live_.begin(); it != live_.end();) {
    const bool match = std::get<0>(it->first) == key && std::get<1>(it->first) == kind &&
                       (!instance_id || it->second->instance_id() == *instance_id);
    it = match ? forget_locked(it) : std::next(it);
  }
  if (!options_.sandbox_per_key && instance_id && *instance_id == shared_->instance_id()) {
    disposed_instances_.emplace_back(*instance_id);
  }
  return true;
}

int InProcessSandboxBackend::dispose_scope(std::string_view scope,
                                           std::optional<std::string_view> thread_id) noexcept {
  std::lock_guard lock(mutex_);
  purged_.emplace_back(std::string(scope), thread_id
                                               ? std::optional<std::string>(std::string(*thread_id))
                                               : std::nullopt);
  if (options_.dispose_fails) return 0;
  int removed = 0;
  for (auto it = live_.begin(); it != live_.end();) {
    const SandboxKey& key = std::get<0>(it->first);
    if (key.scope == scope && (!thread_id || key.thread_id == *thread_id)) {
      it = forget_locked(it);
      ++removed;
    } else {
      ++it;
    }
  }
  {
    // The conversation's snapshots go with it, found by their labels as a real backend's are.
    std::lock_guard shelf_lock(shelf_->mutex);
    std::erase_if(shelf_->shelved, [&](const auto& entry) {
      return of_conversation(entry.second.record.labels, scope, thread_id);
    });
  }
  if (options_.purge_count) return *options_.purge_count;
  return options_.sandbox_per_key ? removed : 1;
}

std::vector<SandboxRecord> InProcessSandboxBackend::list_sandboxes() {
  std::lock_guard lock(mutex_);
  std::vector<SandboxRecord> records;
  std::lock_guard shelf_lock(shelf_->mutex);
  for (const auto& [identity, sandbox] : live_) {
    const auto origin = shelf_->origins.find(sandbox->instance_id());
    if (origin == shelf_->origins.end()) continue;
    SandboxRecord record;
    record.backend = options_.name;
    record.instance_id = sandbox->instance_id();
    record.kind = origin->second.kind;
    record.labels = origin->second.labels;
    record.egress_posture = origin->second.posture;
    record.state = "running";
    record.created_at = origin->second.created_at;
    records.push_back(std::move(record));
  }
  return records;
}

int InProcessSandboxBackend::purge_all() noexcept {
  std::lock_guard lock(mutex_);
  if (options_.dispose_fails) return 0;
  int removed = 0;
  for (auto it = live_.begin(); it != live_.end(); ++removed) it = forget_locked(it);
  std::lock_guard shelf_lock(shelf_->mutex);
  shelf_->shelved.clear();
  return removed;
}

std::optional<SnapshotContent> InProcessSandboxBackend::snapshot_content() const {
  std::lock_guard lock(shelf_->mutex);
  return shelf_->content;
}

std::shared_ptr<Sandbox> InProcessSandboxBackend::acquire_from_snapshot(
    const SandboxKey& key, const SandboxSpec& spec, const SnapshotRecord& snapshot) {
  std::lock_guard lock(mutex_);
  if (options_.acquire_error) std::rethrow_exception(options_.acquire_error);
  if (!options_.sandbox_per_key) {
    throw NotSupported(
        "the shared in-process sandbox answers every key and takes no snapshots "
        "(shared_sandbox false gives one sandbox per key)");
  }
  std::map<std::string, InProcessSandbox::Node> files;
  {
    std::lock_guard shelf_lock(shelf_->mutex);
    const auto found = shelf_->shelved.find(snapshot.id);
    if (found == shelf_->shelved.end()) {
      throw NotFound("no snapshot '" + snapshot.id + "' in the in-process backend");
    }
    files = found->second.nodes;
  }
  keys_.push_back(key);
  specs_.push_back(spec);
  resumed_snapshots_.push_back(snapshot.id);
  // The key's live sandbox of this kind and posture gives way to the resumed one.
  const auto slot = live_.find({key, spec.kind(), spec.egress_posture()});
  if (slot != live_.end()) forget_locked(slot);
  auto sandbox = make_sandbox_locked(key, spec);
  std::lock_guard sandbox_lock(sandbox->mutex_);
  sandbox->nodes_ = std::move(files);
  return sandbox;
}

std::optional<SnapshotRecord> InProcessSandboxBackend::find_snapshot(std::string_view id) {
  std::lock_guard lock(shelf_->mutex);
  const auto found = shelf_->shelved.find(id);
  if (found == shelf_->shelved.end()) return std::nullopt;
  return found->second.record;
}

std::vector<SnapshotRecord> InProcessSandboxBackend::list_snapshots() {
  std::lock_guard lock(shelf_->mutex);
  std::vector<SnapshotRecord> records;
  for (const auto& [id, stored] : shelf_->shelved) records.push_back(stored.record);
  return records;
}

bool InProcessSandboxBackend::delete_snapshot(std::string_view id) noexcept {
  std::lock_guard lock(mutex_);
  deleted_snapshots_.emplace_back(id);
  std::lock_guard shelf_lock(shelf_->mutex);
  if (const auto found = shelf_->shelved.find(id); found != shelf_->shelved.end()) {
    shelf_->shelved.erase(found);
  }
  return true;
}

void InProcessSandboxBackend::set_snapshot_content(std::optional<SnapshotContent> content) {
  std::lock_guard lock(shelf_->mutex);
  shelf_->content = content;
}

void InProcessSandboxBackend::set_snapshot_duration(Milliseconds duration) {
  std::lock_guard lock(shelf_->mutex);
  shelf_->duration = duration;
}

std::vector<std::string> InProcessSandboxBackend::resumed_snapshots() const {
  std::lock_guard lock(mutex_);
  return resumed_snapshots_;
}

std::vector<std::string> InProcessSandboxBackend::deleted_snapshots() const {
  std::lock_guard lock(mutex_);
  return deleted_snapshots_;
}

std::vector<std::shared_ptr<InProcessSandbox>> InProcessSandboxBackend::live_sandboxes() const {
  std::lock_guard lock(mutex_);
  if (!options_.sandbox_per_key) return {shared_};
  std::vector<std::shared_ptr<InProcessSandbox>> out;
  for (const auto& [identity, sandbox] : live_) out.push_back(sandbox);
  return out;
}

void InProcessSandboxBackend::set_acquire_error(std::exception_ptr error) {
  std::lock_guard lock(mutex_);
  options_.acquire_error = std::move(error);
}

void InProcessSandboxBackend::set_dispose_fails(bool fails) {
  std::lock_guard lock(mutex_);
  options_.dispose_fails = fails;
}

void InProcessSandboxBackend::set_purge_count(std::optional<int> count) {
  std::lock_guard lock(mutex_);
  options_.purge_count = count;
}

std::vector<std::pair<SandboxKey, std::string>> InProcessSandboxBackend::disposed_kinds() const {
  std::lock_guard lock(mutex_);
  return disposed_kinds_;
}

std::vector<SandboxKey> InProcessSandboxBackend::keys() const {
  std::lock_guard lock(mutex_);
  return keys_;
}
std::vector<SandboxSpec> InProcessSandboxBackend::specs() const {
  std::lock_guard lock(mutex_);
  return specs_;
}
std::vector<SandboxKey> InProcessSandboxBackend::disposed() const {
  std::lock_guard lock(mutex_);
  return disposed_;
}
std::vector<std::string> InProcessSandboxBackend::disposed_instances() const {
  std::lock_guard lock(mutex_);
  return disposed_instances_;
}
std::vector<std::pair<std::string, std::optional<std::string>>> InProcessSandboxBackend::purged()
    const {
  std::lock_guard lock(mutex_);
  return purged_;
}

}  // namespace airlock::testing
