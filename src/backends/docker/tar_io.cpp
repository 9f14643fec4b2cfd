#include "backends/docker/tar_io.hpp"

#include <archive.h>
#include <archive_entry.h>

#include <ctime>

#include "airlock/errors.hpp"
#include "backends/docker/engine_streams.hpp"

namespace airlock::docker {
namespace {

struct Archive {
  archive* handle;
  bool writer;
  ~Archive() {
    if (writer) {
      archive_write_free(handle);
    } else {
      archive_read_free(handle);
    }
  }
};

struct Entry {
  archive_entry* handle = archive_entry_new();
  ~Entry() { archive_entry_free(handle); }
};

la_ssize_t append_to_string(archive*, void* user, const void* buffer, std::size_t length) {
  static_cast<std::string*>(user)->append(static_cast<const char*>(buffer), length);
  return static_cast<la_ssize_t>(length);
}

la_ssize_t pull_block(archive*, void* user, const void** block) {
  return static_cast<TarStreamReader*>(user)->pull(block);
}

void write_header(archive* writer, const std::string& path, unsigned type, unsigned mode,
                  std::int64_t size) {
  Entry entry;
  archive_entry_set_pathname(entry.handle, path.c_str());
  archive_entry_set_filetype(entry.handle, type);
  archive_entry_set_perm(entry.handle, mode);
  archive_entry_set_size(entry.handle, size);
  archive_entry_set_uid(entry.handle, 0);
  archive_entry_set_gid(entry.handle, 0);
  archive_entry_set_mtime(entry.handle, std::time(nullptr), 0);
  if (archive_write_header(writer, entry.handle) != ARCHIVE_OK) {
    throw BackendError("the archive for a write could not be built",
                       archive_error_string(writer) ? archive_error_string(writer) : "");
  }
}

}  // namespace

std::string build_directory_archive(const std::vector<std::string>& directories) {
  std::string out;
  Archive writer{archive_write_new(), true};
  archive_write_set_format_pax_restricted(writer.handle);
  archive_write_set_bytes_in_last_block(writer.handle, 1);
  if (archive_write_open(writer.handle, &out, nullptr, append_to_string, nullptr) != ARCHIVE_OK) {
    throw BackendError("the archive for a write could not be started");
  }
  for (const auto& directory : directories)
    write_header(writer.handle, directory, AE_IFDIR, 0755, 0);
  if (archive_write_close(writer.handle) != ARCHIVE_OK) {
    throw BackendError("the archive for a write could not be finished");
  }
  return out;
}

std::string build_file_archive(const std::vector<std::string>& directories, const std::string& file,
                               std::string_view content) {
  std::string out;
  Archive writer{archive_write_new(), true};
  // pax_restricted: plain ustar unless a name or size needs an extension.
  archive_write_set_format_pax_restricted(writer.handle);
  archive_write_set_bytes_in_last_block(writer.handle, 1);
  if (archive_write_open(writer.handle, &out, nullptr, append_to_string, nullptr) != ARCHIVE_OK) {
    throw BackendError("the archive for a write could not be started");
  }
  for (const auto& directory : directories)
    write_header(writer.handle, directory, AE_IFDIR, 0755, 0);
  write_header(writer.handle, file, AE_IFREG, 0644, static_cast<std::int64_t>(content.size()));
  std::size_t written = 0;
  while (written < content.size()) {
    const la_ssize_t step =
        archive_write_data(writer.handle, content.data() + written, content.size() - written);
    if (step <= 0) throw BackendError("the archive for a write could not be built");
    written += static_cast<std::size_t>(step);
  }
  if (archive_write_close(writer.handle) != ARCHIVE_OK) {
    throw BackendError("the archive for a write could not be finished");
  }
  return out;
}

TarStreamReader::TarStreamReader(EngineDownload& download) : download_(download) {
  archive_ = archive_read_new();
  // Plain tar only: the engines send uncompressed archives, and no decompressor means no
  // decompression bomb.
  archive_read_support_format_tar(archive_);
  if (archive_read_open(archive_, this, nullptr, pull_block, nullptr) != ARCHIVE_OK) {
    if (pending_) {
      archive_read_free(archive_);
      std::rethrow_exception(pending_);
    }
    const std::string message =
        archive_error_string(archive_) ? archive_error_string(archive_) : "";
    archive_read_free(archive_);
    throw BackendError("the container engine's archive could not be read", message);
  }
}

TarStreamReader::~TarStreamReader() {
  archive_read_free(archive_);
}

long TarStreamReader::pull(const void** block) {
  try {
    block_.resize(64u << 10);
    const std::size_t bytes = download_.read(block_.data(), block_.size());
    *block = block_.data();
    return static_cast<long>(bytes);
  } catch (...) {
    pending_ = std::current_exception();
    return -1;
  }
}

void TarStreamReader::fail(const char* what) {
  if (pending_) {
    auto pending = pending_;
    pending_ = nullptr;
    std::rethrow_exception(pending);
  }
  throw BackendError(what, archive_error_string(archive_) ? archive_error_string(archive_) : "");
}

std::optional<TarHeader> TarStreamReader::next() {
  archive_entry* entry = nullptr;
  const int status = archive_read_next_header(archive_, &entry);
  if (status == ARCHIVE_EOF) return std::nullopt;
  if (status != ARCHIVE_OK && status != ARCHIVE_WARN) {
    fail("the container engine's archive could not be read");
  }
  TarHeader header;
  const char* path = archive_entry_pathname(entry);
  header.path = path ? path : "";
  if (archive_entry_hardlink(entry) != nullptr) {
    header.hard_link = true;
    header.kind = EntryKind::other;
    return header;
  }
  switch (archive_entry_filetype(entry)) {
    case AE_IFREG:
      header.kind = EntryKind::file;
      if (archive_entry_size_is_set(entry)) {
        header.size = static_cast<std::uint64_t>(archive_entry_size(entry));
      }
      break;
    case AE_IFDIR:
      header.kind = EntryKind::directory;
      break;
    case AE_IFLNK:
      header.kind = EntryKind::symlink;
      break;
    default:
      header.kind = EntryKind::other;
  }
  return header;
}

std::optional<std::string> TarStreamReader::read_data(std::uint64_t max_bytes) {
  std::string out;
  char chunk[65536];
  while (true) {
    const la_ssize_t step = archive_read_data(archive_, chunk, sizeof chunk);
    if (step < 0) fail("the container engine's archive could not be read");
    if (step == 0) break;
    if (out.size() + static_cast<std::size_t>(step) > max_bytes) return std::nullopt;
    out.append(chunk, static_cast<std::size_t>(step));
  }
  return out;
}

void TarStreamReader::skip_data() {
  if (archive_read_data_skip(archive_) != ARCHIVE_OK) {
    fail("the container engine's archive could not be read");
  }
}

}  // namespace airlock::docker
