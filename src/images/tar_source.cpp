// Tar archives through libarchive's reader. Only the reader: writing to disk is RootfsWriter's,
// because archive_write_disk resolves paths against the process-wide working directory, which a
// multithreaded host cannot lend it.
#include <archive.h>
#include <archive_entry.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <memory>

#include "airlock/errors.hpp"
#include "images/sources.hpp"

namespace airlock::images::detail {

namespace {

struct ArchiveFree {
  void operator()(archive* handle) const noexcept { archive_read_free(handle); }
};

struct Stream {
  int fd;
  StreamCheck* check;
  char buffer[1 << 16];
};

// C callback: must not throw.
la_ssize_t read_callback(archive* handle, void* client, const void** out) {
  auto* stream = static_cast<Stream*>(client);
  ssize_t got;
  do {
    got = ::read(stream->fd, stream->buffer, sizeof stream->buffer);
  } while (got < 0 && errno == EINTR);
  if (got < 0) {
    archive_set_error(handle, errno, "read failed");
    return -1;
  }
  if (stream->check != nullptr) {
    stream->check->bytes_read += static_cast<std::uint64_t>(got);
    if (stream->check->bytes_read > stream->check->max_bytes) {
      archive_set_error(handle, EFBIG, "the blob is larger than its descriptor says");
      return -1;
    }
    stream->check->digest.update(stream->buffer, static_cast<std::size_t>(got));
  }
  *out = stream->buffer;
  return got;
}

[[noreturn]] void archive_failure(archive* handle, std::string_view what) {
  const char* reason = archive_error_string(handle);
  throw InvalidArgument("cannot read " + std::string(what) + ": " +
                            (reason != nullptr ? reason : "unreadable archive"),
                        "archive");
}

class ArchiveContent final : public ContentSource {
 public:
  ArchiveContent(archive* handle, std::string_view what) : handle_(handle), what_(what) {}
  bool next_block(const void** data, std::size_t* size, std::uint64_t* offset) override {
    la_int64_t at = 0;
    const int status = archive_read_data_block(handle_, data, size, &at);
    if (status == ARCHIVE_EOF) return false;
    if (status < ARCHIVE_WARN || at < 0) archive_failure(handle_, what_);
    *offset = static_cast<std::uint64_t>(at);
    return true;
  }

 private:
  archive* handle_;
  std::string_view what_;
};

EntryType entry_type(archive_entry* entry, std::string_view name) {
  if (archive_entry_hardlink(entry) != nullptr) return EntryType::hardlink;
  switch (archive_entry_filetype(entry)) {
    case AE_IFREG:
      return EntryType::regular;
    case AE_IFDIR:
      return EntryType::directory;
    case AE_IFLNK:
      return EntryType::symlink;
    case AE_IFIFO:
      return EntryType::fifo;
    case AE_IFCHR:
      return EntryType::character_device;
    case AE_IFBLK:
      return EntryType::block_device;
    case AE_IFSOCK:
      return EntryType::socket;
    default:
      break;
  }
  throw InvalidArgument(
      "image import refused: entry " + quote_name(name) + " has an unknown file type (rule: types)",
      "types");
}

}  // namespace

void read_tar(int fd, std::string_view what, RootfsWriter& writer, StreamCheck* check) {
  std::unique_ptr<archive, ArchiveFree> handle(archive_read_new());
  if (!handle) throw SystemError("cannot allocate an archive reader");
  archive* a = handle.get();
  // Named filters only: support_filter_all would also accept formats libarchive handles by
  // running an external program, and hostile input must never choose what we execute.
  archive_read_support_filter_none(a);
  archive_read_support_filter_gzip(a);
  archive_read_support_filter_xz(a);
  archive_read_support_filter_lzma(a);
  archive_read_support_filter_zstd(a);
  archive_read_support_filter_bzip2(a);
  archive_read_support_format_tar(a);
  auto stream = std::make_unique<Stream>();
  stream->fd = fd;
  stream->check = check;
  if (archive_read_open(a, stream.get(), nullptr, read_callback, nullptr) != ARCHIVE_OK) {
    archive_failure(a, what);
  }
  for (;;) {
    archive_entry* entry = nullptr;
    const int status = archive_read_next_header(a, &entry);
    if (status == ARCHIVE_EOF) break;
    if (status == ARCHIVE_RETRY) continue;
    if (status < ARCHIVE_WARN) archive_failure(a, what);
    if (status == ARCHIVE_WARN) {
      const char* reason = archive_error_string(a);
      spdlog::debug("image import: {}: {}", what, reason != nullptr ? reason : "warning");
    }
    const char* name = archive_entry_pathname(entry);
    if (name == nullptr) {
      throw InvalidArgument("image import refused: " + std::string(what) +
                                " has an entry without a name (rule: paths)",
                            "paths");
    }
    EntryHeader header;
    header.name = name;
    header.type = entry_type(entry, header.name);
    header.mode = static_cast<std::uint32_t>(archive_entry_perm(entry)) & 07777;
    header.uid = archive_entry_uid(entry);
    header.gid = archive_entry_gid(entry);
    if (header.type == EntryType::regular && archive_entry_size_is_set(entry) != 0) {
      const la_int64_t size = archive_entry_size(entry);
      header.size = size > 0 ? static_cast<std::uint64_t>(size) : 0;
    }
    if (header.type == EntryType::hardlink) {
      header.link_target = archive_entry_hardlink(entry);
    } else if (header.type == EntryType::symlink) {
      const char* target = archive_entry_symlink(entry);
      header.link_target = target != nullptr ? target : "";
    }
    if (archive_entry_mtime_is_set(entry) != 0) {
      header.has_mtime = true;
      header.mtime.tv_sec = archive_entry_mtime(entry);
      header.mtime.tv_nsec = archive_entry_mtime_nsec(entry);
    }
    ArchiveContent content(a, what);
    writer.add(header, header.type == EntryType::regular ? &content : nullptr);
  }
  if (check != nullptr) {
    // The archive ends before the stream does (padding, compressor trailers); the digest is of
    // the whole blob.
    for (;;) {
      ssize_t got = ::read(fd, stream->buffer, sizeof stream->buffer);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) throw_errno("cannot read", what);
      if (got == 0) break;
      check->bytes_read += static_cast<std::uint64_t>(got);
      if (check->bytes_read > check->max_bytes) {
        throw InvalidArgument(std::string(what) + " is larger than its descriptor says", "digest");
      }
      check->digest.update(stream->buffer, static_cast<std::size_t>(got));
    }
  }
}

}  // namespace airlock::images::detail
