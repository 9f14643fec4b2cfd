// The image store: root filesystems on local disk, imported once, resolved by name.
//
// Backends that build a sandbox's root from an image (the `linux` backend's overlay lower layer,
// the `gvisor` backend's OCI bundle) resolve a reference here and get back an extracted rootfs
// directory. Nothing is ever downloaded: images come from a rootfs directory, a tar (plain,
// gzip, xz, zstd, bzip2) or an OCI image layout already on this host.
//
//   airlock::images::ImageStore store(airlock::images::default_image_store_root(),
//                                     airlock::images::OwnershipMap::for_current_process());
//   store.import_tar("/tmp/busybox.tar", "busybox");           // → busybox:latest
//   airlock::images::ImagePin pin = store.pin("busybox");        // rootfs stays while pinned
//   mount_overlay(pin.image().rootfs, …);
//
// ---- Layout on disk (private to this component; shown so operators know what they see) ----
//   <root>/store.json              format version and the ownership map the store was made with
//   <root>/lock                    flock: shared for reads, exclusive for publish and removal
//   <root>/refs/<hash>.json        one record per reference (name:tag → image id, OCI config)
//   <root>/content/<id>/rootfs/    the extracted root filesystem (never modified once published)
//   <root>/content/<id>/image.json what the content is (id, entries, bytes)
//   <root>/content/<id>/use.lock   flock held shared by every live pin
//   <root>/incoming/<random>[.lock] imports in progress, and removed content being deleted
// Content is addressed by image id: two references to the same content share one directory.
//
// ---- Atomicity and concurrency ----
// An import extracts into `incoming/`, syncs it to disk, and only then — under the exclusive store
// lock — renames it into `content/` and publishes the reference by renaming its record into
// `refs/`. A crashed or failed import therefore never leaves a reference to half an image; what it
// leaves in `incoming/` is swept by the next import or removal (an importer holds an flock on its
// `incoming/<random>.lock` for as long as it works, so only abandoned entries are swept). Every
// method is safe to call from several threads and several processes at once: each call opens its
// own lock descriptions. Importing a reference that already exists replaces it (like a tag moving);
// `ImportResult::replaced` says so, and the old content is removed unless something else refers
// to it or pins it.
//
// ---- Hostile input ----
// Archives and layouts are treated as hostile. Extraction writes only beneath a held directory
// descriptor of the new rootfs, opening every parent with openat2(RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV) and every leaf with O_NOFOLLOW /
// AT_SYMLINK_NOFOLLOW, so the kernel — not a string check — guarantees nothing lands outside.
// On top of that, an import is refused (InvalidArgument naming the entry and the rule) for:
//   - an absolute entry name, or any `..` component (`paths`);
//   - an entry whose parent path passes through a symbolic link, e.g. `link → /etc` followed by
//     `link/passwd` (`symlinks`) — links are created, never written through;
//   - a hard link whose target is absolute, escapes, is not yet in the image, or is not a regular
//     file (`hardlinks`);
//   - an owner outside guest ids 0..65535 (`ownership`);
//   - more entries than `max_entries` or more bytes than `max_total_bytes` — counted from the
//     headers and again from the bytes actually written, so a lying header or a compression bomb
//     stops at the ceiling (`max_entries`, `max_total_bytes`);
//   - a character or block device when `device_nodes` is `refuse` (by default they are skipped and
//     named in `ImportResult::notes`; FIFOs are kept, sockets are skipped and noted);
//   - data beyond the size an entry's header declared (`entry_size`), and an unreadable or
//     truncated archive (`archive`).
// Always, silently enforced: setuid and setgid bits are stripped (the sticky bit is kept);
// extended attributes and ACLs are not extracted (which drops file capabilities, the other way a
// file grants privilege); timestamps are applied, including to links and directories.
//
// ---- Ownership ----
// See OwnershipMap. The map a store is created with is recorded in store.json; opening a store
// with a different map is refused, because a backend that maps guest ids differently from the
// files on disk would hand the guest's root files it cannot write (or the reverse).
//
// ---- Image ids ----
// `id` is "sha256:" + the SHA-256 of a canonical manifest of the final tree: every entry's path,
// type, mode (after sanitising), guest uid/gid, size, and content digest or link target, sorted by
// path. Timestamps do not count, and hard links count as the regular files they are. So the same
// tree imported as a directory, a tar, or an OCI layout has the same id.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace airlock::images {

// ---- references -------------------------------------------------------------------------------

// `name` or `name:tag`; the tag defaults to `latest`.
//   name: 1–255 characters, components separated by single `/`, each component starting with
//         [a-z0-9] and continuing with [a-z0-9._-]; no leading or trailing `/`, no `..`.
//         (Lowercase so that the same reference works with the docker backend.)
//   tag:  1–128 characters of [A-Za-z0-9_.-], starting with [A-Za-z0-9_].
// Whitespace, NUL, a second `:` and anything else are refused with an InvalidArgument that quotes
// the reference and names the rule broken. `host` is reserved (the linux backend's name for the
// host's own root) and refused as an image name.
struct ImageReference {
  std::string name;
  std::string tag;
  std::string to_string() const { return name + ":" + tag; }  // canonical "name:tag"
  bool operator==(const ImageReference&) const = default;
};
ImageReference parse_reference(std::string_view text);

