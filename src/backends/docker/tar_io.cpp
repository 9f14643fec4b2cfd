#include "backends/docker/tar_io.hpp"

#include <archive.h>
#include <archive_entry.h>

#include <algorithm>
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

namespace {

la_ssize_t pull_rebased(archive*, void* user, const void** block) {
  return static_cast<TarRebaser*>(user)->pull(block);
}

// "./a/b" → "a/b", "./" and "." → "": the engines' two spellings of a directory's content.
std::string strip_dot(std::string path) {
  while (path.rfind("./", 0) == 0) path.erase(0, 2);
  if (path == ".") path.clear();
  while (!path.empty() && path.back() == '/') path.pop_back();
  return path;
}

bool climbs_or_absolute(const std::string& path) {
  if (!path.empty() && path.front() == '/') return true;
  std::size_t start = 0;
  while (start <= path.size()) {
    const auto end = path.find('/', start);
    if (path.substr(start, end == std::string::npos ? end : end - start) == "..") return true;
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return false;
}

}  // namespace

TarRebaser::TarRebaser(int fd, std::uint64_t max_bytes) : max_bytes_(max_bytes) {
  writer_ = archive_write_new();
  archive_write_set_format_pax_restricted(writer_);
  if (archive_write_open_fd(writer_, fd) != ARCHIVE_OK)
    fail("could not start a snapshot's archive", writer_);
}

TarRebaser::~TarRebaser() {
  archive_write_free(writer_);
}

void TarRebaser::fail(const char* what, archive* where) {
  if (pending_) {
    auto pending = pending_;
    pending_ = nullptr;
    std::rethrow_exception(pending);
  }
  throw BackendError(what, archive_error_string(where) ? archive_error_string(where) : "");
}

long TarRebaser::pull(const void** block) {
  try {
    block_.resize(64u << 10);
    const std::size_t bytes = source_->read(block_.data(), block_.size());
    *block = block_.data();
    return static_cast<long>(bytes);
  } catch (...) {
    pending_ = std::current_exception();
    return -1;
  }
}

void TarRebaser::directory(const std::string& path, unsigned mode) {
  if (std::find(written_directories_.begin(), written_directories_.end(), path) !=
      written_directories_.end()) {
    return;
  }
  Entry entry;
  archive_entry_set_pathname(entry.handle, path.c_str());
  archive_entry_set_filetype(entry.handle, AE_IFDIR);
  archive_entry_set_perm(entry.handle, mode);
  archive_entry_set_uid(entry.handle, 0);
  archive_entry_set_gid(entry.handle, 0);
  archive_entry_set_mtime(entry.handle, std::time(nullptr), 0);
  if (archive_write_header(writer_, entry.handle) != ARCHIVE_OK) {
    fail("could not write a snapshot's archive", writer_);
  }
  written_directories_.push_back(path);
}

void TarRebaser::append(EngineDownload& download, const std::string& prefix,
                        const std::vector<std::string>& skipped) {
  for (std::size_t slash = prefix.find('/'); slash != std::string::npos;
       slash = prefix.find('/', slash + 1)) {
    directory(prefix.substr(0, slash), 0755);
  }
  source_ = &download;
  archive* reader = archive_read_new();
  struct Free {
    archive* handle;
    ~Free() { archive_read_free(handle); }
  } free_reader{reader};
  // Plain tar only: the engines send uncompressed archives, and no decompressor means no
  // decompression bomb.
  archive_read_support_format_tar(reader);
  if (archive_read_open(reader, this, nullptr, pull_rebased, nullptr) != ARCHIVE_OK) {
    fail("the container engine's archive could not be read", reader);
  }
  bool wrote_prefix = false;
  char chunk[65536];
  for (;;) {
    archive_entry* entry = nullptr;
    const int status = archive_read_next_header(reader, &entry);
    if (status == ARCHIVE_EOF) break;
    if (status != ARCHIVE_OK && status != ARCHIVE_WARN) {
      fail("the container engine's archive could not be read", reader);
    }
    const std::string path =
        strip_dot(archive_entry_pathname(entry) ? archive_entry_pathname(entry) : "");
    const char* hard = archive_entry_hardlink(entry);
    const auto type = archive_entry_filetype(entry);
    if (climbs_or_absolute(path) || (hard != nullptr && climbs_or_absolute(strip_dot(hard)))) {
      throw BackendError("the container engine's archive names a path outside its directory",
                         path.substr(0, 256));
    }
    if (path.empty()) {
      // The directory itself: the place keeps its mode.
      if (type == AE_IFDIR) {
        archive_entry_set_pathname(entry, prefix.c_str());
        if (archive_write_header(writer_, entry) != ARCHIVE_OK) {
          fail("could not write a snapshot's archive", writer_);
        }
        written_directories_.push_back(prefix);
        wrote_prefix = true;
      }
      continue;
    }
    if (!wrote_prefix) {
      directory(prefix, 0755);
      wrote_prefix = true;
    }
    if (hard == nullptr && type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK) {
      ++dropped_;
      continue;
    }
    const std::string rebased = prefix + "/" + path;
    const bool left_out = std::any_of(skipped.begin(), skipped.end(), [&rebased](const auto& skip) {
      return rebased == skip || rebased.rfind(skip + "/", 0) == 0;
    });
    if (left_out) continue;
    archive_entry_set_pathname(entry, rebased.c_str());
    if (hard != nullptr) {
      const std::string target = prefix + "/" + strip_dot(hard);
      archive_entry_set_hardlink(entry, target.c_str());
    }
    if (archive_write_header(writer_, entry) != ARCHIVE_OK) {
      fail("could not write a snapshot's archive", writer_);
    }
    if (type != AE_IFREG || hard != nullptr) continue;
    for (;;) {
      const la_ssize_t step = archive_read_data(reader, chunk, sizeof chunk);
      if (step < 0) fail("the container engine's archive could not be read", reader);
      if (step == 0) break;
      content_bytes_ += static_cast<std::uint64_t>(step);
      if (content_bytes_ > max_bytes_) {
        throw BackendError(
            "the sandbox's files are larger than its storage allows",
            std::to_string(content_bytes_) + " bytes past " + std::to_string(max_bytes_));
      }
      if (archive_write_data(writer_, chunk, static_cast<std::size_t>(step)) != step) {
        fail("could not write a snapshot's archive", writer_);
      }
    }
  }
  if (!wrote_prefix) directory(prefix, 0755);
  source_ = nullptr;
}

void TarRebaser::finish() {
  if (archive_write_close(writer_) != ARCHIVE_OK) {
    fail("could not finish a snapshot's archive", writer_);
  }
}

}  // namespace airlock::docker
