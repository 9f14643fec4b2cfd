// A sandbox's writable storage as one byte stream, and back: how the linux backend saves what a
// guest wrote (its overlay's upper layer or its work storage, and its /tmp) and gives it to a
// fresh sandbox. Shared by the library (capture, while the guest is frozen) and airlock-init
// (restore, into the new sandbox's storage before its root is mounted); depends on nothing but
// the C library.
//
// The guest is hostile and chose every name, link and mode in the tree, so:
//   - the capture reaches every entry through its parent's descriptor (openat with O_NOFOLLOW,
//     then fstat of what was opened): a link is read as a link (readlinkat) and never followed,
//     a directory that is not on the storage's own file system is never entered, and nothing
//     but a regular file is ever opened for reading (a FIFO never blocks it);
//   - kept as they are: directories, regular files (their data, mode, guest owner, mtime),
//     symbolic links (their target, never resolved), hard links (one file, several names —
//     within the stream only), overlay whiteouts (character device 0/0: without them a file the
//     guest deleted from the image comes back), FIFOs (an empty name, nothing to read);
//   - dropped, and counted: sockets (a name without the listener behind it), every other device
//     node (none can be made in a sandbox; one found is not carried anywhere);
//   - extended attributes: only the overlay's opaque-directory marker (trusted.overlay.opaque —
//     without it a directory the guest replaced shows the image's files again) and user.*
//     attributes; security.* (file capabilities), system.* (ACLs) and every other trusted.*
//     attribute are dropped. A file carrying overlay redirect or metacopy attributes cannot be
//     copied faithfully: the capture refuses it (this backend never turns those features on);
//   - owners are stored as guest ids (host id − the sandbox's base), and a host id outside the
//     sandbox's range is refused;
//   - bounded: the stream may not exceed `max_bytes` (the sandbox's storage size), nor a
//     directory be deeper than kMaxDepth.
//
// The restore trusts nothing in the stream either: every name is one path component (no '/',
// not "." or ".."), every entry is created new (O_EXCL, mkdirat, symlinkat, mknodat of the two
// kinds above only) beneath the destination directory's descriptor, a hard link names only a
// file made earlier by the same stream, owners are guest ids mapped into the new sandbox's
// range, and only the attributes above are set.
//
// Format (integers little-endian): "ALSNAP01", then sections, then 'Z'.
//   section   'S' name attrs entries… 'E'          name: the storage directory ("upper", …)
//   directory 'D' name attrs entries… 'E'
//   file      'F' name attrs u32 link u64 size data   link: 0, or the id of a hard-linked file
//   hard link 'H' name u32 link                       a further name of an earlier 'F'
//   symlink   'L' name attrs u32 length target
//   whiteout  'W' name attrs
//   fifo      'P' name attrs
//   name      u16 length, bytes
//   attrs     u32 mode (07777 bits), u32 uid, u32 gid (guest ids), i64 mtime s, u32 mtime ns,
//             u16 count, count × (u16 length, name, u32 length, value)
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

struct stat;

namespace airlock::linux_backend::snapshot_stream {

inline constexpr std::uint32_t kMaxDepth = 256;
inline constexpr std::uint32_t kMaxXattrValue = 64 * 1024;
inline constexpr std::uint32_t kMaxXattrsPerEntry = 64;

// Guest id g is host id base + g, for g < count.
struct IdRange {
  std::uint32_t base = 0;
  std::uint32_t count = 1;
};

struct Counts {
  std::uint64_t directories = 0;
  std::uint64_t files = 0;
  std::uint64_t hard_links = 0;  // names beyond a file's first
  std::uint64_t symlinks = 0;
  std::uint64_t whiteouts = 0;
  std::uint64_t fifos = 0;
  std::uint64_t dropped_sockets = 0;
  std::uint64_t dropped_devices = 0;
  std::uint64_t dropped_xattrs = 0;
  std::uint64_t data_bytes = 0;
};

struct Outcome {
  int error = 0;     // 0, or the errno that stopped it (EFBIG: over max_bytes)
  std::string what;  // which entry and step, relative to the section
  Counts counts;
  std::uint64_t stream_bytes = 0;
  explicit operator bool() const noexcept { return error == 0; }
};

// Owner of an entry whose host id lies outside the sandbox's range (a file an overlay copied
// up from a rootfs directory owned by host users): kept as "nobody's", restored as kNobody.
inline constexpr std::uint32_t kUnmapped = 0xFFFFFFFFu;
inline constexpr std::uint32_t kNobody = 65534;

// Writes a stream into `out` (a file, from its current position), never more than `max_bytes`.
class Writer {
 public:
  Writer(int out, IdRange ids, std::uint64_t max_bytes);
  // The header. First.
  Outcome start();
  // Appends the directory `source` (a descriptor of it; the walk opens its own) as section
  // `name`, everything beneath it included. Stops at the first failure.
  Outcome section(const std::string& name, int source);
  // The end mark. The stream is complete only after it.
  Outcome finish();
  std::uint64_t written() const noexcept { return written_; }
  const Counts& counts() const noexcept { return counts_; }

 private:
  bool put(const std::string& bytes, Outcome& outcome);
  bool flush(Outcome& outcome);
  bool attributes(std::string& record, const struct ::stat& info, int fd, Outcome& outcome,
                  const std::string& where);
  bool walk(int directory, unsigned long device, std::uint32_t depth, const std::string& where,
            Outcome& outcome);
  bool entry(int directory, const std::string& name, unsigned long device, std::uint32_t depth,
             const std::string& where, Outcome& outcome);

  int out_;
  IdRange ids_;
  std::uint64_t max_bytes_;
  std::uint64_t written_ = 0;
  std::uint32_t next_link_ = 1;
  std::unordered_map<std::uint64_t, std::uint32_t> links_;  // inode → link id
  Counts counts_;
  std::string buffer_;
};

// Where a restore puts each section: its name and a directory descriptor (an existing, empty
// directory of the new storage). A section of any other name is refused.
struct Destination {
  std::string name;
  int directory = -1;
};

// Reads the whole stream from `in` and recreates it beneath the destinations, owners mapped
// into `ids`.
Outcome restore(int in, const std::vector<Destination>& destinations, IdRange ids);

}  // namespace airlock::linux_backend::snapshot_stream
