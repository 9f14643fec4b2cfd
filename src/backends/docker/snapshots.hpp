// The docker backend's snapshots: a sandbox's storage places (everything its guest can write
// while the root is read-only) read through the archive endpoints while the sandbox is quiesced,
// and kept on the engine as an image of one layer, labelled with the conversation that took it.
// A resume makes a container as an acquire does, from the image the sandbox ran, and writes
// the places back into it through a container of the snapshot's image that never starts.
// See docs/backends/docker.md, "Snapshots".
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "airlock/records.hpp"
#include "backends/docker/containers.hpp"
#include "backends/docker/engine_context.hpp"

namespace airlock::docker {

// What a snapshot needs of the sandbox it is taken from.
struct SnapshotSource {
  std::string container_id;
  std::string kind;      // raw, as the spec named it
  std::string work_dir;  // normalised
  std::uint64_t disk_bytes = 0;
  std::vector<std::string> places;  // the storage mounts' targets, absolute
  EngineFlavour flavour = EngineFlavour::docker;
  std::size_t keeper_processes = 2;
};

// The tag of a snapshot's image.
inline constexpr const char* kSnapshotRepository = "airlock-snapshot";

// Saves the running container `source` names: quiesced (frozen by the engine on Docker, every
// process stopped by its keeper on Podman), its places read, then run on; the image stored.
SnapshotRecord take_snapshot(EngineContext& engine, const SnapshotSource& source);

// A snapshot as the engine's images describe it: its record, and its image's id.
struct StoredSnapshot {
  SnapshotRecord record;
  std::string image_id;  // the snapshot's own image
  std::string source_image_id;  // the image the sandbox ran
  std::vector<std::string> places;
  std::uint64_t disk_bytes = 0;
  EngineFlavour flavour = EngineFlavour::docker;
};
std::optional<StoredSnapshot> find_snapshot_image(EngineClient& client, std::string_view id);
// Every snapshot image carrying `labels` (besides this backend's and the snapshot role).
std::vector<StoredSnapshot> list_snapshot_images(EngineClient& client,
                                                 const std::map<std::string, std::string>& labels);
// Removes a snapshot's image (and any reader left of it); true when nothing of it is left.
bool remove_snapshot_image(EngineClient& client, std::string_view id) noexcept;

// Writes the snapshot's places into the running container `container_id` (made for the resume,
// nothing of a guest running in it yet). `reader_labels` mark the reader container it goes
// through, so a sweep of the conversation finds one a crash left.
void restore_places(EngineContext& engine, const std::string& container_id,
                    const StoredSnapshot& snapshot,
                    const std::map<std::string, std::string>& reader_labels);

}  // namespace airlock::docker
