#include "images/image_fixtures.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

namespace airlock::images::testing {

namespace {

void check(int status, archive* handle, const char* what) {
  if (status < ARCHIVE_WARN) {
    throw std::runtime_error(std::string(what) + ": " + archive_error_string(handle));
  }
}

std::string hex(const unsigned char* bytes, unsigned length) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < length; ++i) {
    out.push_back(kDigits[bytes[i] >> 4]);
    out.push_back(kDigits[bytes[i] & 0xf]);
  }
  return out;
}

std::string sha256_hex(const std::string& data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned length = 0;
  EVP_Digest(data.data(), data.size(), digest, &length, EVP_sha256(), nullptr);
  return hex(digest, length);
}

}  // namespace

TarEntry TarEntry::file(std::string name, std::string data, unsigned mode) {
  TarEntry entry;
  entry.name = std::move(name);
  entry.data = std::move(data);
  entry.mode = mode;
  return entry;
}

TarEntry TarEntry::directory(std::string name, unsigned mode) {
  TarEntry entry;
  entry.name = std::move(name);
  entry.type = Type::directory;
  entry.mode = mode;
  return entry;
}

TarEntry TarEntry::symlink(std::string name, std::string target) {
  TarEntry entry;
  entry.name = std::move(name);
  entry.type = Type::symlink;
  entry.target = std::move(target);
  entry.mode = 0777;
  return entry;
}

TarEntry TarEntry::hardlink(std::string name, std::string target) {
  TarEntry entry;
  entry.name = std::move(name);
  entry.type = Type::hardlink;
  entry.target = std::move(target);
  return entry;
}

