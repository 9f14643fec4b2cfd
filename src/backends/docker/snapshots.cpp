#include "backends/docker/snapshots.hpp"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>

#include "airlock/encoding.hpp"
#include "airlock/errors.hpp"
#include "airlock/paths.hpp"
#include "backends/docker/engine_streams.hpp"
#include "backends/docker/tar_io.hpp"
#include "base/unique_fd.hpp"

namespace airlock::docker {
namespace {

using nlohmann::json;

constexpr const char* kRecordLabel = "airlock.snapshot.record";

std::string random_hex(std::size_t bytes) {
  std::string raw(bytes, '\0');
  std::size_t filled = 0;
  while (filled < bytes) {
    const ssize_t got = ::getrandom(raw.data() + filled, bytes - filled, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) throw BackendError("no randomness for a snapshot's id", std::strerror(errno));
    filled += static_cast<std::size_t>(got);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (const unsigned char byte : raw) {
    out.push_back(kHex[byte >> 4]);
    out.push_back(kHex[byte & 0xF]);
  }
  return out;
}

// A file nobody else can open and that no crash leaves behind: unlinked from the start, in
// $TMPDIR (else /tmp), 0600. A snapshot's places pass through it on their way to the engine.
base::UniqueFd private_temporary_file() {
  const char* directory = std::getenv("TMPDIR");
  const std::string where = directory != nullptr && *directory ? directory : "/tmp";
  base::UniqueFd fd(::open(where.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
  if (!fd) {
    throw SystemError("could not make a temporary file for a snapshot", errno, where);
  }
  return fd;
}

std::uint64_t rewind(int fd) {
  struct stat info {};
  if (::fstat(fd, &info) != 0 || ::lseek(fd, 0, SEEK_SET) != 0) {
    throw SystemError("could not read back a snapshot's temporary file", errno);
  }
  return static_cast<std::uint64_t>(info.st_size);
}

// "/maf-sandbox" → "maf-sandbox": a place's path inside the snapshot's layer.
std::string layer_path(const std::string& place) {
  return place.substr(place.find_first_not_of('/'));
}

std::string archive_query(const std::string& container, const std::string& absolute) {
  return "/containers/" + url_encode(container) + "/archive?path=" + url_encode(absolute);
}

// What an engine itself mounts into a storage place, never the guest's: Podman binds its init
// at /run/podman-init (and, where it makes them, /run/.containerenv and /run/secrets). A
// snapshot leaves them out — written back, they would meet the new container's read-only binds.
const std::vector<std::string> kEngineOwned = {"run/podman-init", "run/.containerenv",
                                               "run/secrets"};

// Streams the archive of `<place>/.` of `container` into `into` under the place's path.
void read_place(EngineClient& client, const std::string& container, const std::string& place,
                TarRebaser& into) {
  const auto deadline = Clock::now() + std::max(client.request_timeout(),
                                                std::chrono::milliseconds(600'000));
  EngineDownload download(client, client.versioned(archive_query(container, place + "/.")),
                          deadline);
  const long status = download.wait_for_head();
  if (status != 200) {
    throw BackendError("the container engine could not read the sandbox's files",
                       "GET archive " + place + " → " + std::to_string(status) + ": " +
                           download.read_rest(600));
  }
  into.append(download, layer_path(place), kEngineOwned);
}

// Every process but the init and the keeper stopped (Podman's quiescence): the keeper stops
// them on SIGUSR2; asked again until the engine's process list shows them all stopped.
void stop_guest(EngineClient& client, const SnapshotSource& source) {
  for (int round = 0; round < 20; ++round) {
    if (round % 4 == 0) signal_container(client, source.container_id, "SIGUSR2");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const auto states = process_states(client, source.container_id, source.flavour);
    if (!states) continue;
    const auto running = std::count_if(states->begin(), states->end(), [](const std::string& s) {
      return s != "T" && s != "t" && s != "Z";
    });
    if (static_cast<std::size_t>(running) <= source.keeper_processes) return;
  }
  signal_container(client, source.container_id, "SIGHUP");
  throw BackendError(
      "the sandbox could not be quiesced for its snapshot: processes kept running",
      "container " + source.container_id + ": the keeper's stop did not hold within a second");
}

void continue_guest(EngineClient& client, const SnapshotSource& source) noexcept {
  try {
    signal_container(client, source.container_id, "SIGHUP");
  } catch (...) {
  }
}

// The conversation's labels as the sandbox carries them (mapped values): its key, kind,
// posture and the spec's own labels — not what its image brought (Podman merges an image's
// labels into its containers').
std::map<std::string, std::string> conversation_labels(
    const std::map<std::string, std::string>& labels) {
  std::map<std::string, std::string> out;
  for (const auto& [name, value] : labels) {
    if (name == "airlock.scope" || name == "airlock.thread" || name == "airlock.agent" ||
        name == "airlock.kind" || name == "airlock.egress" || name.rfind("airlock.label.", 0) == 0) {
      out[name] = value;
    }
  }
  return out;
}

std::optional<StoredSnapshot> from_image(const ImageInfo& image) {
  const auto found = image.labels.find(kRecordLabel);
  if (found == image.labels.end()) return std::nullopt;
  const auto decoded = base64_decode(found->second);
  if (!decoded) return std::nullopt;
  const json value = json::parse(*decoded, nullptr, false);
  if (!value.is_object()) return std::nullopt;
  try {
    StoredSnapshot stored;
    SnapshotRecord& record = stored.record;
    record.id = value.at("id").get<std::string>();
    record.backend = "docker";
    record.content = SnapshotContent::filesystem;
    record.kind = value.at("kind").get<std::string>();
    record.egress_posture = value.at("egress_posture").get<std::string>();
    record.image = value.at("image").get<std::string>();
    record.work_dir = value.at("work_dir").get<std::string>();
    record.source_instance_id = value.at("source_instance_id").get<std::string>();
    record.bytes = value.at("bytes").get<std::uint64_t>();
    record.created_at = std::chrono::system_clock::time_point(
        std::chrono::milliseconds(value.at("created_at_ms").get<std::int64_t>()));
    // The conversation is the image's own labels (what a label filter finds), not the record's.
    for (const auto& [name, label] : image.labels) {
      if (name.rfind("airlock.", 0) == 0 && name != kRecordLabel) record.labels[name] = label;
    }
    stored.image_id = image.id;
    stored.source_image_id = value.at("source_image_id").get<std::string>();
    stored.places = value.at("places").get<std::vector<std::string>>();
    stored.disk_bytes = value.at("disk_bytes").get<std::uint64_t>();
    stored.flavour =
        value.at("engine").get<std::string>() == "podman" ? EngineFlavour::podman
                                                          : EngineFlavour::docker;
    // The image's snapshot label must name the record it carries.
    const auto id_label = image.labels.find(kSnapshotLabel);
    if (id_label == image.labels.end() || id_label->second != record.id) return std::nullopt;
    return stored;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace

SnapshotRecord take_snapshot(EngineContext& engine, const SnapshotSource& source) {
  EngineClient& client = *engine.client;
  const auto info = inspect_container(client, source.container_id);
  if (!info || !info->running) {
    throw SandboxInvalidated("the sandbox's container is gone or stopped; acquire it again");
  }
  if (source.flavour == EngineFlavour::podman) {
    const auto keeper = info->labels.find(kKeeperLabel);
    if (keeper == info->labels.end() || keeper->second != kKeeperVersion) {
      throw NotSupported(
          "this sandbox's container was made before the docker backend took snapshots on "
          "Podman (its keeper cannot stop its processes); dispose of it and acquire it again");
    }
  }
  SnapshotRecord record;
  record.id = "snap-" + random_hex(12);
  record.backend = "docker";
  record.content = SnapshotContent::filesystem;
  record.kind = source.kind;
  const auto label = [&info](const char* name) {
    const auto found = info->labels.find(name);
    return found == info->labels.end() ? std::string() : found->second;
  };
  record.egress_posture = label("airlock.egress");
  record.image = info->image_id;
  record.work_dir = source.work_dir;
  record.source_instance_id = source.container_id;
  record.created_at = std::chrono::system_clock::now();

  // Quiesced while the places are read: frozen by the engine's cgroup freezer on Docker, whose
  // archive endpoints read a frozen container's volumes from the host. Podman reads a tmpfs
  // only by entering the container, which it cannot do while the container is frozen — its
  // answer is then the image's empty directory, silently — so there the keeper stops every
  // other process instead.
  base::UniqueFd layer = private_temporary_file();
  std::uint64_t content_bytes = 0;
  {
    TarRebaser rebaser(layer.get(), source.disk_bytes);
    if (source.flavour == EngineFlavour::docker) {
      pause_container(client, source.container_id);
    } else {
      stop_guest(client, source);
    }
    try {
      for (const auto& place : source.places) read_place(client, source.container_id, place, rebaser);
    } catch (...) {
      if (source.flavour == EngineFlavour::docker) {
        unpause_container(client, source.container_id);
      } else {
        continue_guest(client, source);
      }
      throw;
    }
    if (source.flavour == EngineFlavour::docker) {
      unpause_container(client, source.container_id);
    } else {
      continue_guest(client, source);
    }
    rebaser.finish();
    content_bytes = rebaser.content_bytes();
  }
  const std::uint64_t layer_bytes = rewind(layer.get());
  record.bytes = layer_bytes;

  json value = {{"id", record.id},
                {"kind", record.kind},
                {"egress_posture", record.egress_posture},
                {"image", record.image},
                {"work_dir", record.work_dir},
                {"source_instance_id", record.source_instance_id},
                {"bytes", record.bytes},
                {"created_at_ms", std::chrono::duration_cast<std::chrono::milliseconds>(
                                      record.created_at.time_since_epoch())
                                      .count()},
                {"source_image_id", info->image_id},
                {"places", source.places},
                {"disk_bytes", source.disk_bytes},
                {"content_bytes", content_bytes},
                {"engine", source.flavour == EngineFlavour::podman ? "podman" : "docker"}};
  std::map<std::string, std::string> labels = conversation_labels(info->labels);
  labels[kBackendLabel] = "docker";
  labels[kRoleLabel] = kRoleSnapshot;
  labels[kSnapshotLabel] = record.id;
  labels[kRecordLabel] = base64_encode(value.dump());
  for (const auto& [name, text] : labels) record.labels[name] = text;
  record.labels.erase(kRecordLabel);
  import_image(client, layer.get(), layer_bytes,
               std::string(kSnapshotRepository) + ":" + record.id, labels);
  return record;
}

std::optional<StoredSnapshot> find_snapshot_image(EngineClient& client, std::string_view id) {
  if (!is_snapshot_id(id)) return std::nullopt;
  for (const auto& image : list_images(client, {{kBackendLabel, "docker"},
                                                {kRoleLabel, kRoleSnapshot},
                                                {kSnapshotLabel, std::string(id)}})) {
    if (auto stored = from_image(image)) return stored;
  }
  return std::nullopt;
}

std::vector<StoredSnapshot> list_snapshot_images(
    EngineClient& client, const std::map<std::string, std::string>& labels) {
  auto filter = labels;
  filter[kBackendLabel] = "docker";
  filter[kRoleLabel] = kRoleSnapshot;
  std::vector<StoredSnapshot> out;
  for (const auto& image : list_images(client, filter)) {
    if (auto stored = from_image(image)) out.push_back(std::move(*stored));
  }
  return out;
}

bool remove_snapshot_image(EngineClient& client, std::string_view id) noexcept {
  try {
    if (!is_snapshot_id(id)) return true;
    const std::map<std::string, std::string> labels = {{kBackendLabel, "docker"},
                                                       {kSnapshotLabel, std::string(id)}};
    // A reader a crashed resume left holds the image: it goes first.
    for (const auto& container : list_containers(client, labels)) {
      remove_container(client, container.id);
    }
    bool gone = true;
    auto images = labels;
    images[kRoleLabel] = kRoleSnapshot;
    for (const auto& image : list_images(client, images)) {
      gone = remove_image(client, image.id) && gone;
    }
    return gone;
  } catch (...) {
    return false;
  }
}

void restore_places(EngineContext& engine, const std::string& container_id,
                    const StoredSnapshot& snapshot,
                    const std::map<std::string, std::string>& reader_labels) {
  EngineClient& client = *engine.client;
  // The snapshot's layer is read through a container of its image that never starts (it has
  // nothing to run); it carries the conversation's labels and the snapshot's, so a sweep finds
  // it if this process dies first.
  ContainerRequest reader;
  reader.name = "airlock-reader-" + random_hex(12);
  reader.image = snapshot.image_id;
  reader.entrypoint = {"/airlock-snapshot-holds-no-program"};
  reader.labels = reader_labels;
  reader.labels[kRoleLabel] = kRoleSnapshotReader;
  reader.labels[kSnapshotLabel] = snapshot.record.id;
  reader.flavour = snapshot.flavour;
  // No tmpfs of its own over a place (a writable root asks for none): what the archive reads
  // is the image's layer.
  reader.read_only_rootfs = false;
  reader.init = false;
  const auto created = create_container(client, reader);
  if (!created) {
    throw BackendError("the snapshot's reader could not be made", "name " + reader.name + " taken");
  }
  struct RemoveReader {
    EngineClient& client;
    std::string id;
    ~RemoveReader() { remove_container(client, id); }
  } remove_reader{client, *created};
  for (const auto& place : snapshot.places) {
    base::UniqueFd file = private_temporary_file();
    {
      const auto deadline = Clock::now() + std::max(client.request_timeout(),
                                                    std::chrono::milliseconds(600'000));
      EngineDownload download(client, client.versioned(archive_query(*created, place + "/.")),
                              deadline);
      const long status = download.wait_for_head();
      if (status != 200) {
        throw BackendError("the container engine could not read the snapshot",
                           "GET archive " + place + " → " + std::to_string(status) + ": " +
                               download.read_rest(600));
      }
      std::string buffer(64u << 10, '\0');
      std::uint64_t total = 0;
      for (;;) {
        const std::size_t got = download.read(buffer.data(), buffer.size());
        if (got == 0) break;
        total += got;
        // The layer held at most the sandbox's storage, plus the tar's own headers.
        if (total > 2 * snapshot.disk_bytes + (16u << 20)) {
          throw BackendError("the snapshot's archive is larger than its sandbox's storage");
        }
        std::size_t written = 0;
        while (written < got) {
          const ssize_t step = ::write(file.get(), buffer.data() + written, got - written);
          if (step < 0 && errno == EINTR) continue;
          if (step <= 0) throw SystemError("could not keep a snapshot's files", errno);
          written += static_cast<std::size_t>(step);
        }
      }
    }
    CallOptions options;
    options.body_fd = file.get();
    options.body_fd_bytes = rewind(file.get());
    options.content_type = "application/x-tar";
    options.timeout = std::max(client.request_timeout(), std::chrono::milliseconds(600'000));
    const std::string path = "/containers/" + url_encode(container_id) +
                             "/archive?noOverwriteDirNonDir=1&path=" + url_encode(place);
    const EngineResponse response = client.call("PUT", path, options);
    if (response.status != 200) {
      EngineClient::fail("the container engine could not write the snapshot's files back", "PUT",
                         path, response);
    }
  }
}

}  // namespace airlock::docker