// A name derived from a file name for `airlock image import` without --name: the basename
// without .tar/.tar.gz/.tgz/.tar.xz/.txz/.tar.zst/.tar.bz2, lowercased. nullopt when the result
// is not a valid name.
std::optional<std::string> reference_from_path(const std::filesystem::path& source);

// ---- what an import reads -----------------------------------------------------------------------

enum class SourceKind : std::uint8_t { directory, tar, oci_layout };
// "directory", "tar", "oci-layout"
std::string_view to_string(SourceKind kind) noexcept;
// Accepts "directory" / "dir", "tar", "oci-layout" / "oci"; InvalidArgument naming the choices.
SourceKind parse_source_kind(std::string_view text);
// A directory holding an `oci-layout` file → oci_layout; any other directory → directory; a
// regular file, FIFO or other stream → tar. NotFound when nothing is at `source`.
SourceKind detect_source_kind(const std::filesystem::path& source);

// ---- ownership ----------------------------------------------------------------------------------

// How the files of a stored image are owned on the host.
//
//   shifted(base)  guest uid/gid g is stored as host id base + g, for g in 0..65535 (both uid and
//                  gid use the same base). Needs CAP_CHOWN, i.e. root. A sandbox whose user
//                  namespace maps guest 0..65535 onto host base..base+65535 then sees each file
//                  with the owner the image gave it, and none of them is owned by a host user.
//   caller()       everything owned by the calling process's uid/gid: no chown is possible
//                  without privilege. Guest owners are still checked (0..65535) and still count
//                  in the image id, but are not applied; a sandbox maps guest 0 to the caller.
//
// kDefaultUidBase is what the linux backend uses unless configured otherwise; it is far above
// any uid a host allocates to people or services, and base + 65535 stays below 2^31.
class OwnershipMap {
 public:
  static constexpr std::uint32_t kGuestIdCount = 65536;
  static constexpr std::uint32_t kDefaultUidBase = 1'000'000'000;

  // InvalidArgument when base + 65535 would pass 2^32 - 2 (the kernel's invalid id) or base is 0
  // (that would store guest root as host root).
  static OwnershipMap shifted(std::uint32_t base = kDefaultUidBase);
  static OwnershipMap caller();
  // shifted(base) when the effective uid is 0, caller() otherwise.
  static OwnershipMap for_current_process(std::uint32_t base = kDefaultUidBase);

  bool is_shifted() const noexcept { return shifted_; }
  // The base of a shifted map; 0 for caller().
  std::uint32_t base() const noexcept { return base_; }
  // "shifted(1000000000)" or "caller" — for messages.
  std::string describe() const;
  bool operator==(const OwnershipMap&) const = default;

 private:
  OwnershipMap(bool shifted, std::uint32_t base) : shifted_(shifted), base_(base) {}
  bool shifted_;
  std::uint32_t base_;
};

// ---- limits -------------------------------------------------------------------------------------

enum class DeviceNodePolicy : std::uint8_t {
  skip,    // leave the node out, log it, and name it in ImportResult::notes (the default:
           // debootstrap and many base images carry a /dev the runtime replaces anyway)
  refuse,  // refuse the whole import
};

// Ceilings against decompression bombs and absurd inputs. Exceeding any refuses the import with an
// InvalidArgument whose check() is the field name.
struct ExtractionLimits {
  std::uint64_t max_entries = 2'000'000;          // entries across all layers
  std::uint64_t max_total_bytes = 32ULL << 30;    // file bytes written, across all layers
  std::uint64_t max_metadata_bytes = 4ULL << 20;  // one OCI JSON document (index, manifest…)
  DeviceNodePolicy device_nodes = DeviceNodePolicy::skip;
};

// ---- images -------------------------------------------------------------------------------------

// From an OCI image config (`config` object); empty for directory and tar imports.
struct ImageConfig {
  std::vector<std::string> env;  // "KEY=value"
  std::vector<std::string> entrypoint;
  std::vector<std::string> cmd;
  std::string working_dir;
  std::string user;
};

struct ImageInfo {
  std::string reference;         // canonical "name:tag"
  std::string id;                // "sha256:<64 hex>", see the file comment
  std::filesystem::path rootfs;  // absolute; read-only by contract: never write here
  std::chrono::system_clock::time_point created_at{};  // when this reference was published
  SourceKind source_kind = SourceKind::tar;
  std::string source_digest;  // OCI manifest digest ("sha256:…"), else empty
  std::uint64_t entries = 0;  // entries in the final tree (the root included)
  std::uint64_t bytes = 0;    // bytes of regular-file content in the final tree
  ImageConfig config;
};

