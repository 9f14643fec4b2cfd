#include "images/rootfs_writer.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "airlock/errors.hpp"

namespace airlock::images::detail {

namespace {

constexpr std::size_t kMaxDepth = 256;
constexpr std::size_t kMaxPathBytes = 4095;
constexpr std::size_t kMaxComponentBytes = 255;
constexpr std::uint32_t kKeptModeBits = 01777;  // setuid and setgid are stripped
constexpr std::string_view kWhiteoutPrefix = ".wh.";
constexpr std::string_view kOpaqueMarker = ".wh..wh..opq";

std::string join(const std::vector<std::string>& components, std::size_t count) {
  std::string path;
  for (std::size_t i = 0; i < count; ++i) {
    if (i != 0) path += '/';
    path += components[i];
  }
  return path;
}

std::string_view type_word(EntryType type) {
  switch (type) {
    case EntryType::regular:
      return "file";
    case EntryType::directory:
      return "directory";
    case EntryType::symlink:
      return "symlink";
    case EntryType::hardlink:
      return "hardlink";
    case EntryType::fifo:
      return "fifo";
    case EntryType::character_device:
      return "character device";
    case EntryType::block_device:
      return "block device";
    case EntryType::socket:
      return "socket";
  }
  return "file";
}

bool under(const std::string& path, const std::string& directory) {
  if (directory.empty()) return !path.empty();
  return path.size() > directory.size() && path.starts_with(directory) &&
         path[directory.size()] == '/';
}

// Every key strictly below `path` in a map ordered bytewise: ["path/", "path0"). The root ("")
// has everything else below it.
template <typename Map>
void erase_below(Map& map, const std::string& path) {
  if (path.empty()) {
    map.erase(map.upper_bound(std::string()), map.end());
    return;
  }
  map.erase(map.lower_bound(path + "/"), map.lower_bound(path + "0"));
}

}  // namespace

std::string quote_name(std::string_view name) {
  std::string out = "'";
  for (const char c : name.substr(0, 512)) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) {
      out += "\\x" + to_hex(std::string(1, c));
    } else {
      out.push_back(c);
    }
  }
  if (name.size() > 512) out += "…";
  return out + "'";
}

RootfsWriter::RootfsWriter(int rootfs_fd, const OwnershipMap& ownership,
                           const ExtractionLimits& limits, std::vector<std::string>& notes)
    : rootfs_fd_(rootfs_fd), ownership_(ownership), limits_(limits), notes_(notes) {
  manifest_[""] = Record{EntryType::directory, 0755, 0, 0, 0, {}};
  directories_[""] = DirectoryMetadata{0755, 0, 0, false, {}};
}

void RootfsWriter::refuse(std::string_view entry, const std::string& why,
                          const std::string& rule) const {
  throw InvalidArgument(
      "image import refused: entry " + quote_name(entry) + " " + why + " (rule: " + rule + ")",
      rule);
}

void RootfsWriter::begin_layer(bool whiteouts) {
  whiteouts_ = whiteouts;
  layer_paths_.clear();
}

std::vector<std::string> RootfsWriter::split_name(std::string_view name,
                                                  std::string_view rule_subject) const {
  if (name.starts_with('/')) refuse(rule_subject, "is an absolute path", "paths");
  if (name.size() > kMaxPathBytes) {
    refuse(rule_subject, "is longer than " + std::to_string(kMaxPathBytes) + " bytes", "paths");
  }
  std::vector<std::string> components;
  std::size_t start = 0;
  while (start <= name.size()) {
    const std::size_t end = std::min(name.find('/', start), name.size());
    const std::string_view component = name.substr(start, end - start);
    start = end + 1;
    if (component.empty() || component == ".") continue;
    if (component == "..") refuse(rule_subject, "has a '..' component", "paths");
    if (component.size() > kMaxComponentBytes) {
      refuse(rule_subject, "has a component longer than 255 bytes", "paths");
    }
    components.emplace_back(component);
  }
  if (components.size() > kMaxDepth) {
    refuse(rule_subject, "is nested deeper than " + std::to_string(kMaxDepth) + " directories",
           "paths");
  }
  return components;
}

void RootfsWriter::mark_in_layer(const std::vector<std::string>& components, std::size_t count) {
  std::string path;
  layer_paths_.insert(path);
  for (std::size_t i = 0; i < count; ++i) {
    if (i != 0) path += '/';
    path += components[i];
    layer_paths_.insert(path);
  }
}

