#include "backends/linux/snapshot_stream.hpp"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>

#include "base/openat2.hpp"
#include "base/unique_fd.hpp"

namespace airlock::linux_backend::snapshot_stream {
namespace {

constexpr char kMagic[] = "ALSNAP01";
constexpr std::size_t kMagicBytes = 8;
constexpr std::size_t kFlushAt = 64 * 1024;
constexpr const char* kOpaque = "trusted.overlay.opaque";

void put_u16(std::string& out, std::uint16_t value) {
  out.push_back(static_cast<char>(value & 0xff));
  out.push_back(static_cast<char>(value >> 8));
}
void put_u32(std::string& out, std::uint32_t value) {
  for (int shift = 0; shift < 32; shift += 8) out.push_back(static_cast<char>(value >> shift));
}
void put_u64(std::string& out, std::uint64_t value) {
  for (int shift = 0; shift < 64; shift += 8) out.push_back(static_cast<char>(value >> shift));
}
void put_name(std::string& out, const std::string& name) {
  put_u16(out, static_cast<std::uint16_t>(name.size()));
  out += name;
}

std::string join(const std::string& where, const std::string& name) {
  return where.empty() ? name : where + "/" + name;
}

bool fail(Outcome& outcome, int error, std::string what) {
  outcome.error = error == 0 ? EIO : error;
  outcome.what = std::move(what);
  return false;
}

// One path component a stream may name: 1..255 bytes, no '/', no NUL, not "." or "..".
bool valid_name(const std::string& name) {
  return !name.empty() && name.size() <= NAME_MAX && name != "." && name != ".." &&
         name.find('/') == std::string::npos && name.find('\0') == std::string::npos;
}

// What the capture keeps of an extended attribute: the overlay's opaque marker and user.*.
// Overlay attributes that change what a file's content *is* stop the capture.
enum class XattrFate { keep, drop, refuse };
XattrFate xattr_fate(const std::string& name) {
  if (name == kOpaque) return XattrFate::keep;
  if (name == "trusted.overlay.redirect" || name == "trusted.overlay.metacopy") {
    return XattrFate::refuse;
  }
  if (name.rfind("user.", 0) == 0 && name.size() > 5) return XattrFate::keep;
  return XattrFate::drop;
}

}  // namespace

// ---- capture ----

Writer::Writer(int out, IdRange ids, std::uint64_t max_bytes)
    : out_(out), ids_(ids), max_bytes_(max_bytes) {}

bool Writer::flush(Outcome& outcome) {
  std::size_t done = 0;
  while (done < buffer_.size()) {
    const ssize_t wrote = ::write(out_, buffer_.data() + done, buffer_.size() - done);
    if (wrote < 0) {
      if (errno == EINTR) continue;
      return fail(outcome, errno, "write the snapshot");
    }
    done += static_cast<std::size_t>(wrote);
  }
  buffer_.clear();
  return true;
}

bool Writer::put(const std::string& bytes, Outcome& outcome) {
  if (written_ + bytes.size() > max_bytes_) {
    return fail(outcome, EFBIG, "the snapshot would be larger than the sandbox's storage");
  }
  buffer_ += bytes;
  written_ += bytes.size();
  return buffer_.size() < kFlushAt || flush(outcome);
}

Outcome Writer::start() {
  Outcome outcome;
  put(std::string(kMagic, kMagicBytes), outcome);
  outcome.stream_bytes = written_;
  return outcome;
}

// mode, owner (as guest ids), mtime and — for directories and files, through their descriptor
// — the kept extended attributes.
bool Writer::attributes(std::string& record, const struct ::stat& info, int fd,
                        Outcome& outcome, const std::string& where) {
  const auto guest = [&](std::uint32_t host) {
    const std::uint64_t offset = static_cast<std::uint64_t>(host) - ids_.base;
    return host >= ids_.base && offset < ids_.count ? static_cast<std::uint32_t>(offset)
                                                    : kUnmapped;
  };
  const std::uint32_t uid = guest(info.st_uid);
  const std::uint32_t gid = guest(info.st_gid);
  std::uint32_t mode = info.st_mode & 07777;
  // A host user's file (an overlay's copy-up of a rootfs directory's file) is nobody's in the
  // sandbox: it keeps no set-id bit.
  if (uid == kUnmapped || gid == kUnmapped) mode &= 0777;
  put_u32(record, mode);
  put_u32(record, uid);
  put_u32(record, gid);
  put_u64(record, static_cast<std::uint64_t>(info.st_mtim.tv_sec));
  put_u32(record, static_cast<std::uint32_t>(info.st_mtim.tv_nsec));
  std::vector<std::pair<std::string, std::string>> kept;
  if (fd >= 0) {
    std::string names;
    for (;;) {
      const ssize_t size = ::flistxattr(fd, nullptr, 0);
      if (size < 0) {
        if (errno == ENOTSUP) break;
        return fail(outcome, errno, "list the attributes of " + where);
      }
      names.assign(static_cast<std::size_t>(size), '\0');
      const ssize_t got = size == 0 ? 0 : ::flistxattr(fd, names.data(), names.size());
      if (got < 0 && errno == ERANGE) continue;
      if (got < 0) return fail(outcome, errno, "list the attributes of " + where);
      names.resize(static_cast<std::size_t>(got));
      break;
    }
    std::size_t start = 0;
    while (start < names.size()) {
      const std::size_t end = names.find('\0', start);
      const std::string name = names.substr(start, end - start);
      start = end == std::string::npos ? names.size() : end + 1;
      if (name.empty()) continue;
      switch (xattr_fate(name)) {
        case XattrFate::refuse:
          return fail(outcome, EOPNOTSUPP,
                      where + " carries " + name +
                          ", an overlay feature whose files the snapshot cannot copy");
        case XattrFate::drop:
          ++counts_.dropped_xattrs;
          continue;
        case XattrFate::keep:
          break;
      }
      std::string value(kMaxXattrValue, '\0');
      const ssize_t length = ::fgetxattr(fd, name.c_str(), value.data(), value.size());
      if (length < 0 || kept.size() >= kMaxXattrsPerEntry || name.size() > 255) {
        ++counts_.dropped_xattrs;  // larger than any kept attribute may be, or gone
        continue;
      }
      value.resize(static_cast<std::size_t>(length));
      kept.emplace_back(name, std::move(value));
    }
  }
  put_u16(record, static_cast<std::uint16_t>(kept.size()));
  for (const auto& [name, value] : kept) {
    put_name(record, name);
    put_u32(record, static_cast<std::uint32_t>(value.size()));
    record += value;
  }
  return true;
}

Outcome Writer::section(const std::string& name, int source) {
  Outcome outcome;
  base::UniqueFd directory(
      ::openat(source, ".", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct ::stat info {};
  if (!directory || ::fstat(directory.get(), &info) != 0) {
    fail(outcome, errno, "open " + name);
    return outcome;
  }
  std::string record("S");
  put_name(record, name);
  if (attributes(record, info, directory.get(), outcome, name) && put(record, outcome) &&
      walk(directory.get(), info.st_dev, 1, name, outcome)) {
    put("E", outcome);
  }
  outcome.counts = counts_;
  outcome.stream_bytes = written_;
  return outcome;
}

Outcome Writer::finish() {
  Outcome outcome;
  if (put("Z", outcome)) flush(outcome);
  outcome.counts = counts_;
  outcome.stream_bytes = written_;
  return outcome;
}

bool Writer::walk(int directory, unsigned long device, std::uint32_t depth,
                  const std::string& where, Outcome& outcome) {
  if (depth > kMaxDepth) {
    return fail(outcome, ELOOP,
                where + " is more than " + std::to_string(kMaxDepth) + " directories deep");
  }
  // The names first (sorted: the same tree makes the same stream), then each one by itself.
  std::vector<std::string> names;
  {
    const int listed = ::openat(directory, ".", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (listed < 0) return fail(outcome, errno, "list " + where);
    DIR* stream = ::fdopendir(listed);
    if (stream == nullptr) {
      const int error = errno;
      ::close(listed);
      return fail(outcome, error, "list " + where);
    }
    errno = 0;
    while (const struct dirent* item = ::readdir(stream)) {
      const std::string name = item->d_name;
      if (name != "." && name != "..") names.push_back(name);
      errno = 0;
    }
    const int error = errno;
    ::closedir(stream);
    if (error != 0) return fail(outcome, error, "list " + where);
  }
  std::sort(names.begin(), names.end());
  for (const auto& name : names) {
    if (!entry(directory, name, device, depth, where, outcome)) return false;
  }
  return true;
}

bool Writer::entry(int directory, const std::string& name, unsigned long device,
                   std::uint32_t depth, const std::string& where, Outcome& outcome) {
  const std::string path = join(where, name);
  struct ::stat seen {};
  if (::fstatat(directory, name.c_str(), &seen, AT_SYMLINK_NOFOLLOW) != 0) {
    return fail(outcome, errno, "stat " + path);
  }
  // What was opened must be what was looked at: same inode, same type.
  const auto same = [&](const struct ::stat& opened) {
    return opened.st_ino == seen.st_ino && opened.st_dev == seen.st_dev &&
           (opened.st_mode & S_IFMT) == (seen.st_mode & S_IFMT);
  };
  std::string record;
  switch (seen.st_mode & S_IFMT) {
    case S_IFDIR: {
      if (seen.st_dev != device) {
        return fail(outcome, EXDEV, path + " is on another file system than the storage");
      }
      base::UniqueFd child(::openat(directory, name.c_str(),
                                    O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      struct ::stat opened {};
      if (!child || ::fstat(child.get(), &opened) != 0) return fail(outcome, errno, "open " + path);
      if (!same(opened)) return fail(outcome, EAGAIN, path + " changed while it was captured");
      record = "D";
      put_name(record, name);
      if (!attributes(record, opened, child.get(), outcome, path) || !put(record, outcome)) {
        return false;
      }
      ++counts_.directories;
      return walk(child.get(), device, depth + 1, path, outcome) && put("E", outcome);
    }
    case S_IFREG: {
      // O_NONBLOCK: had the name become a FIFO, opening it would not wait for a writer (and
      // the type check below refuses it).
      base::UniqueFd file(::openat(directory, name.c_str(),
                                   O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
      struct ::stat opened {};
      if (!file || ::fstat(file.get(), &opened) != 0) return fail(outcome, errno, "open " + path);
      if (!same(opened)) return fail(outcome, EAGAIN, path + " changed while it was captured");
      if (opened.st_nlink > 1) {
        const auto known = links_.find(static_cast<std::uint64_t>(opened.st_ino));
        if (known != links_.end()) {
          record = "H";
          put_name(record, name);
          put_u32(record, known->second);
          ++counts_.hard_links;
          return put(record, outcome);
        }
      }
      std::uint32_t link = 0;
      if (opened.st_nlink > 1) {
        link = next_link_++;
        links_.emplace(static_cast<std::uint64_t>(opened.st_ino), link);
      }
      const auto size = static_cast<std::uint64_t>(opened.st_size);
      record = "F";
      put_name(record, name);
      if (!attributes(record, opened, file.get(), outcome, path)) return false;
      put_u32(record, link);
      put_u64(record, size);
      if (!put(record, outcome)) return false;
      if (written_ + size > max_bytes_) {
        return fail(outcome, EFBIG, "the snapshot would be larger than the sandbox's storage");
      }
      if (!flush(outcome)) return false;
      std::uint64_t left = size;
      while (left > 0) {
        const ssize_t sent = ::sendfile(out_, file.get(), nullptr,
                                        static_cast<std::size_t>(std::min<std::uint64_t>(
                                            left, std::uint64_t{1} << 30)));
        if (sent < 0 && errno == EINTR) continue;
        if (sent < 0) return fail(outcome, errno, "copy " + path);
        if (sent == 0) return fail(outcome, EAGAIN, path + " shrank while it was captured");
        left -= static_cast<std::uint64_t>(sent);
      }
      written_ += size;
      ++counts_.files;
      counts_.data_bytes += size;
      return true;
    }
    case S_IFLNK: {
      std::string target(PATH_MAX, '\0');
      const ssize_t length = ::readlinkat(directory, name.c_str(), target.data(), target.size());
      if (length < 0) return fail(outcome, errno, "read the link " + path);
      if (static_cast<std::size_t>(length) >= target.size()) {
        return fail(outcome, ENAMETOOLONG, "the link " + path + " is too long");
      }
      target.resize(static_cast<std::size_t>(length));
      record = "L";
      put_name(record, name);
      if (!attributes(record, seen, -1, outcome, path)) return false;
      put_u32(record, static_cast<std::uint32_t>(target.size()));
      record += target;
      ++counts_.symlinks;
      return put(record, outcome);
    }
    case S_IFCHR:
      if (seen.st_rdev != 0) break;  // a device: dropped below
      record = "W";  // an overlay whiteout
      put_name(record, name);
      if (!attributes(record, seen, -1, outcome, path)) return false;
      ++counts_.whiteouts;
      return put(record, outcome);
    case S_IFIFO:
      record = "P";
      put_name(record, name);
      if (!attributes(record, seen, -1, outcome, path)) return false;
      ++counts_.fifos;
      return put(record, outcome);
    case S_IFSOCK:
      ++counts_.dropped_sockets;
      return true;
    default:
      break;
  }
  ++counts_.dropped_devices;
  return true;
}

// ---- restore ----

namespace {

class Reader {
 public:
  explicit Reader(int in) : in_(in) {}

  bool bytes(void* into, std::size_t count) {
    auto* out = static_cast<char*>(into);
    while (count > 0) {
      if (position_ == filled_ && !refill()) return false;
      const std::size_t take = std::min(count, filled_ - position_);
      std::memcpy(out, buffer_ + position_, take);
      position_ += take;
      out += take;
      count -= take;
    }
    return true;
  }
  bool u8(std::uint8_t& value) { return bytes(&value, 1); }
  bool u16(std::uint16_t& value) {
    unsigned char raw[2];
    if (!bytes(raw, 2)) return false;
    value = static_cast<std::uint16_t>(raw[0] | (raw[1] << 8));
    return true;
  }
  bool u32(std::uint32_t& value) {
    unsigned char raw[4];
    if (!bytes(raw, 4)) return false;
    value = 0;
    for (int i = 3; i >= 0; --i) value = (value << 8) | raw[i];
    return true;
  }
  bool u64(std::uint64_t& value) {
    unsigned char raw[8];
    if (!bytes(raw, 8)) return false;
    value = 0;
    for (int i = 7; i >= 0; --i) value = (value << 8) | raw[i];
    return true;
  }
  bool string(std::string& value, std::size_t length) {
    value.assign(length, '\0');
    return length == 0 || bytes(value.data(), length);
  }
  bool name(std::string& value) {
    std::uint16_t length = 0;
    return u16(length) && length <= NAME_MAX && string(value, length);
  }
  // Copies `count` bytes of the stream into `out`.
  bool copy(int out, std::uint64_t count) {
    while (count > 0) {
      if (position_ == filled_ && !refill()) return false;
      const std::size_t take =
          static_cast<std::size_t>(std::min<std::uint64_t>(count, filled_ - position_));
      std::size_t done = 0;
      while (done < take) {
        const ssize_t wrote = ::write(out, buffer_ + position_ + done, take - done);
        if (wrote < 0 && errno == EINTR) continue;
        if (wrote <= 0) {
          error_ = wrote < 0 ? errno : EIO;
          return false;
        }
        done += static_cast<std::size_t>(wrote);
      }
      position_ += take;
      count -= take;
    }
    return true;
  }
  int error() const { return error_ == 0 ? EPROTO : error_; }

 private:
  // Reads the next buffer's worth; an end of the stream here is a truncated stream (EPROTO).
  bool refill() {
    ssize_t got;
    do {
      got = ::read(in_, buffer_, sizeof buffer_);
    } while (got < 0 && errno == EINTR);
    if (got <= 0) {
      error_ = got < 0 ? errno : EPROTO;
      return false;
    }
    position_ = 0;
    filled_ = static_cast<std::size_t>(got);
    return true;
  }

  int in_;
  char buffer_[256 * 1024];
  std::size_t position_ = 0;
  std::size_t filled_ = 0;
  int error_ = 0;
};

struct Attributes {
  std::uint32_t mode = 0;
  std::uint32_t uid = 0;
  std::uint32_t gid = 0;
  struct timespec times[2] {};
  std::vector<std::pair<std::string, std::string>> xattrs;
};

class Restorer {
 public:
  Restorer(Reader& reader, IdRange ids) : reader_(reader), ids_(ids) {}

  bool attributes(Attributes& attributes, bool with_xattrs, const std::string& where) {
    std::uint64_t seconds = 0;
    std::uint32_t nanoseconds = 0;
    std::uint16_t count = 0;
    if (!reader_.u32(attributes.mode) || !reader_.u32(attributes.uid) ||
        !reader_.u32(attributes.gid) || !reader_.u64(seconds) || !reader_.u32(nanoseconds) ||
        !reader_.u16(count)) {
      return truncated(where);
    }
    if ((attributes.mode & ~07777u) != 0 || nanoseconds >= 1'000'000'000u) {
      return malformed(where + ": impossible attributes");
    }
    attributes.times[0].tv_nsec = UTIME_OMIT;
    attributes.times[1].tv_sec = static_cast<time_t>(seconds);
    attributes.times[1].tv_nsec = nanoseconds;
    if (!host_id(attributes.uid, where) || !host_id(attributes.gid, where)) return false;
    if (attributes.uid == kNobody || attributes.gid == kNobody) attributes.mode &= 0777;
    if (count > kMaxXattrsPerEntry || (count != 0 && !with_xattrs)) {
      return malformed(where + ": attributes where none may be");
    }
    for (std::uint16_t i = 0; i < count; ++i) {
      std::string name;
      std::string value;
      std::uint32_t length = 0;
      if (!reader_.name(name) || !reader_.u32(length) || length > kMaxXattrValue ||
          !reader_.string(value, length)) {
        return truncated(where);
      }
      if (xattr_fate(name) != XattrFate::keep) {
        return malformed(where + ": the attribute " + name + " is never restored");
      }
      attributes.xattrs.emplace_back(std::move(name), std::move(value));
    }
    return true;
  }

  // Owner, mode, attributes and mtime of something made through `fd` (a file or directory).
  bool apply(int fd, const Attributes& attributes, const std::string& where) {
    if (::fchown(fd, attributes.uid, attributes.gid) != 0) return failed(errno, "chown " + where);
    if (::fchmod(fd, attributes.mode) != 0) return failed(errno, "chmod " + where);
    for (const auto& [name, value] : attributes.xattrs) {
      if (::fsetxattr(fd, name.c_str(), value.data(), value.size(), 0) != 0) {
        return failed(errno, "set " + name + " on " + where);
      }
    }
    if (::futimens(fd, attributes.times) != 0) return failed(errno, "set the time of " + where);
    return true;
  }

  // The same for a link, a whiteout or a FIFO just made as `name` in `directory`.
  bool apply_at(int directory, const std::string& name, const Attributes& attributes,
                bool set_mode, const std::string& where) {
    if (::fchownat(directory, name.c_str(), attributes.uid, attributes.gid,
                   AT_SYMLINK_NOFOLLOW) != 0) {
      return failed(errno, "chown " + where);
    }
    if (set_mode) {
      // Made by this restore an instant ago (mknodat refuses an existing name): no link.
      struct ::stat info {};
      if (::fstatat(directory, name.c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0 ||
          S_ISLNK(info.st_mode) || ::fchmodat(directory, name.c_str(), attributes.mode, 0) != 0) {
        return failed(errno == 0 ? EIO : errno, "chmod " + where);
      }
    }
    if (::utimensat(directory, name.c_str(), attributes.times, AT_SYMLINK_NOFOLLOW) != 0) {
      return failed(errno, "set the time of " + where);
    }
    return true;
  }

  // The entries of one directory, up to its 'E'.
  bool entries(int directory, std::uint32_t depth, const std::string& where, int section,
               const std::string& relative) {
    if (depth > kMaxDepth) return malformed(where + " is too deep");
    for (;;) {
      std::uint8_t kind = 0;
      if (!reader_.u8(kind)) return truncated(where);
      if (kind == 'E') return true;
      std::string name;
      if (!reader_.name(name)) return truncated(where);
      if (!valid_name(name)) return malformed(where + ": an entry named '" + name + "'");
      const std::string path = join(where, name);
      const std::string inner = relative.empty() ? name : relative + "/" + name;
      switch (kind) {
        case 'D': {
          Attributes attributes;
          if (!this->attributes(attributes, true, path)) return false;
          if (::mkdirat(directory, name.c_str(), 0700) != 0) return failed(errno, "mkdir " + path);
          base::UniqueFd child(::openat(directory, name.c_str(),
                                        O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
          if (!child) return failed(errno, "open " + path);
          if (!entries(child.get(), depth + 1, path, section, inner)) return false;
          if (!apply(child.get(), attributes, path)) return false;
          ++counts.directories;
          break;
        }
        case 'F': {
          Attributes attributes;
          std::uint32_t link = 0;
          std::uint64_t size = 0;
          if (!this->attributes(attributes, true, path)) return false;
          if (!reader_.u32(link) || !reader_.u64(size)) return truncated(path);
          base::UniqueFd file(::openat(directory, name.c_str(),
                                       O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                                       0600));
          if (!file) return failed(errno, "create " + path);
          if (!reader_.copy(file.get(), size)) return failed(reader_.error(), "write " + path);
          if (!apply(file.get(), attributes, path)) return false;
          if (link != 0) {
            if (links_.count(link) != 0) return malformed(path + ": a link id used twice");
            links_[link] = {section, inner};
          }
          ++counts.files;
          counts.data_bytes += size;
          break;
        }
        case 'H': {
          std::uint32_t link = 0;
          if (!reader_.u32(link)) return truncated(path);
          const auto found = links_.find(link);
          if (found == links_.end()) return malformed(path + ": a link to no earlier file");
          const auto& [from_section, from] = found->second;
          const auto slash = from.rfind('/');
          const std::string parent = slash == std::string::npos ? "." : from.substr(0, slash);
          const std::string leaf = slash == std::string::npos ? from : from.substr(slash + 1);
          // Beneath the destination, never through a link: the path is one this restore made.
          auto source = base::openat2(roots_[static_cast<std::size_t>(from_section)],
                                      parent.c_str(), O_PATH | O_DIRECTORY,
                                      base::kResolveConfined);
          if (!source) return failed(source.error, "find the first name of " + path);
          if (::linkat(source.fd.get(), leaf.c_str(), directory, name.c_str(), 0) != 0) {
            return failed(errno, "link " + path);
          }
          ++counts.hard_links;
          break;
        }
        case 'L': {
          Attributes attributes;
          std::uint32_t length = 0;
          std::string target;
          if (!this->attributes(attributes, false, path)) return false;
          if (!reader_.u32(length)) return truncated(path);
          if (length == 0 || length >= PATH_MAX || !reader_.string(target, length)) {
            return malformed(path + ": a link target of " + std::to_string(length) + " bytes");
          }
          if (target.find('\0') != std::string::npos) return malformed(path + ": a NUL in a link");
          if (::symlinkat(target.c_str(), directory, name.c_str()) != 0) {
            return failed(errno, "link " + path);
          }
          if (!apply_at(directory, name, attributes, false, path)) return false;
          ++counts.symlinks;
          break;
        }
        case 'W':
        case 'P': {
          Attributes attributes;
          if (!this->attributes(attributes, false, path)) return false;
          const mode_t type = kind == 'W' ? S_IFCHR : S_IFIFO;
          if (::mknodat(directory, name.c_str(), type | 0600, kind == 'W' ? makedev(0, 0) : 0) !=
              0) {
            return failed(errno, "make " + path);
          }
          if (!apply_at(directory, name, attributes, true, path)) return false;
          ++(kind == 'W' ? counts.whiteouts : counts.fifos);
          break;
        }
        default:
          return malformed(where + ": an entry of unknown kind " + std::to_string(kind));
      }
    }
  }

  bool run(const std::vector<Destination>& destinations) {
    char magic[kMagicBytes];
    if (!reader_.bytes(magic, sizeof magic) || std::memcmp(magic, kMagic, kMagicBytes) != 0) {
      return malformed("not a snapshot stream");
    }
    std::vector<bool> seen(destinations.size(), false);
    for (const auto& destination : destinations) roots_.push_back(destination.directory);
    for (;;) {
      std::uint8_t kind = 0;
      if (!reader_.u8(kind)) return truncated("the stream");
      if (kind == 'Z') break;
      if (kind != 'S') return malformed("a section was expected");
      std::string name;
      if (!reader_.name(name)) return truncated("a section");
      std::size_t index = 0;
      while (index < destinations.size() && destinations[index].name != name) ++index;
      if (index == destinations.size() || seen[index]) {
        return malformed("the section '" + name + "' has no place here");
      }
      seen[index] = true;
      Attributes attributes;
      if (!this->attributes(attributes, true, name)) return false;
      base::UniqueFd top(::openat(destinations[index].directory, ".",
                                  O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!top) return failed(errno, "open " + name);
      if (!entries(top.get(), 1, name, static_cast<int>(index), "")) return false;
      if (!apply(top.get(), attributes, name)) return false;
    }
    std::uint8_t extra = 0;
    if (reader_.u8(extra)) return malformed("bytes after the end of the stream");
    return true;
  }

  Counts counts;
  int error = 0;
  std::string what;

 private:
  bool host_id(std::uint32_t& id, const std::string& where) {
    if (id == kUnmapped) {
      id = kNobody;
      return true;
    }
    if (id >= ids_.count) return malformed(where + ": an owner outside the sandbox's ids");
    id += ids_.base;
    return true;
  }
  bool failed(int number, std::string text) {
    error = number == 0 ? EIO : number;
    what = std::move(text);
    return false;
  }
  bool malformed(std::string text) { return failed(EPROTO, "malformed snapshot: " + text); }
  bool truncated(const std::string& where) {
    return failed(reader_.error(), "the snapshot ends inside " + where);
  }

  Reader& reader_;
  IdRange ids_;
  std::vector<int> roots_;
  std::map<std::uint32_t, std::pair<int, std::string>> links_;
};

}  // namespace

Outcome restore(int in, const std::vector<Destination>& destinations, IdRange ids) {
  auto reader = std::make_unique<Reader>(in);
  Restorer restorer(*reader, ids);
  Outcome outcome;
  if (!restorer.run(destinations)) {
    outcome.error = restorer.error;
    outcome.what = restorer.what;
  }
  outcome.counts = restorer.counts;
  return outcome;
}

}  // namespace airlock::linux_backend::snapshot_stream
