// Test fixtures for the image store: archives written entry by entry (hostile ones included),
// OCI layouts with sha256-named blobs, and a scratch directory with a sentinel tree beside the
// store so a test can prove nothing was written outside it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace airlock::images::testing {

enum class Compression { none, gzip, xz, zstd, bzip2 };

struct TarEntry {
  enum class Type { file, directory, symlink, hardlink, fifo, char_device, block_device };
  std::string name;
  Type type = Type::file;
  std::string data;              // file content
  std::uint64_t zero_bytes = 0;  // file: this many zero bytes instead of `data` (streamed)
  std::string target;            // symlink target or hard link target
  unsigned mode = 0644;
  std::int64_t uid = 0;
  std::int64_t gid = 0;
  std::vector<std::pair<std::string, std::string>> xattrs;

  static TarEntry file(std::string name, std::string data, unsigned mode = 0644);
  static TarEntry directory(std::string name, unsigned mode = 0755);
  static TarEntry symlink(std::string name, std::string target);
  static TarEntry hardlink(std::string name, std::string target);
};

// Writes a pax tar, compressed as asked. Names are written exactly as given (no sanitising: the
// point is to write what an attacker would).
void write_tar(const std::filesystem::path& path, const std::vector<TarEntry>& entries,
               Compression compression = Compression::none);

struct OciManifestSpec {
  std::vector<std::vector<TarEntry>> layers;
  std::vector<std::filesystem::path> raw_layers;  // existing uncompressed tars, after `layers`
  std::optional<std::string> tag;                 // org.opencontainers.image.ref.name
  std::vector<std::string> env;
  std::vector<std::string> cmd;
  Compression layer_compression = Compression::gzip;
};

// Writes an OCI image layout with one manifest per spec. Returns the manifests' digests.
std::vector<std::string> write_oci_layout(const std::filesystem::path& layout,
                                          const std::vector<OciManifestSpec>& manifests);

std::string sha256_file_hex(const std::filesystem::path& path);
std::string read_file(const std::filesystem::path& path);
void write_file(const std::filesystem::path& path, const std::string& data);

// A scratch directory: <dir>/store for the store, <dir>/outside with a sentinel file that must
// never change. Removed on destruction.
class Scratch {
 public:
  Scratch();
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  const std::filesystem::path& dir() const { return dir_; }
  std::filesystem::path store() const { return dir_ / "store"; }
  std::filesystem::path outside() const { return dir_ / "outside"; }
  std::filesystem::path path(const std::string& name) const { return dir_ / name; }
  // The outside tree as "relative-path:content" lines, to compare before and after an attack.
  std::string outside_snapshot() const;
  // Names left in <store>/incoming (empty when no import is in progress or abandoned).
  std::vector<std::string> incoming() const;
  std::vector<std::string> content() const;

 private:
  std::filesystem::path dir_;
};

// Every path below `root` (relative), sorted, with a type letter: "d bin", "l bin/sh", "f etc/x".
std::vector<std::string> tree_listing(const std::filesystem::path& root);

}  // namespace airlock::images::testing