struct ImportResult {
  ImageInfo image;
  bool replaced = false;           // the reference existed and now names this image
  std::vector<std::string> notes;  // entries skipped on purpose ("dev/null: character device
                                   // skipped (device_nodes=skip)"), in archive order
};

// Keeps an image's content from being removed while some process uses it.
//
// The pin is a shared flock on the content's use.lock, held through an open file description:
// it lasts while *any* process holds a descriptor for it. A backend whose sandboxes outlive the
// process that created them passes `fd()` to the sandbox's long-lived process (e.g. its init,
// without O_CLOEXEC), so the pin ends exactly when the sandbox does — even after a crash, with no
// refcount to repair. `ImageStore::remove` refuses while a pin is held.
class ImagePin {
 public:
  ImagePin(ImagePin&& other) noexcept;
  ImagePin& operator=(ImagePin&& other) noexcept;
  ImagePin(const ImagePin&) = delete;
  ImagePin& operator=(const ImagePin&) = delete;
  ~ImagePin();

  const ImageInfo& image() const noexcept { return image_; }
  // The descriptor carrying the lock (O_CLOEXEC set); -1 after release().
  int fd() const noexcept { return fd_; }
  // Closes this process's descriptor. Copies passed to other processes keep the pin alive.
  void release() noexcept;

 private:
  friend class ImageStore;
  ImagePin(ImageInfo image, int fd) : image_(std::move(image)), fd_(fd) {}
  ImageInfo image_;
  int fd_ = -1;
};

// The store. Construction touches nothing but store.json (read and checked when it exists); the
// directories are created by the first import. All methods are thread- and process-safe.
class ImageStore {
 public:
  // `root` must be absolute (InvalidArgument). InvalidArgument when store.json records a
  // different ownership map, or a format this build does not know.
  ImageStore(std::filesystem::path root, OwnershipMap ownership, ExtractionLimits limits = {});

  const std::filesystem::path& root() const noexcept { return root_; }
  const OwnershipMap& ownership() const noexcept { return ownership_; }
  const ExtractionLimits& limits() const noexcept { return limits_; }

  // A rootfs directory on this host. Symbolic links in it are stored as links (never followed),
  // hard links within it are kept, sockets and (by default) device nodes are skipped and noted.
  ImportResult import_directory(const std::filesystem::path& source, std::string_view reference);

  // A tar archive: plain, gzip, xz, zstd or bzip2, detected from the content (no external
  // decompressor is ever run). `source` may be a FIFO or /dev/stdin. Tar-level whiteouts are
  // ordinary files here; only OCI layers give `.wh.` names a meaning.
  ImportResult import_tar(const std::filesystem::path& source, std::string_view reference);

  // An OCI image layout directory (oci-layout, index.json, blobs/sha256/…). `tag` selects the
  // manifest whose org.opencontainers.image.ref.name annotation equals it; without a tag the
  // layout must hold exactly one manifest for linux on this host's architecture. Nested indexes
  // are followed (by platform). Every blob read is checked against its descriptor's digest and
  // size. Layers (tar, tar+gzip, tar+zstd, and Docker's tar.gzip) are applied in order: a
  // `.wh.<name>` entry deletes <name> from lower layers, `.wh..wh..opq` empties its directory of
  // lower-layer content; whiteouts themselves are never stored.
  ImportResult import_oci_layout(const std::filesystem::path& layout, std::string_view reference,
                                 const std::optional<std::string>& tag = std::nullopt);

  // Dispatch on `kind` (detect_source_kind when nullopt). `oci_tag` applies to OCI layouts only.
  ImportResult import_path(const std::filesystem::path& source, std::string_view reference,
                           std::optional<SourceKind> kind = std::nullopt,
                           const std::optional<std::string>& oci_tag = std::nullopt);

  // A reference ("name", "name:tag") or a full image id ("sha256:<64 hex>"; the first reference
  // to that content is reported). Unknown → InvalidArgument:
  //   image 'x:latest' is not in the image store at <root>; add it with
  //   `airlock image import --name x:latest PATH`
  ImageInfo resolve(std::string_view reference) const;
  // As resolve, but nullopt when unknown (a malformed reference still throws).
  std::optional<ImageInfo> find(std::string_view reference) const;
  // As resolve, and pin the content (see ImagePin) before the store lock is released, so a
  // concurrent remove cannot delete the rootfs between the two.
  ImagePin pin(std::string_view reference) const;

  // Every reference, sorted by reference.
  std::vector<ImageInfo> list() const;

  // Drops the reference; deletes the content when no other reference names it. Refused
  // (InvalidArgument, check "in_use") when that content would be deleted while a pin is held.
  // Unknown reference → the same error as resolve.
  void remove(std::string_view reference);

 private:
  std::filesystem::path root_;
  OwnershipMap ownership_;
  ExtractionLimits limits_;
};

// default_state_dir() / "images" — the store the CLI and the linux backend use by default.
std::filesystem::path default_image_store_root();

}  // namespace airlock::images