RootfsWriter::Parent RootfsWriter::open_parent(const std::vector<std::string>& components,
                                               std::size_t count, std::string_view entry,
                                               bool create) {
  if (count == 0) return Parent{rootfs_fd_, true};
  const std::string path = join(components, count);
  if (cached_parent_fd_ && cached_parent_path_ == path)
    return Parent{cached_parent_fd_.get(), true};

  auto opened = base::openat2(rootfs_fd_, path.c_str(), O_PATH | O_DIRECTORY, kResolveStore);
  base::UniqueFd fd = std::move(opened.fd);
  if (!fd) {
    if (opened.error != ENOENT && opened.error != ELOOP && opened.error != ENOTDIR) {
      throw_errno("cannot open", path, opened.error);
    }
    // Walk one component at a time to say which one is wrong, creating what is missing.
    base::UniqueFd current;
    int at = rootfs_fd_;
    for (std::size_t i = 0; i < count; ++i) {
      const std::string prefix = join(components, i + 1);
      auto next = base::openat2(at, components[i].c_str(), O_PATH | O_DIRECTORY, kResolveStore);
      if (next.error == ENOENT) {
        if (!create) return Parent{};
        if (::mkdirat(at, components[i].c_str(), 0700) != 0) {
          throw_errno("cannot create directory", prefix);
        }
        manifest_[prefix] = Record{EntryType::directory, 0755, 0, 0, 0, {}};
        directories_[prefix] = DirectoryMetadata{0755, 0, 0, false, {}};
        next = base::openat2(at, components[i].c_str(), O_PATH | O_DIRECTORY, kResolveStore);
      }
      if (!next) {
        if (next.error == ELOOP) {
          refuse(entry, "would be written through the symbolic link " + quote_name(prefix),
                 "symlinks");
        }
        if (next.error == ENOTDIR) {
          refuse(entry, "needs " + quote_name(prefix) + " to be a directory, and it is not",
                 "paths");
        }
        throw_errno("cannot open", prefix, next.error);
      }
      current = std::move(next.fd);
      at = current.get();
    }
    fd = std::move(current);
  }
  cached_parent_path_ = path;
  cached_parent_fd_ = std::move(fd);
  return Parent{cached_parent_fd_.get(), true};
}

void RootfsWriter::forget_subtree(const std::string& path) {
  erase_below(manifest_, path);
  erase_below(directories_, path);
  if (!path.empty()) {
    manifest_.erase(path);
    directories_.erase(path);
  }
  // The cached descriptor may name a directory that is gone. (The parent of `path` itself stays
  // valid, which callers holding it rely on.)
  if (cached_parent_fd_ && (cached_parent_path_ == path || under(cached_parent_path_, path))) {
    cached_parent_fd_.reset();
    cached_parent_path_.clear();
  }
}

