#include "backends/gvisor/state_store.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <sstream>

#include "airlock/errors.hpp"
#include "airlock/json.hpp"
#include "airlock/state_dir.hpp"
#include "backends/kit/identity_lock.hpp"
#include "backends/kit/own_directory.hpp"
#include "base/syscall_error.hpp"

namespace airlock::gvisor_backend {

std::string random_hex(std::size_t bytes) {
  std::string raw(bytes, '\0');
  std::size_t filled = 0;
  while (filled < bytes) {
    const ssize_t got = ::getrandom(raw.data() + filled, bytes - filled, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) throw BackendError("no randomness", base::errno_error("getrandom"));
    filled += static_cast<std::size_t>(got);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char byte : raw) {
    out.push_back(kHex[byte >> 4]);
    out.push_back(kHex[byte & 0xF]);
  }
  return out;
}

StateStore::StateStore(std::filesystem::path state_dir) : base_(std::move(state_dir) / "gvisor") {}

void StateStore::ensure_layout(std::uint32_t uid_base) const {
  using backend_kit::make_own_directory;
  // Checked before anything is made in it (no link, nobody else's, not writable by others).
  prepare_state_directory(base_.parent_path());
  // runsc's Gofer runs as the sandbox's host uid (uid_base), not as host root: it must be able
  // to pass through the base to reach the helper directory it binds. Traverse only, no listing;
  // everything private (runsc's root, records, bundles, locks) stays owner-only.
  make_own_directory(base_, 0711, 0, 0, "gvisor");
  for (const char* name : {"runsc", "locks", "sandboxes", "snapshots"}) {
    make_own_directory(base_ / name, 0700, 0, 0, "gvisor");
  }
  make_own_directory(base_ / "helpers", 0711, 0, 0, "gvisor");
  make_own_directory(base_ / "egress", 0711, 0, 0, "gvisor");
  make_own_directory(base_ / "control", 0711, 0, 0, "gvisor");
  // The Gofer (uid and gid uid_base) passes through shared/, no other host user does: nobody
  // can plant a file or a socket in the empty lower layer every sandbox's /tmp and /dev/shm
  // are overlays of. empty/ is the guest root's (so /tmp is root's 1777 inside) and stays empty:
  // runsc serves it read-only under the overlay.
  make_own_directory(shared_dir(), 0710, 0, uid_base, "gvisor");
  make_own_directory(empty_dir(), 01777, uid_base, uid_base, "gvisor");
}

base::UniqueFd StateStore::lock(const std::string& id) const {
  return backend_kit::lock_identity(base_ / "locks", id, "gvisor");
}

std::optional<Record> StateStore::read(const std::string& id) const {
  std::ifstream in(sandbox_dir(id) / "record.json", std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  const json::Json parsed = json::Json::parse(text.str(), nullptr, false);
  if (!parsed.is_object()) return std::nullopt;
  Record record;
  record.id = parsed.value("id", id);
  record.instance_id = parsed.value("instance_id", "");
  record.kind = parsed.value("kind", "");
  if (parsed.contains("labels") && parsed["labels"].is_object()) {
    for (const auto& [key, value] : parsed["labels"].items()) {
      if (value.is_string()) record.labels[key] = value.get<std::string>();
    }
  }
  record.egress_posture = parsed.value("egress_posture", "");
  record.state = parsed.value("state", "");
  record.image = parsed.value("image", "");
  record.image_id = parsed.value("image_id", "");
  record.work_dir = parsed.value("work_dir", "");
  record.platform = parsed.value("platform", "");
  record.created_at_ms = parsed.value("created_at_ms", std::int64_t{0});
  record.helper_directory = parsed.value("helper_directory", "");
  record.disk_bytes = parsed.value("disk_bytes", std::uint64_t{0});
  const auto optional_count = [&parsed](const char* name) -> std::optional<std::uint64_t> {
    const auto found = parsed.find(name);
    if (found == parsed.end() || !found->is_number_unsigned()) return std::nullopt;
    return found->get<std::uint64_t>();
  };
  record.memory_bytes = optional_count("memory_bytes");
  record.pids = optional_count("pids");
  record.cpu_millis = optional_count("cpu_millis");
  record.from_snapshot = parsed.value("from_snapshot", "");
  return record;
}

void StateStore::write(const Record& record) const {
  const auto directory = sandbox_dir(record.id);
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  json::Json document = {{"id", record.id},
                         {"instance_id", record.instance_id},
                         {"kind", record.kind},
                         {"labels", record.labels},
                         {"egress_posture", record.egress_posture},
                         {"state", record.state},
                         {"image", record.image},
                         {"image_id", record.image_id},
                         {"work_dir", record.work_dir},
                         {"platform", record.platform},
                         {"created_at_ms", record.created_at_ms},
                         {"helper_directory", record.helper_directory},
                         {"disk_bytes", record.disk_bytes}};
  if (record.memory_bytes) document["memory_bytes"] = *record.memory_bytes;
  if (record.pids) document["pids"] = *record.pids;
  if (record.cpu_millis) document["cpu_millis"] = *record.cpu_millis;
  if (!record.from_snapshot.empty()) document["from_snapshot"] = record.from_snapshot;
  const auto staging = directory / "record.json.tmp";
  {
    std::ofstream out(staging, std::ios::binary | std::ios::trunc);
    out << document.dump(2);
    if (!out) {
      throw BackendError("the gvisor backend could not write a sandbox record", staging.string());
    }
  }
  std::filesystem::rename(staging, directory / "record.json", error);
  if (error) {
    throw BackendError("the gvisor backend could not write a sandbox record",
                       staging.string() + ": " + error.message());
  }
}

std::vector<std::string> StateStore::ids() const {
  std::vector<std::string> found;
  std::error_code error;
  // egress/<id> too: a crash between its listen and the record leaves only that to reclaim.
  for (const char* area : {"sandboxes", "egress", "control"}) {
    for (const auto& entry : std::filesystem::directory_iterator(base_ / area, error)) {
      if (!entry.is_directory(error)) continue;
      auto name = entry.path().filename().string();
      if (std::find(found.begin(), found.end(), name) == found.end()) found.push_back(name);
    }
  }
  return found;
}

void StateStore::remove(const std::string& id) const noexcept {
  std::error_code ignored;
  std::filesystem::remove_all(sandbox_dir(id), ignored);
  std::filesystem::remove_all(egress_dir(id), ignored);
  std::filesystem::remove_all(control_dir(id), ignored);
}

}  // namespace airlock::gvisor_backend
