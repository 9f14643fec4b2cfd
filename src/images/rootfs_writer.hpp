// Applies a stream of archive entries to a new root filesystem, treating every entry as hostile.
//
// Every source (a tar, an OCI layer, a host directory) is turned into EntryHeaders and fed here,
// so the rules of images.hpp ("Hostile input") live in exactly one place. Writes happen only
// through descriptors opened beneath the rootfs with base::openat2(); names are checked lexically
// first so a refusal can say which rule the entry broke.
#pragma once

#include <time.h>

#include <cstdint>
#include <map>
#include <string>
#include <unordered_set>
#include <vector>

#include "airlock/images.hpp"
#include "images/fs.hpp"

namespace airlock::images::detail {

enum class EntryType : std::uint8_t {
  regular,
  directory,
  symlink,
  hardlink,
  fifo,
  character_device,
  block_device,
  socket
};

struct EntryHeader {
  std::string name;  // as the source spells it ("./usr/bin/", "etc/passwd")
  EntryType type = EntryType::regular;
  std::uint32_t mode = 0;  // permission bits, 07777
  std::int64_t uid = 0;    // guest ids, checked against 0..65535
  std::int64_t gid = 0;
  std::uint64_t size = 0;   // regular files
  std::string link_target;  // symlink target, or the archive name a hard link points at
  bool has_mtime = false;
  timespec mtime{};
};

// A regular file's bytes as blocks at non-decreasing offsets (gaps are holes). Returns false at
// the end. May throw.
class ContentSource {
 public:
  virtual ~ContentSource() = default;
  virtual bool next_block(const void** data, std::size_t* size, std::uint64_t* offset) = 0;
};

struct TreeSummary {
  std::string id;  // "sha256:<hex>"
  std::uint64_t entries = 0;
  std::uint64_t bytes = 0;
};

// Quotes an archive-supplied string for a message, escaping control bytes.
std::string quote_name(std::string_view name);

class RootfsWriter {
 public:
  // `rootfs_fd` is an open directory (not owned) that must stay open until finish().
  RootfsWriter(int rootfs_fd, const OwnershipMap& ownership, const ExtractionLimits& limits,
               std::vector<std::string>& notes);

  // Starts the next layer. With `whiteouts`, `.wh.` names in it follow the OCI layer rules.
  void begin_layer(bool whiteouts);
  // `content` supplies the bytes of a regular file; it may be null for other types.
  void add(const EntryHeader& header, ContentSource* content);
  // Applies the deferred directory metadata and returns the tree's id.
  TreeSummary finish();

 private:
  struct Record {
    EntryType type;
    std::uint32_t mode;
    std::uint32_t uid;
    std::uint32_t gid;
    std::uint64_t size;
    std::string content;  // raw SHA-256 of a regular file, or a symlink's target
  };
  struct DirectoryMetadata {
    std::uint32_t mode;
    std::uint32_t uid;
    std::uint32_t gid;
    bool has_mtime;
    timespec mtime;
  };
  // A parent directory descriptor: the rootfs itself or an owned descriptor.
  struct Parent {
    int fd = -1;
    bool found = false;
  };

  std::vector<std::string> split_name(std::string_view name, std::string_view rule_subject) const;
  Parent open_parent(const std::vector<std::string>& components, std::size_t count,
                     std::string_view entry, bool create);
  void mark_in_layer(const std::vector<std::string>& components, std::size_t count);
  void clear_leaf(int parent_fd, const std::string& leaf, const std::string& path,
                  bool keep_directory, bool* kept_directory);
  void forget_subtree(const std::string& path);
  void write_regular(int parent_fd, const std::string& leaf, const std::string& path,
                     const EntryHeader& header, ContentSource* content);
  void apply_whiteout(const std::vector<std::string>& parent, const std::string& leaf,
                      std::string_view entry);
  void apply_opaque(const std::vector<std::string>& directory, std::string_view entry);
  // Removes everything below `path` that the current layer did not write.
  void remove_lower_layer_content_below(const std::string& path, std::string_view entry);
  void apply_owner(int fd, const char* leaf, const EntryHeader& header, std::string_view path);
  [[noreturn]] void refuse(std::string_view entry, const std::string& why,
                           const std::string& rule) const;

  int rootfs_fd_;
  OwnershipMap ownership_;
  ExtractionLimits limits_;
  std::vector<std::string>& notes_;
  bool whiteouts_ = false;
  std::uint64_t entries_seen_ = 0;
  std::uint64_t bytes_written_ = 0;
  std::map<std::string, Record> manifest_;                // "" is the root
  std::map<std::string, DirectoryMetadata> directories_;  // applied at finish(), deepest first
  std::unordered_set<std::string> layer_paths_;           // created in this layer (+ ancestors)
  std::string cached_parent_path_;
  base::UniqueFd cached_parent_fd_;
};

}  // namespace airlock::images::detail