void RootfsWriter::clear_leaf(int parent_fd, const std::string& leaf, const std::string& path,
                              bool keep_directory, bool* kept_directory) {
  *kept_directory = false;
  struct stat st {};
  if (::fstatat(parent_fd, leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return;
    throw_errno("cannot inspect", path);
  }
  if (S_ISDIR(st.st_mode) && keep_directory) {
    *kept_directory = true;
    return;
  }
  remove_tree_at(parent_fd, leaf, path);
  forget_subtree(path);
}

void RootfsWriter::apply_owner(int fd, const char* leaf, const EntryHeader& header,
                               std::string_view path) {
  if (!ownership_.is_shifted()) return;
  const auto uid = static_cast<uid_t>(ownership_.base() + static_cast<std::uint32_t>(header.uid));
  const auto gid = static_cast<gid_t>(ownership_.base() + static_cast<std::uint32_t>(header.gid));
  const int result = leaf == nullptr ? ::fchown(fd, uid, gid)
                                     : ::fchownat(fd, leaf, uid, gid, AT_SYMLINK_NOFOLLOW);
  if (result != 0) throw_errno("cannot set the owner of", path);
}

void RootfsWriter::add(const EntryHeader& header, ContentSource* content) {
  if (++entries_seen_ > limits_.max_entries) {
    throw InvalidArgument("image import refused: more than " + std::to_string(limits_.max_entries) +
                              " entries (ceiling max_entries; a decompression bomb?)",
                          "max_entries");
  }
  const std::vector<std::string> components = split_name(header.name, header.name);

  if (whiteouts_ && !components.empty() && components.back().starts_with(kWhiteoutPrefix)) {
    std::vector<std::string> parent(components.begin(), components.end() - 1);
    if (components.back() == kOpaqueMarker) {
      apply_opaque(parent, header.name);
    } else {
      apply_whiteout(parent, components.back().substr(kWhiteoutPrefix.size()), header.name);
    }
    return;
  }

  if (header.uid < 0 || header.uid >= OwnershipMap::kGuestIdCount || header.gid < 0 ||
      header.gid >= OwnershipMap::kGuestIdCount) {
    refuse(header.name,
           "is owned by uid " + std::to_string(header.uid) + " gid " + std::to_string(header.gid) +
               ", outside the guest id range 0..65535",
           "ownership");
  }
  const std::string path = join(components, components.size());
  const auto uid = static_cast<std::uint32_t>(header.uid);
  const auto gid = static_cast<std::uint32_t>(header.gid);
  const std::uint32_t mode = header.mode & kKeptModeBits;

  if (header.type == EntryType::character_device || header.type == EntryType::block_device ||
      header.type == EntryType::socket) {
    if (header.type != EntryType::socket && limits_.device_nodes == DeviceNodePolicy::refuse) {
      refuse(header.name,
             "is a " + std::string(type_word(header.type)) +
                 " and device nodes are refused (device_nodes=refuse)",
             "device_nodes");
    }
    const std::string note =
        (path.empty() ? std::string(".") : path) + ": " + std::string(type_word(header.type)) +
        " skipped (" +
        (header.type == EntryType::socket ? "sockets are never stored" : "device_nodes=skip") + ")";
    spdlog::info("image import: {}", note);
    notes_.push_back(note);
    return;
  }

  if (components.empty()) {
    if (header.type != EntryType::directory) {
      refuse(header.name, "names the image root but is a " + std::string(type_word(header.type)),
             "paths");
    }
    manifest_[""] = Record{EntryType::directory, mode, uid, gid, 0, {}};
    directories_[""] = DirectoryMetadata{mode, uid, gid, header.has_mtime, header.mtime};
    return;
  }

  // A hard link's target must already be a regular file of this image: checked before the leaf
  // is touched, so a link cannot remove the file it names.
  std::string link_path;
  Record link_record{};
  if (header.type == EntryType::hardlink) {
    if (header.link_target.starts_with('/')) {
      refuse(header.name, "is a hard link to the absolute path " + quote_name(header.link_target),
             "hardlinks");
    }
    if (header.link_target == ".." || header.link_target.starts_with("../") ||
        header.link_target.find("/../") != std::string::npos ||
        header.link_target.ends_with("/..")) {
      refuse(header.name,
             "is a hard link to " + quote_name(header.link_target) + ", which leaves the image",
             "hardlinks");
    }
    const std::vector<std::string> target = split_name(header.link_target, header.name);
    link_path = join(target, target.size());
    const auto found = manifest_.find(link_path);
    if (target.empty() || found == manifest_.end()) {
      refuse(header.name,
             "is a hard link to " + quote_name(header.link_target) +
                 ", which is not (yet) in the image",
             "hardlinks");
    }
    if (found->second.type != EntryType::regular) {
      refuse(header.name,
             "is a hard link to " + quote_name(header.link_target) + ", a " +
                 std::string(type_word(found->second.type)) + ", not a regular file",
             "hardlinks");
    }
    if (link_path == path || under(link_path, path)) {
      refuse(header.name, "is a hard link to itself or to an entry below it", "hardlinks");
    }
    link_record = found->second;
  }
  if (header.type == EntryType::symlink) {
    if (header.link_target.empty())
      refuse(header.name, "is a symbolic link with no target", "paths");
    if (header.link_target.size() > kMaxPathBytes) {
      refuse(header.name, "is a symbolic link whose target is too long", "paths");
    }
  }

  const std::string& leaf = components.back();
  const Parent parent = open_parent(components, components.size() - 1, header.name, true);
  mark_in_layer(components, components.size());
  bool kept_directory = false;
  clear_leaf(parent.fd, leaf, path, header.type == EntryType::directory, &kept_directory);

  switch (header.type) {
    case EntryType::directory: {
      if (!kept_directory && ::mkdirat(parent.fd, leaf.c_str(), 0700) != 0) {
        throw_errno("cannot create directory", path);
      }
      manifest_[path] = Record{EntryType::directory, mode, uid, gid, 0, {}};
      directories_[path] = DirectoryMetadata{mode, uid, gid, header.has_mtime, header.mtime};
      return;
    }
    case EntryType::regular:
      write_regular(parent.fd, leaf, path, header, content);
      return;
    case EntryType::symlink: {
      if (::symlinkat(header.link_target.c_str(), parent.fd, leaf.c_str()) != 0) {
        throw_errno("cannot create symbolic link", path);
      }
      apply_owner(parent.fd, leaf.c_str(), header, path);
      if (header.has_mtime) {
        const timespec times[2] = {header.mtime, header.mtime};
        ::utimensat(parent.fd, leaf.c_str(), times, AT_SYMLINK_NOFOLLOW);
      }
      manifest_[path] = Record{EntryType::symlink, 0777, uid, gid, 0, header.link_target};
      return;
    }
    case EntryType::hardlink: {
      const std::vector<std::string> target = split_name(header.link_target, header.name);
      // Opened on its own, not through the cache, so `parent.fd` stays valid.
      base::UniqueFd target_parent =
          target.size() == 1 ? base::UniqueFd(::dup(rootfs_fd_))
                             : base::openat2(rootfs_fd_, join(target, target.size() - 1).c_str(),
                                             O_PATH | O_DIRECTORY, kResolveStore)
                                   .fd;
      if (!target_parent) {
        refuse(header.name, "is a hard link whose target cannot be reached without a link",
               "hardlinks");
      }
      if (::linkat(target_parent.get(), target.back().c_str(), parent.fd, leaf.c_str(), 0) != 0) {
        throw_errno("cannot create hard link", path);
      }
      manifest_[path] = link_record;
      return;
    }
    case EntryType::fifo: {
      if (::mknodat(parent.fd, leaf.c_str(), S_IFIFO | 0600, 0) != 0) {
        throw_errno("cannot create fifo", path);
      }
      apply_owner(parent.fd, leaf.c_str(), header, path);
      if (::fchmodat(parent.fd, leaf.c_str(), mode, 0) != 0) throw_errno("cannot chmod", path);
      if (header.has_mtime) {
        const timespec times[2] = {header.mtime, header.mtime};
        ::utimensat(parent.fd, leaf.c_str(), times, AT_SYMLINK_NOFOLLOW);
      }
      manifest_[path] = Record{EntryType::fifo, mode, uid, gid, 0, {}};
      return;
    }
    case EntryType::character_device:
    case EntryType::block_device:
    case EntryType::socket:
      return;  // handled above
  }
}

void RootfsWriter::write_regular(int parent_fd, const std::string& leaf, const std::string& path,
                                 const EntryHeader& header, ContentSource* content) {
  if (header.size > limits_.max_total_bytes - std::min(bytes_written_, limits_.max_total_bytes)) {
    throw InvalidArgument("image import refused: entry " + quote_name(header.name) + " (" +
                              std::to_string(header.size) + " bytes) would take the image past " +
                              std::to_string(limits_.max_total_bytes) +
                              " bytes (ceiling max_total_bytes; a decompression bomb?)",
                          "max_total_bytes");
  }
  base::UniqueFd fd(::openat(parent_fd, leaf.c_str(),
                             O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) throw_errno("cannot create", path);
  Sha256 digest;
  std::uint64_t position = 0;
  if (content != nullptr) {
    const void* data = nullptr;
    std::size_t size = 0;
    std::uint64_t offset = 0;
    while (content->next_block(&data, &size, &offset)) {
      if (offset < position) refuse(header.name, "has data blocks out of order", "entry_size");
      if (offset > header.size || size > header.size - offset) {
        refuse(header.name,
               "carries more data than its header declares (" + std::to_string(header.size) +
                   " bytes)",
               "entry_size");
      }
      digest.update_zeros(offset - position);
      const char* bytes = static_cast<const char*>(data);
      std::size_t left = size;
      std::uint64_t at = offset;
      while (left > 0) {
        const ssize_t written = ::pwrite(fd.get(), bytes, left, static_cast<off_t>(at));
        if (written < 0) {
          if (errno == EINTR) continue;
          throw_errno("cannot write", path);
        }
        bytes += written;
        left -= static_cast<std::size_t>(written);
        at += static_cast<std::uint64_t>(written);
      }
      digest.update(data, size);
      position = offset + size;
    }
  }
  if (position < header.size) {
    digest.update_zeros(header.size - position);
    if (::ftruncate(fd.get(), static_cast<off_t>(header.size)) != 0) {
      throw_errno("cannot size", path);
    }
  }
  bytes_written_ += header.size;
  apply_owner(fd.get(), nullptr, header, path);
  const std::uint32_t mode = header.mode & kKeptModeBits;
  if (::fchmod(fd.get(), mode) != 0) throw_errno("cannot chmod", path);
  if (header.has_mtime) {
    const timespec times[2] = {header.mtime, header.mtime};
    ::futimens(fd.get(), times);
  }
  manifest_[path] = Record{EntryType::regular,
                           mode,
                           static_cast<std::uint32_t>(header.uid),
                           static_cast<std::uint32_t>(header.gid),
                           header.size,
                           digest.finish_raw()};
}

void RootfsWriter::apply_whiteout(const std::vector<std::string>& parent, const std::string& leaf,
                                  std::string_view entry) {
  if (leaf.empty() || leaf == "." || leaf == "..") {
    refuse(entry, "is a whiteout that names no entry", "paths");
  }
  std::vector<std::string> target = parent;
  target.push_back(leaf);
  const std::string path = join(target, target.size());
  // A whiteout hides lower layers only; what this layer itself wrote stays. When this layer
  // already wrote the path or something below it (the layer lists the whiteout late), only the
  // lower-layer content below it goes.
  if (layer_paths_.contains(path)) {
    remove_lower_layer_content_below(path, entry);
    return;
  }
  const Parent at = open_parent(parent, parent.size(), entry, false);
  if (!at.found) return;
  bool kept = false;
  clear_leaf(at.fd, leaf, path, false, &kept);
}

void RootfsWriter::apply_opaque(const std::vector<std::string>& directory, std::string_view entry) {
  // The marker says the directory exists in this layer; lower-layer content below it goes.
  open_parent(directory, directory.size(), entry, true);
  mark_in_layer(directory, directory.size());
  remove_lower_layer_content_below(join(directory, directory.size()), entry);
}

void RootfsWriter::remove_lower_layer_content_below(const std::string& path,
                                                    std::string_view entry) {
  std::vector<std::string> doomed;
  for (const auto& [candidate, record] : manifest_) {
    if (!under(candidate, path)) continue;
    if (!doomed.empty() && under(candidate, doomed.back())) continue;
    // Ancestors of this layer's entries are in layer_paths_, so removing a path that is not
    // there never takes this layer's content with it.
    if (!layer_paths_.contains(candidate)) doomed.push_back(candidate);
  }
  for (const auto& victim : doomed) {
    const std::vector<std::string> components = split_name(victim, entry);
    const Parent at = open_parent(components, components.size() - 1, entry, false);
    if (!at.found) continue;
    bool kept = false;
    clear_leaf(at.fd, components.back(), victim, false, &kept);
  }
}

TreeSummary RootfsWriter::finish() {
  cached_parent_fd_.reset();
  // Deepest first, so a directory made read-only does not stop its children being fixed.
  for (auto it = directories_.rbegin(); it != directories_.rend(); ++it) {
    const auto& [path, metadata] = *it;
    base::UniqueFd fd;
    if (path.empty()) {
      fd.reset(::dup(rootfs_fd_));
      if (!fd) throw_errno("cannot reopen directory", ".");
    } else {
      auto opened = base::openat2(rootfs_fd_, path.c_str(), O_RDONLY | O_DIRECTORY, kResolveStore);
      if (!opened) throw_errno("cannot reopen directory", path, opened.error);
      fd = std::move(opened.fd);
    }
    if (ownership_.is_shifted()) {
      const auto uid = static_cast<uid_t>(ownership_.base() + metadata.uid);
      const auto gid = static_cast<gid_t>(ownership_.base() + metadata.gid);
      if (::fchown(fd.get(), uid, gid) != 0) throw_errno("cannot set the owner of", path);
    }
    if (::fchmod(fd.get(), metadata.mode) != 0) throw_errno("cannot chmod", path);
    if (metadata.has_mtime) {
      const timespec times[2] = {metadata.mtime, metadata.mtime};
      ::futimens(fd.get(), times);
    }
  }

  // The canonical manifest: length-prefixed fields so no two trees share an encoding.
  Sha256 digest;
  TreeSummary summary;
  for (const auto& [path, record] : manifest_) {
    const std::string shown = path.empty() ? "." : path;
    const std::string content =
        record.type == EntryType::regular ? to_hex(record.content) : record.content;
    std::string line = std::to_string(shown.size()) + ":" + shown + " " +
                       std::string(type_word(record.type)) + " " + std::to_string(record.mode) +
                       " " + std::to_string(record.uid) + " " + std::to_string(record.gid) + " " +
                       std::to_string(record.size) + " " + std::to_string(content.size()) + ":" +
                       content + "\n";
    digest.update(line);
    ++summary.entries;
    if (record.type == EntryType::regular) summary.bytes += record.size;
  }
  summary.id = "sha256:" + digest.finish_hex();
  return summary;
}

}  // namespace airlock::images::detail