void write_tar(const std::filesystem::path& path, const std::vector<TarEntry>& entries,
               Compression compression) {
  archive* handle = archive_write_new();
  check(archive_write_set_format_pax_restricted(handle), handle, "format");
  switch (compression) {
    case Compression::none:
      break;
    case Compression::gzip:
      check(archive_write_add_filter_gzip(handle), handle, "gzip");
      break;
    case Compression::xz:
      check(archive_write_add_filter_xz(handle), handle, "xz");
      break;
    case Compression::zstd:
      check(archive_write_add_filter_zstd(handle), handle, "zstd");
      break;
    case Compression::bzip2:
      check(archive_write_add_filter_bzip2(handle), handle, "bzip2");
      break;
  }
  check(archive_write_open_filename(handle, path.c_str()), handle, "open");
  for (const auto& spec : entries) {
    archive_entry* entry = archive_entry_new();
    archive_entry_set_pathname(entry, spec.name.c_str());
    archive_entry_set_perm(entry, spec.mode);
    archive_entry_set_uid(entry, spec.uid);
    archive_entry_set_gid(entry, spec.gid);
    archive_entry_set_mtime(entry, 1'700'000'000, 0);
    for (const auto& [name, value] : spec.xattrs) {
      archive_entry_xattr_add_entry(entry, name.c_str(), value.data(), value.size());
    }
    std::uint64_t size = 0;
    switch (spec.type) {
      case TarEntry::Type::file:
        archive_entry_set_filetype(entry, AE_IFREG);
        size = spec.zero_bytes != 0 ? spec.zero_bytes : spec.data.size();
        break;
      case TarEntry::Type::directory:
        archive_entry_set_filetype(entry, AE_IFDIR);
        break;
      case TarEntry::Type::symlink:
        archive_entry_set_filetype(entry, AE_IFLNK);
        archive_entry_set_symlink(entry, spec.target.c_str());
        break;
      case TarEntry::Type::hardlink:
        archive_entry_set_filetype(entry, AE_IFREG);
        archive_entry_set_hardlink(entry, spec.target.c_str());
        break;
      case TarEntry::Type::fifo:
        archive_entry_set_filetype(entry, AE_IFIFO);
        break;
      case TarEntry::Type::char_device:
        archive_entry_set_filetype(entry, AE_IFCHR);
        archive_entry_set_rdevmajor(entry, 1);
        archive_entry_set_rdevminor(entry, 1);
        break;
      case TarEntry::Type::block_device:
        archive_entry_set_filetype(entry, AE_IFBLK);
        archive_entry_set_rdevmajor(entry, 8);
        archive_entry_set_rdevminor(entry, 0);
        break;
    }
    archive_entry_set_size(entry, static_cast<la_int64_t>(size));
    check(archive_write_header(handle, entry), handle, "header");
    if (spec.zero_bytes != 0) {
      const std::string zeros(1 << 20, '\0');
      for (std::uint64_t left = spec.zero_bytes; left > 0;) {
        const std::size_t chunk =
            left < zeros.size() ? static_cast<std::size_t>(left) : zeros.size();
        if (archive_write_data(handle, zeros.data(), chunk) < 0) check(-30, handle, "data");
        left -= chunk;
      }
    } else if (!spec.data.empty()) {
      if (archive_write_data(handle, spec.data.data(), spec.data.size()) < 0) {
        check(-30, handle, "data");
      }
    }
    archive_entry_free(entry);
  }
  check(archive_write_close(handle), handle, "close");
  archive_write_free(handle);
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void write_file(const std::filesystem::path& path, const std::string& data) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << data;
}

std::string sha256_file_hex(const std::filesystem::path& path) {
  return sha256_hex(read_file(path));
}

namespace {

// Stores `data` as a blob and returns its descriptor.
nlohmann::json put_blob(const std::filesystem::path& layout, const std::string& data,
                        const std::string& media_type) {
  const std::string digest = sha256_hex(data);
  write_file(layout / "blobs" / "sha256" / digest, data);
  return {{"mediaType", media_type}, {"digest", "sha256:" + digest}, {"size", data.size()}};
}

}  // namespace

std::vector<std::string> write_oci_layout(const std::filesystem::path& layout,
                                          const std::vector<OciManifestSpec>& manifests) {
  std::filesystem::create_directories(layout / "blobs" / "sha256");
  write_file(layout / "oci-layout", R"({"imageLayoutVersion": "1.0.0"})");
  nlohmann::json index = {{"schemaVersion", 2}, {"manifests", nlohmann::json::array()}};
  std::vector<std::string> digests;
  for (const auto& spec : manifests) {
    nlohmann::json layers = nlohmann::json::array();
    nlohmann::json diff_ids = nlohmann::json::array();
    for (const auto& entries : spec.layers) {
      const std::filesystem::path scratch = layout / "layer.tmp";
      write_tar(scratch, entries, spec.layer_compression);
      const std::string data = read_file(scratch);
      std::filesystem::remove(scratch);
      std::string media_type = "application/vnd.oci.image.layer.v1.tar";
      if (spec.layer_compression == Compression::gzip) media_type += "+gzip";
      if (spec.layer_compression == Compression::zstd) media_type += "+zstd";
      layers.push_back(put_blob(layout, data, media_type));
      diff_ids.push_back("sha256:0000000000000000000000000000000000000000000000000000000000000000");
    }
    for (const auto& raw : spec.raw_layers) {
      layers.push_back(put_blob(layout, read_file(raw), "application/vnd.oci.image.layer.v1.tar"));
      diff_ids.push_back("sha256:" + sha256_file_hex(raw));
    }
    nlohmann::json config = {{"architecture", "amd64"},
                             {"os", "linux"},
                             {"config", {{"Env", spec.env}, {"Cmd", spec.cmd}}},
                             {"rootfs", {{"type", "layers"}, {"diff_ids", diff_ids}}}};
    const nlohmann::json config_descriptor =
        put_blob(layout, config.dump(), "application/vnd.oci.image.config.v1+json");
    nlohmann::json manifest = {{"schemaVersion", 2},
                               {"mediaType", "application/vnd.oci.image.manifest.v1+json"},
                               {"config", config_descriptor},
                               {"layers", layers}};
    nlohmann::json descriptor =
        put_blob(layout, manifest.dump(), "application/vnd.oci.image.manifest.v1+json");
    if (spec.tag) descriptor["annotations"] = {{"org.opencontainers.image.ref.name", *spec.tag}};
    digests.push_back(descriptor["digest"].get<std::string>());
    index["manifests"].push_back(descriptor);
  }
  write_file(layout / "index.json", index.dump());
  return digests;
}

Scratch::Scratch() {
  std::string pattern = (std::filesystem::temp_directory_path() / "airlock-images-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  dir_ = pattern;
  write_file(outside() / "secret", "the host's secret\n");
  write_file(outside() / "sub" / "file", "untouched\n");
}

Scratch::~Scratch() {
  std::error_code ignored;
  // Directories an image made read-only are made writable again so they can be removed.
  for (auto it = std::filesystem::recursive_directory_iterator(
           dir_, std::filesystem::directory_options::skip_permission_denied, ignored);
       it != std::filesystem::recursive_directory_iterator(); it.increment(ignored)) {
    if (it->is_directory(ignored) && !it->is_symlink(ignored)) {
      std::filesystem::permissions(it->path(), std::filesystem::perms::owner_all,
                                   std::filesystem::perm_options::add, ignored);
    }
  }
  std::filesystem::remove_all(dir_, ignored);
}

std::string Scratch::outside_snapshot() const {
  std::string out;
  for (const auto& line : tree_listing(outside())) {
    out += line;
    if (line.starts_with("f ")) out += ":" + read_file(outside() / line.substr(2));
    out += "\n";
  }
  return out;
}

namespace {
std::vector<std::string> names_in(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}
}  // namespace

std::vector<std::string> Scratch::incoming() const {
  return names_in(store() / "incoming");
}
std::vector<std::string> Scratch::content() const {
  return names_in(store() / "content");
}

std::vector<std::string> tree_listing(const std::filesystem::path& root) {
  std::vector<std::string> out;
  std::error_code error;
  for (auto it = std::filesystem::recursive_directory_iterator(root, error);
       it != std::filesystem::recursive_directory_iterator(); it.increment(error)) {
    const auto status = it->symlink_status();
    char letter = '?';
    if (std::filesystem::is_symlink(status))
      letter = 'l';
    else if (std::filesystem::is_directory(status))
      letter = 'd';
    else if (std::filesystem::is_regular_file(status))
      letter = 'f';
    else if (std::filesystem::is_fifo(status))
      letter = 'p';
    else if (std::filesystem::is_character_file(status))
      letter = 'c';
    else if (std::filesystem::is_block_file(status))
      letter = 'b';
    out.push_back(std::string(1, letter) + " " +
                  std::filesystem::relative(it->path(), root).string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace airlock::images::testing
