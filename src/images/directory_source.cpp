// A host directory as a stream of entries. The walk holds one directory descriptor at a time and
// reopens each subdirectory beneath the source with no link followed, so a link planted in the
// source while it is read cannot pull a host file into the image.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <utility>

#include "airlock/errors.hpp"
#include "images/sources.hpp"

namespace airlock::images::detail {

namespace {

class FileContent final : public ContentSource {
 public:
  FileContent(int fd, std::uint64_t expected, std::string path)
      : fd_(fd), expected_(expected), path_(std::move(path)) {}

  bool next_block(const void** data, std::size_t* size, std::uint64_t* offset) override {
    for (;;) {
      const ssize_t got = ::read(fd_, buffer_, sizeof buffer_);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) throw_errno("cannot read", path_);
      if (got == 0) {
        if (position_ != expected_) changed();
        return false;
      }
      if (static_cast<std::uint64_t>(got) > expected_ - position_) changed();
      *data = buffer_;
      *size = static_cast<std::size_t>(got);
      *offset = position_;
      position_ += static_cast<std::uint64_t>(got);
      return true;
    }
  }

 private:
  [[noreturn]] void changed() const {
    throw InvalidArgument("image import refused: '" + path_ + "' changed size while it was read",
                          "source");
  }
  int fd_;
  std::uint64_t expected_;
  std::uint64_t position_ = 0;
  std::string path_;
  char buffer_[1 << 16];
};

struct Walk {
  int root_fd;
  const std::filesystem::path& source;
  RootfsWriter& writer;
  std::map<std::pair<dev_t, ino_t>, std::string> first_links;
};

EntryHeader header_for(const std::string& relative, const struct stat& st) {
  EntryHeader header;
  header.name = relative.empty() ? "." : relative;
  header.mode = st.st_mode & 07777;
  header.uid = st.st_uid;
  header.gid = st.st_gid;
  header.has_mtime = true;
  header.mtime = st.st_mtim;
  return header;
}

void walk_directory(Walk& walk, const std::string& relative) {
  const std::string shown = (walk.source / relative).string();
  base::UniqueFd directory;
  if (relative.empty()) {
    directory.reset(::dup(walk.root_fd));
    if (!directory) throw_errno("cannot open", shown);
  } else {
    auto opened =
        base::openat2(walk.root_fd, relative.c_str(), O_RDONLY | O_DIRECTORY, kResolveStore);
    if (!opened) throw_errno("cannot open", shown, opened.error);
    directory = std::move(opened.fd);
  }
  std::vector<std::string> names;
  {
    const int listing = ::dup(directory.get());
    DIR* dir = listing < 0 ? nullptr : ::fdopendir(listing);
    if (dir == nullptr) {
      if (listing >= 0) ::close(listing);
      throw_errno("cannot list", shown);
    }
    errno = 0;
    while (const dirent* entry = ::readdir(dir)) {
      const std::string_view name(entry->d_name);
      if (name != "." && name != "..") names.emplace_back(name);
    }
    const int error = errno;
    ::closedir(dir);
    if (error != 0) throw_errno("cannot list", shown, error);
  }
  std::sort(names.begin(), names.end());

  std::vector<std::string> subdirectories;
  for (const auto& name : names) {
    const std::string child = relative.empty() ? name : relative + "/" + name;
    const std::string child_shown = (walk.source / child).string();
    struct stat st {};
    if (::fstatat(directory.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      throw_errno("cannot inspect", child_shown);
    }
    EntryHeader header = header_for(child, st);
    if (S_ISDIR(st.st_mode)) {
      header.type = EntryType::directory;
      walk.writer.add(header, nullptr);
      subdirectories.push_back(child);
    } else if (S_ISLNK(st.st_mode)) {
      header.type = EntryType::symlink;
      std::string target(static_cast<std::size_t>(st.st_size) + 1, '\0');
      const ssize_t length =
          ::readlinkat(directory.get(), name.c_str(), target.data(), target.size());
      if (length < 0) throw_errno("cannot read link", child_shown);
      if (static_cast<std::size_t>(length) >= target.size()) {
        throw InvalidArgument(
            "image import refused: '" + child_shown + "' changed while it was read", "source");
      }
      target.resize(static_cast<std::size_t>(length));
      header.link_target = std::move(target);
      walk.writer.add(header, nullptr);
    } else if (S_ISREG(st.st_mode)) {
      if (st.st_nlink > 1) {
        const auto key = std::make_pair(st.st_dev, st.st_ino);
        const auto found = walk.first_links.find(key);
        if (found != walk.first_links.end()) {
          header.type = EntryType::hardlink;
          header.link_target = found->second;
          walk.writer.add(header, nullptr);
          continue;
        }
        walk.first_links.emplace(key, child);
      }
      header.type = EntryType::regular;
      header.size = static_cast<std::uint64_t>(st.st_size);
      base::UniqueFd file(
          ::openat(directory.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
      if (!file) throw_errno("cannot open", child_shown);
      struct stat opened {};
      if (::fstat(file.get(), &opened) != 0 || opened.st_ino != st.st_ino ||
          opened.st_dev != st.st_dev) {
        throw InvalidArgument(
            "image import refused: '" + child_shown + "' was replaced while it was read", "source");
      }
      FileContent content(file.get(), header.size, child_shown);
      walk.writer.add(header, &content);
    } else if (S_ISFIFO(st.st_mode)) {
      header.type = EntryType::fifo;
      walk.writer.add(header, nullptr);
    } else if (S_ISCHR(st.st_mode)) {
      header.type = EntryType::character_device;
      walk.writer.add(header, nullptr);
    } else if (S_ISBLK(st.st_mode)) {
      header.type = EntryType::block_device;
      walk.writer.add(header, nullptr);
    } else {
      header.type = EntryType::socket;
      walk.writer.add(header, nullptr);
    }
  }
  directory.reset();
  for (const auto& subdirectory : subdirectories) walk_directory(walk, subdirectory);
}

}  // namespace

void read_directory(const std::filesystem::path& source, RootfsWriter& writer) {
  base::UniqueFd root(::open(source.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!root) throw_errno("cannot open the directory", source.string());
  struct stat st {};
  if (::fstat(root.get(), &st) != 0) throw_errno("cannot inspect", source.string());
  EntryHeader header = header_for("", st);
  header.type = EntryType::directory;
  writer.add(header, nullptr);
  Walk walk{root.get(), source, writer, {}};
  walk_directory(walk, "");
}

}  // namespace airlock::images::detail
