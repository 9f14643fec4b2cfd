// The readers that turn an import's source into entries for a RootfsWriter.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "airlock/images.hpp"
#include "images/fs.hpp"
#include "images/rootfs_writer.hpp"

namespace airlock::images::detail {

// Accounting for a stream read to its end: every byte read from the descriptor is hashed, and
// reading more than `max_bytes` fails the read.
struct StreamCheck {
  Sha256 digest;
  std::uint64_t max_bytes = 0;
  std::uint64_t bytes_read = 0;
};

// A tar archive — plain, gzip, xz, zstd or bzip2, decompressed in-process — from `fd`, read
// sequentially (pipes work). `what` names the source in errors. With `check`, the rest of the
// stream after the archive's end is read too, so the digest covers every byte.
void read_tar(int fd, std::string_view what, RootfsWriter& writer, StreamCheck* check = nullptr);

// A host directory tree: links stored as links, hard links within the tree kept, entries in
// name order so the import is deterministic.
void read_directory(const std::filesystem::path& source, RootfsWriter& writer);

// An OCI image layout, resolved to one image manifest.
struct OciLayer {
  std::string digest_hex;
  std::uint64_t size = 0;
  std::string media_type;
};
struct OciImage {
  std::string manifest_digest;  // "sha256:…"
  std::vector<OciLayer> layers;
  ImageConfig config;
};
OciImage read_oci_layout(int layout_fd, std::string_view display,
                         const std::optional<std::string>& tag, const ExtractionLimits& limits);
// Applies every layer in order, checking each blob's size and digest.
void apply_oci_layers(int layout_fd, const OciImage& image, RootfsWriter& writer);

}  // namespace airlock::images::detail
