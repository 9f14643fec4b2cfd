#include "daemon/handle_store.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <fstream>
#include <sstream>

#include "airlock/encoding.hpp"
#include "airlock/errors.hpp"
#include "base/syscall_error.hpp"

namespace airlock::daemon {
namespace {

constexpr int kRecordVersion = 1;

bool is_handle(std::string_view name) {
  if (name.size() != 4 + 32 || name.substr(0, 4) != "sbx-") return false;
  for (char c : name.substr(4)) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::string length_prefixed(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (auto part : parts) {
    out += std::to_string(part.size());
    out += ':';
    out += part;
  }
  return out;
}

HandleRecord parse_record(const json::Json& value, const std::string& where) {
  if (!value.is_object()) throw InvalidArgument(where + ": expected an object", where);
  if (value.value("version", 0) != kRecordVersion) {
    throw InvalidArgument(where + ": unknown record version", where + ".version");
  }
  HandleRecord record;
  record.handle = value.at("handle").get<std::string>();
  record.backend = value.at("backend").get<std::string>();
  record.key = json::parse_key(value.at("key"), where + ".key");
  record.spec =
      std::make_shared<const SandboxSpec>(json::parse_spec(value.at("spec"), where + ".spec"));
  record.instance_id = value.at("instance_id").get<std::string>();
  record.created_at = value.at("created_at").get<std::int64_t>();
  if (derive_handle(record.backend, record.key, *record.spec) != record.handle) {
    throw InvalidArgument(where + ": the handle does not match the key and spec it records",
                          where + ".handle");
  }
  return record;
}

}  // namespace

std::string derive_handle(std::string_view backend, const SandboxKey& key,
                          const SandboxSpec& spec) {
  const std::string posture = spec.egress_posture();
  return "sbx-" + sha256_hex(length_prefixed({"airlockd-handle-v1", backend, key.scope,
                                              key.thread_id, key.agent_dir, spec.kind(), posture}))
                      .substr(0, 32);
}

json::Json to_json(const HandleRecord& record) {
  return json::Json{{"version", kRecordVersion},           {"handle", record.handle},
                    {"backend", record.backend},           {"key", json::to_json(record.key)},
                    {"spec", json::to_json(*record.spec)}, {"instance_id", record.instance_id},
                    {"created_at", record.created_at}};
}

HandleStore::HandleStore(std::filesystem::path directory) : directory_(std::move(directory)) {
  std::error_code error;
  std::filesystem::create_directories(directory_, error);
  if (error) {
    throw SystemError("cannot create the daemon's state directory: " + error.message(),
                      error.value());
  }
  if (chmod(directory_.c_str(), 0700) != 0) {
    throw SystemError("cannot restrict the daemon's state directory to its owner", errno);
  }
  for (const auto& entry : std::filesystem::directory_iterator(directory_)) {
    const std::string name = entry.path().filename().string();
    if (name.find(".tmp.") != std::string::npos) {
      // A write that a crash interrupted before its rename: the old record (if any) stands.
      std::filesystem::remove(entry.path(), error);
      continue;
    }
    if (!name.ends_with(".json") || !is_handle(name.substr(0, name.size() - 5))) continue;
    try {
      std::ifstream file(entry.path(), std::ios::binary);
      std::ostringstream text;
      text << file.rdbuf();
      HandleRecord record =
          parse_record(json::parse_text(text.str(), "handle record"), "record " + name);
      records_.emplace(record.handle, std::move(record));
    } catch (const std::exception& failure) {
      spdlog::warn("state: skipping unreadable handle record {}: {}", name, failure.what());
    }
  }
  spdlog::info("state: {} handle record(s) in {}", records_.size(), directory_.string());
}

std::optional<HandleRecord> HandleStore::find(std::string_view handle) const {
  std::lock_guard lock(mutex_);
  auto found = records_.find(handle);
  if (found == records_.end()) return std::nullopt;
  return found->second;
}

std::vector<HandleRecord> HandleStore::all() const {
  std::lock_guard lock(mutex_);
  std::vector<HandleRecord> out;
  out.reserve(records_.size());
  for (const auto& [handle, record] : records_) out.push_back(record);
  return out;
}

std::size_t HandleStore::count() const {
  std::lock_guard lock(mutex_);
  return records_.size();
}

void HandleStore::put(const HandleRecord& record) {
  std::lock_guard lock(mutex_);
  write(record);
  records_.insert_or_assign(record.handle, record);
}

HandleStore::PutOutcome HandleStore::put_compatible(const HandleRecord& record) {
  std::lock_guard lock(mutex_);
  auto found = records_.find(record.handle);
  if (found == records_.end()) {
    write(record);
    records_.emplace(record.handle, record);
    return PutOutcome::created;
  }
  if (json::to_json(*found->second.spec) != json::to_json(*record.spec)) {
    return PutOutcome::conflict;
  }
  if (found->second.instance_id == record.instance_id) return PutOutcome::unchanged;
  HandleRecord updated = found->second;
  updated.instance_id = record.instance_id;
  write(updated);
  found->second = std::move(updated);
  return PutOutcome::updated;
}

void HandleStore::update_instance(std::string_view handle, std::string_view instance_id) {
  std::lock_guard lock(mutex_);
  auto found = records_.find(handle);
  if (found == records_.end() || found->second.instance_id == instance_id) return;
  HandleRecord updated = found->second;
  updated.instance_id = std::string(instance_id);
  write(updated);
  found->second = std::move(updated);
}

bool HandleStore::erase(std::string_view handle) {
  std::lock_guard lock(mutex_);
  auto found = records_.find(handle);
  if (found == records_.end()) return false;
  remove_file(handle);
  records_.erase(found);
  return true;
}

std::vector<HandleRecord> HandleStore::erase_scope(std::string_view scope,
                                                   std::optional<std::string_view> thread_id) {
  std::lock_guard lock(mutex_);
  std::vector<HandleRecord> erased;
  for (auto it = records_.begin(); it != records_.end();) {
    const SandboxKey& key = it->second.key;
    if (key.scope == scope && (!thread_id || key.thread_id == *thread_id)) {
      remove_file(it->first);
      erased.push_back(std::move(it->second));
      it = records_.erase(it);
    } else {
      ++it;
    }
  }
  return erased;
}

void HandleStore::write(const HandleRecord& record) {
  static std::atomic<std::uint64_t> counter{0};
  const std::string text = to_json(record).dump() + "\n";
  const auto target = directory_ / (record.handle + ".json");
  const auto temporary = directory_ / (record.handle + ".json.tmp." + std::to_string(getpid()) +
                                       "." + std::to_string(counter++));
  const int fd =
      open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    const int error = errno;
    throw SystemError("cannot write a handle record: " + base::errno_text(error), error);
  }
  std::size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      close(fd);
      unlink(temporary.c_str());
      throw SystemError("cannot write a handle record: " + base::errno_text(error), error);
    }
    written += static_cast<std::size_t>(n);
  }
  close(fd);
  // Atomic against a crash of this process; sandboxes do not outlive the machine, so neither
  // does a record need to (no fsync).
  if (rename(temporary.c_str(), target.c_str()) != 0) {
    const int error = errno;
    unlink(temporary.c_str());
    throw SystemError("cannot store a handle record: " + base::errno_text(error), error);
  }
}

void HandleStore::remove_file(std::string_view handle) noexcept {
  const auto target = directory_ / (std::string(handle) + ".json");
  if (unlink(target.c_str()) != 0 && errno != ENOENT) {
    spdlog::warn("state: cannot remove handle record {}: {}", handle, base::errno_text(errno));
  }
}

}  // namespace airlock::daemon
