#include <algorithm>
#include <thread>

#include "airlock/encoding.hpp"
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

InProcessSandbox::InProcessSandbox(InProcessSandboxOptions options, SandboxKey key,
                                   std::string kind)
    : options_(std::move(options)), key_(std::move(key)), kind_(std::move(kind)) {}

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

bool InProcessSandbox::exists(const std::string& path) const {
  std::lock_guard lock(mutex_);
  return lstat_kind(normalize_guest_path(path)).has_value();
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

ExecResult InProcessSandbox::exec(const Command& command, const ExecOptions& options) {
  const std::string line = command.display();
  {
    std::lock_guard lock(mutex_);
    commands_.push_back({line, options.working_directory, options.timeout});
  }
  if (options_.raises) std::rethrow_exception(options_.raises);
  if (options_.emulate_commands) {
    if (auto emulated = Emulator(*this, options).run(command)) return *emulated;
  }
  ExecResult result;
  result.stdout_bytes = options_.default_stdout;
  bool scripted = false;
  for (const auto& [marker, output] : options_.outputs) {
    if (line.find(marker) != std::string::npos) {
      result.stdout_bytes = output;
      scripted = true;
      break;
    }
  }
  if (!scripted && options_.unemulated_not_found) {
    result.stdout_bytes.clear();
    result.stderr_bytes = "sh: " + command.arguments().front() +
                          ": not found (the in-process emulator does not run this command line)\n";
    result.exit_code = 127;
  }
  // A scripted answer is held to a bounded exec's ceiling too.
  if (options.max_output_bytes && result.stdout_bytes.size() > *options.max_output_bytes) {
    if (options.overflow == OutputOverflow::refuse) {
      throw ExecOutputLimitExceeded(*options.max_output_bytes, true);
    }
    result.stdout_bytes.resize(*options.max_output_bytes);
    result.truncated = true;
  }
  return result;
}

ExecResult InProcessSandbox::run_code(std::string_view code, Milliseconds timeout) {
  {
    std::lock_guard lock(mutex_);
    programs_.push_back({std::string(code), timeout});
  }
  if (options_.raises) std::rethrow_exception(options_.raises);
  ExecResult result;
  result.stdout_bytes = options_.default_stdout;
  for (const auto& [marker, output] : options_.outputs) {
    if (code.find(marker) != std::string_view::npos) {
      result.stdout_bytes = output;
      break;
    }
  }
  return result;
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
  if (*kind == EntryKind::file) entry.size_bytes = nodes_.at(absolute).content.size();
  return entry;
}

std::string InProcessSandbox::read_file(std::string_view path, std::string_view working_directory,
                                        std::uint64_t max_bytes) {
  std::lock_guard lock(mutex_);
  const std::string absolute = confine_guest_path(path, working_directory);
  refuse_overlong(absolute);
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
    if (node.kind == EntryKind::file) entry.size_bytes = node.content.size();
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
    : options_(std::move(options)), shared_(std::make_shared<InProcessSandbox>(options_.sandbox)) {}

std::shared_ptr<Sandbox> InProcessSandboxBackend::acquire(const SandboxKey& key,
                                                          const SandboxSpec& spec) {
  if (options_.acquire_error) std::rethrow_exception(options_.acquire_error);
  std::lock_guard lock(mutex_);
  keys_.push_back(key);
  specs_.push_back(spec);
  if (!options_.sandbox_per_key) return shared_;
  auto& slot = live_[{key, spec.kind(), spec.egress_posture()}];
  if (!slot) {
    InProcessSandboxOptions sandbox_options = options_.sandbox;
    sandbox_options.instance_id = "in-process-" + std::to_string(next_instance_++);
    slot = std::make_shared<InProcessSandbox>(sandbox_options, key, spec.kind());
  }
  return slot;
}

void InProcessSandboxBackend::dispose(const SandboxKey& key) noexcept {
  std::lock_guard lock(mutex_);
  disposed_.push_back(key);
  for (auto it = live_.begin(); it != live_.end();) {
    if (std::get<0>(it->first) == key) {
      disposed_instances_.push_back(it->second->instance_id());
      it = live_.erase(it);
    } else {
      ++it;
    }
  }
}

bool InProcessSandboxBackend::dispose_kind(const SandboxKey& key, std::string_view kind,
                                           std::optional<std::string_view> instance_id) noexcept {
  std::lock_guard lock(mutex_);
  for (auto it = live_.begin(); it != live_.end();) {
    const bool match = std::get<0>(it->first) == key && std::get<1>(it->first) == kind &&
                       (!instance_id || it->second->instance_id() == *instance_id);
    if (match) {
      disposed_instances_.push_back(it->second->instance_id());
      it = live_.erase(it);
    } else {
      ++it;
    }
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
  int removed = 0;
  for (auto it = live_.begin(); it != live_.end();) {
    const SandboxKey& key = std::get<0>(it->first);
    if (key.scope == scope && (!thread_id || key.thread_id == *thread_id)) {
      disposed_instances_.push_back(it->second->instance_id());
      it = live_.erase(it);
      ++removed;
    } else {
      ++it;
    }
  }
  return options_.sandbox_per_key ? removed : options_.purge_count;
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
