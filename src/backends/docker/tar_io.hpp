// Tar through libarchive, in the two shapes the archive endpoints need: a small archive to PUT
// (one file, plus the directories it needs), and a reader that pulls a GET's body on demand so
// that headers are judged before any entry's data is read.
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "airlock/vocabulary.hpp"

struct archive;
struct archive_entry;

namespace airlock::docker {

class EngineDownload;

// A tar holding only `directories` (relative, parents first, mode 0755, owner root).
std::string build_directory_archive(const std::vector<std::string>& directories);

// A tar holding `directories` (relative, parents first, mode 0755) then the regular file
// `file` (relative, mode 0644) with `content`. Owner root, mtime now. PAX where names need it.
std::string build_file_archive(const std::vector<std::string>& directories, const std::string& file,
                               std::string_view content);

// One header as the reader saw it.
struct TarHeader {
  std::string path;  // as stored (may end in '/')
  EntryKind kind = EntryKind::other;
  std::optional<std::uint64_t> size;  // regular files only
  bool hard_link = false;             // a hard-link entry (kind is `other`)
};

// Reads a tar from an EngineDownload, pulling body bytes only as headers and data are asked for.
class TarStreamReader {
 public:
  explicit TarStreamReader(EngineDownload& download);
  ~TarStreamReader();
  TarStreamReader(const TarStreamReader&) = delete;
  TarStreamReader& operator=(const TarStreamReader&) = delete;

  // The next header, or nullopt at the end of the archive. Throws BackendError when the bytes
  // are not a tar; rethrows what the download raised.
  std::optional<TarHeader> next();
  // Read the current entry's data, refusing (returns nullopt) once more than `max_bytes` arrived.
  std::optional<std::string> read_data(std::uint64_t max_bytes);
  // Skip the current entry's data.
  void skip_data();

  // libarchive callback.
  long pull(const void** block);

 private:
  [[noreturn]] void fail(const char* what);

  EngineDownload& download_;
  archive* archive_ = nullptr;
  std::string block_;
  std::exception_ptr pending_;  // an exception thrown inside the callback, rethrown outside
};

// Writes one tar to a descriptor from the tars of several directories, each put under a path
// of its own: what a snapshot of a sandbox's storage places is made of. Only regular files
// (and hard links between them), directories and symbolic links are kept; device nodes, FIFOs
// and sockets are dropped. An entry whose path is absolute or climbs ("..") is refused.
class TarRebaser {
 public:
  // `max_bytes`: past this much file content in all, the copy is refused (BackendError).
  TarRebaser(int fd, std::uint64_t max_bytes);
  ~TarRebaser();
  TarRebaser(const TarRebaser&) = delete;
  TarRebaser& operator=(const TarRebaser&) = delete;

  // Appends the entries of the tar `download` streams (a directory's content, as the engines
  // answer for "<dir>/.": "./a", "a", and the directory itself as "./" or "." or not at all)
  // under `prefix` (relative, no trailing '/'): "./a/b" becomes "<prefix>/a/b", the directory
  // itself `prefix`. `prefix`'s parents are written first (0755, root's). An entry whose new
  // path is in `skipped` (relative, like `prefix`), or beneath one, is left out.
  void append(EngineDownload& download, const std::string& prefix,
              const std::vector<std::string>& skipped = {});
  // Ends the archive; the descriptor then holds it whole.
  void finish();
  std::uint64_t content_bytes() const noexcept { return content_bytes_; }
  std::uint64_t dropped_entries() const noexcept { return dropped_; }

  // libarchive callback.
  long pull(const void** block);

 private:
  void directory(const std::string& path, unsigned mode);
  [[noreturn]] void fail(const char* what, archive* where);

  archive* writer_ = nullptr;
  std::uint64_t max_bytes_;
  std::uint64_t content_bytes_ = 0;
  std::uint64_t dropped_ = 0;
  std::vector<std::string> written_directories_;
  EngineDownload* source_ = nullptr;
  std::string block_;
  std::exception_ptr pending_;
};

}  // namespace airlock::docker
