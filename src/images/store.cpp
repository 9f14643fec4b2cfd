// The store's bookkeeping: directories, locks, publication, references, pins, garbage.
// Extraction itself is RootfsWriter's; this file decides when a tree becomes visible.
#include <dirent.h>
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>

#include "airlock/errors.hpp"
#include "airlock/state_dir.hpp"
#include "airlock/images.hpp"
#include "images/fs.hpp"
#include "images/rootfs_writer.hpp"
#include "images/sources.hpp"
#include "images/store_records.hpp"

namespace airlock::images {

using detail::check_store_json;
using detail::id_hex;
using detail::is_image_id;
using detail::ownership_json;
using detail::reference_file;
using detail::reference_from_json;
using detail::ReferenceRecord;
using detail::throw_errno;
using Json = nlohmann::json;

namespace {

constexpr std::uint64_t kRecordLimit = 1 << 20;

std::string shown(const std::filesystem::path& root, std::string_view relative) {
  return (root / relative).string();
}

void lock(int fd, int operation, std::string_view path) {
  while (::flock(fd, operation) != 0) {
    if (errno != EINTR) throw_errno("cannot lock", path);
  }
}

// The store-wide lock: shared while reading references, exclusive while changing them.
base::UniqueFd lock_store(int root_fd, int operation, const std::filesystem::path& root) {
  base::UniqueFd fd(::openat(root_fd, "lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd && errno == EACCES)
    fd.reset(::openat(root_fd, "lock", O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) throw_errno("cannot open the store lock", shown(root, "lock"));
  lock(fd.get(), operation, shown(root, "lock"));
  return fd;
}

base::UniqueFd open_directory(int at, const char* name, const std::filesystem::path& root) {
  base::UniqueFd fd(::openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) throw_errno("cannot open", shown(root, name));
  return fd;
}

void make_directory(int at, const char* name, mode_t mode, const std::filesystem::path& root) {
  if (::mkdirat(at, name, mode) != 0 && errno != EEXIST) {
    throw_errno("cannot create", shown(root, name));
  }
}

// An entry of incoming/ this process owns: the directory plus its flocked `<name>.lock`.
// Destroying it deletes both, so an import that fails for any reason leaves nothing behind.
class IncomingEntry {
 public:
  IncomingEntry(int incoming_fd, std::string name, base::UniqueFd lock, std::filesystem::path root)
      : incoming_fd_(incoming_fd),
        name_(std::move(name)),
        lock_(std::move(lock)),
        root_(std::move(root)) {}
  IncomingEntry(IncomingEntry&&) noexcept = default;
  IncomingEntry(const IncomingEntry&) = delete;
  IncomingEntry& operator=(const IncomingEntry&) = delete;
  IncomingEntry& operator=(IncomingEntry&&) = delete;
  ~IncomingEntry() {
    if (!lock_) return;
    try {
      if (!moved_) detail::remove_tree_at(incoming_fd_, name_, shown(root_, "incoming/" + name_));
      ::unlinkat(incoming_fd_, (name_ + ".lock").c_str(), 0);
    } catch (const std::exception& error) {
      // Left for the next sweep: the lock dies with this descriptor.
      spdlog::warn("image store: cannot clean up {}: {}", name_, error.what());
    }
  }

  const std::string& name() const noexcept { return name_; }
  void mark_moved() noexcept { moved_ = true; }

 private:
  int incoming_fd_;
  std::string name_;
  base::UniqueFd lock_;
  std::filesystem::path root_;
  bool moved_ = false;
};

// Creates incoming/<random>.lock (flocked) before incoming/<random>, so a sweeper holding the
// exclusive store lock never sees a directory whose owner is still alive but unlocked.
IncomingEntry new_incoming(int incoming_fd, const std::filesystem::path& root,
                           bool make_directory) {
  const std::string name = detail::random_hex();
  base::UniqueFd lock_fd(::openat(incoming_fd, (name + ".lock").c_str(),
                                  O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!lock_fd) throw_errno("cannot create", shown(root, "incoming/" + name + ".lock"));
  lock(lock_fd.get(), LOCK_EX, shown(root, "incoming/" + name + ".lock"));
  IncomingEntry entry(incoming_fd, name, std::move(lock_fd), root);
  if (make_directory && ::mkdirat(incoming_fd, name.c_str(), 0711) != 0) {
    throw_errno("cannot create", shown(root, "incoming/" + name));
  }
  return entry;
}

std::vector<std::string> list_names(int dir_fd, std::string_view path) {
  const int listing = ::dup(dir_fd);
  DIR* dir = listing < 0 ? nullptr : ::fdopendir(listing);
  if (dir == nullptr) {
    if (listing >= 0) ::close(listing);
    throw_errno("cannot list", path);
  }
  ::rewinddir(dir);
  std::vector<std::string> names;
  errno = 0;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string_view name(entry->d_name);
    if (name != "." && name != "..") names.emplace_back(name);
  }
  const int error = errno;
  ::closedir(dir);
  if (error != 0) throw_errno("cannot list", path, error);
  std::sort(names.begin(), names.end());
  return names;
}

// Everything the store needs open for one operation.
struct Handles {
  base::UniqueFd root;
  base::UniqueFd refs;
  base::UniqueFd content;
  base::UniqueFd incoming;
};

}  // namespace

// ---- ImagePin -----------------------------------------------------------------------------------

ImagePin::ImagePin(ImagePin&& other) noexcept
    : image_(std::move(other.image_)), fd_(std::exchange(other.fd_, -1)) {}

ImagePin& ImagePin::operator=(ImagePin&& other) noexcept {
  if (this != &other) {
    release();
    image_ = std::move(other.image_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

ImagePin::~ImagePin() {
  release();
}

void ImagePin::release() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

// ---- ImageStore ---------------------------------------------------------------------------------

namespace {

// A shifted store's trees are owned by guest ids and keep the images' own modes — world-writable
// directories such as /tmp and /var/tmp included. Were content/ open to every host user (0711),
// any of them could plant files or listening sockets inside an image that every sandbox of it
// then sees. So, as root, content/ is root's with the map's base as its group, mode 0710: root
// and processes running as the base (runsc's file proxy does) pass through, no one else does.
// A store made before this is put right the next time root opens it.
void restrict_content(int content_fd, const OwnershipMap& ownership,
                      const std::filesystem::path& root) {
  if (!ownership.is_shifted() || ::geteuid() != 0) return;
  struct stat st {};
  if (::fstat(content_fd, &st) != 0) throw_errno("cannot inspect", shown(root, "content"));
  if (st.st_uid == 0 && st.st_gid == ownership.base() && (st.st_mode & 07777) == 0710) return;
  if (::fchown(content_fd, 0, ownership.base()) != 0 || ::fchmod(content_fd, 0710) != 0) {
    throw_errno("cannot restrict", shown(root, "content"));
  }
}

std::optional<Handles> open_store(const std::filesystem::path& root, const OwnershipMap& ownership,
                                  bool create) {
  Handles handles;
  if (create) {
    // The directory the store lives in is checked like a state directory (it is one, by
    // default): no link, nobody else's, not writable by others.
    prepare_state_directory(std::filesystem::absolute(root).parent_path());
    if (::mkdir(root.c_str(), 0711) != 0 && errno != EEXIST) {
      throw_errno("cannot create the image store", root.string());
    }
  }
  handles.root.reset(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!handles.root) {
    if (errno == ENOENT && !create) return std::nullopt;
    throw_errno("cannot open the image store", root.string());
  }
  if (create) {
    base::UniqueFd exclusive = lock_store(handles.root.get(), LOCK_EX, root);
    make_directory(handles.root.get(), "refs", 0700, root);
    make_directory(handles.root.get(), "content", 0711, root);
    make_directory(handles.root.get(), "incoming", 0700, root);
    struct stat st {};
    if (::fstatat(handles.root.get(), "store.json", &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno != ENOENT) throw_errno("cannot inspect", shown(root, "store.json"));
      detail::write_file_atomically(handles.root.get(), "store.json",
                                    ownership_json(ownership).dump(2) + "\n",
                                    shown(root, "store.json"));
    }
  }
  struct stat st {};
  if (::fstatat(handles.root.get(), "refs", &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT && !create) return std::nullopt;
    throw_errno("cannot inspect", shown(root, "refs"));
  }
  check_store_json(detail::read_small_file(handles.root.get(), "store.json", kRecordLimit, "store",
                                           shown(root, "store.json")),
                   ownership, root);
  handles.refs = open_directory(handles.root.get(), "refs", root);
  handles.content = open_directory(handles.root.get(), "content", root);
  handles.incoming = open_directory(handles.root.get(), "incoming", root);
  restrict_content(handles.content.get(), ownership, root);
  return handles;
}

std::optional<ReferenceRecord> read_reference(const Handles& handles,
                                              const ImageReference& reference,
                                              const std::filesystem::path& root) {
  const std::string file = reference_file(reference);
  base::UniqueFd fd(::openat(handles.refs.get(), file.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOENT) return std::nullopt;
    throw_errno("cannot open", shown(root, "refs/" + file));
  }
  fd.reset();
  ReferenceRecord record =
      reference_from_json(detail::read_small_file(handles.refs.get(), file, kRecordLimit, "store",
                                                  shown(root, "refs/" + file)),
                          shown(root, "refs/" + file));
  // Two references sharing a file name would need a SHA-256 collision; still, never mix them up.
  if (!(record.reference == reference)) return std::nullopt;
  return record;
}

std::vector<ReferenceRecord> read_all_references(const Handles& handles,
                                                 const std::filesystem::path& root) {
  std::vector<ReferenceRecord> records;
  for (const auto& name : list_names(handles.refs.get(), shown(root, "refs"))) {
    if (!name.ends_with(".json") || name.starts_with(".")) continue;
    records.push_back(
        reference_from_json(detail::read_small_file(handles.refs.get(), name, kRecordLimit, "store",
                                                    shown(root, "refs/" + name)),
                            shown(root, "refs/" + name)));
  }
  std::sort(records.begin(), records.end(), [](const auto& a, const auto& b) {
    return a.reference.to_string() < b.reference.to_string();
  });
  return records;
}

ImageInfo describe(const Handles& handles, const ReferenceRecord& record,
                   const std::filesystem::path& root) {
  const std::string content = id_hex(record.id);
  const std::string image_json = content + "/image.json";
  struct stat st {};
  if (::fstatat(handles.content.get(), (content + "/rootfs").c_str(), &st, AT_SYMLINK_NOFOLLOW) !=
      0) {
    throw SystemError("image '" + record.reference.to_string() + "' refers to content " +
                          record.id + " that is missing from the image store at " + root.string() +
                          "; import it again",
                      errno, shown(root, "content/" + content));
  }
  Json document;
  try {
    document = Json::parse(detail::read_small_file(handles.content.get(), image_json, kRecordLimit,
                                                   "store", shown(root, "content/" + image_json)));
  } catch (const Json::exception& error) {
    throw SystemError("the image store record " + shown(root, "content/" + image_json) +
                      " is damaged: " + error.what());
  }
  ImageInfo info;
  info.reference = record.reference.to_string();
  info.id = record.id;
  info.rootfs = root / "content" / content / "rootfs";
  info.created_at = record.created_at;
  info.source_kind = record.source_kind;
  info.source_digest = record.source_digest;
  info.entries = document.value("entries", std::uint64_t{0});
  info.bytes = document.value("bytes", std::uint64_t{0});
  info.config = record.config;
  return info;
}

[[noreturn]] void unknown_reference(const std::string& reference,
                                    const std::filesystem::path& root) {
  // busybox and python are the images the CLI can build offline from the host's own packages.
  std::string build;
  for (const char* buildable : {"busybox", "python"}) {
    if (reference == std::string(buildable) + ":latest") {
      build = "build it offline with `airlock image build " + std::string(buildable) + "`, or ";
    }
  }
  throw InvalidArgument("image '" + reference + "' is not in the image store at " + root.string() +
                            "; " + build + "add it with `airlock image import --name " + reference +
                            " PATH`",
                        "image");
}

// Moves content that no reference names, and nobody pins, into incoming/ for deletion. Runs under
// the exclusive store lock; the deletion itself happens after the lock is released.
void collect_garbage(const Handles& handles, const std::filesystem::path& root,
                     std::vector<IncomingEntry>& doomed) {
  std::set<std::string> referenced;
  for (const auto& record : read_all_references(handles, root))
    referenced.insert(id_hex(record.id));
  for (const auto& name : list_names(handles.content.get(), shown(root, "content"))) {
    if (referenced.contains(name)) continue;
    base::UniqueFd use(::openat(handles.content.get(), (name + "/use.lock").c_str(),
                                O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (use && ::flock(use.get(), LOCK_EX | LOCK_NB) != 0) continue;  // pinned: keep for now
    IncomingEntry entry = new_incoming(handles.incoming.get(), root, false);
    if (::renameat(handles.content.get(), name.c_str(), handles.incoming.get(),
                   entry.name().c_str()) != 0) {
      throw_errno("cannot retire", shown(root, "content/" + name));
    }
    doomed.push_back(std::move(entry));
  }
}

// Claims incoming/ entries whose importer died (their lock is free). Exclusive store lock held.
void claim_abandoned(const Handles& handles, const std::filesystem::path& root,
                     std::vector<IncomingEntry>& doomed) {
  const std::vector<std::string> names =
      list_names(handles.incoming.get(), shown(root, "incoming"));
  const std::set<std::string> present(names.begin(), names.end());
  for (const auto& name : names) {
    if (name.ends_with(".lock")) {
      const std::string base = name.substr(0, name.size() - 5);
      base::UniqueFd fd(
          ::openat(handles.incoming.get(), name.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC));
      if (!fd || ::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) continue;
      doomed.emplace_back(handles.incoming.get(), base, std::move(fd), root);
    } else if (!present.contains(name + ".lock")) {
      base::UniqueFd fd(::openat(handles.incoming.get(), (name + ".lock").c_str(),
                                 O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
      if (!fd || ::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) continue;
      doomed.emplace_back(handles.incoming.get(), name, std::move(fd), root);
    }
  }
}

}  // namespace

ImageStore::ImageStore(std::filesystem::path root, OwnershipMap ownership, ExtractionLimits limits)
    : root_(std::move(root)), ownership_(ownership), limits_(limits) {
  if (!root_.is_absolute()) {
    throw InvalidArgument(
        "the image store root must be an absolute path, not '" + root_.string() + "'", "store");
  }
  root_ = root_.lexically_normal();
  if (root_.has_filename() == false && root_ != root_.root_path()) root_ = root_.parent_path();
  struct stat st {};
  if (::stat((root_ / "store.json").c_str(), &st) == 0) {
    base::UniqueFd fd(::open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd) throw_errno("cannot open the image store", root_.string());
    check_store_json(detail::read_small_file(fd.get(), "store.json", kRecordLimit, "store",
                                             shown(root_, "store.json")),
                     ownership_, root_);
  }
}

namespace {

using Fill = std::function<void(detail::RootfsWriter&, ImageConfig&, std::string& source_digest)>;

ImportResult import_with(const std::filesystem::path& root, const OwnershipMap& ownership,
                         const ExtractionLimits& limits, std::string_view reference_text,
                         SourceKind kind, const Fill& fill) {
  const ImageReference reference = parse_reference(reference_text);
  Handles handles = *open_store(root, ownership, true);

  std::vector<IncomingEntry> doomed;
  std::optional<IncomingEntry> incoming;
  {
    base::UniqueFd exclusive = lock_store(handles.root.get(), LOCK_EX, root);
    claim_abandoned(handles, root, doomed);
    incoming.emplace(new_incoming(handles.incoming.get(), root, true));
  }
  doomed.clear();  // deletes what was abandoned, outside the store lock

  const std::string work = "incoming/" + incoming->name();
  base::UniqueFd work_fd = open_directory(handles.incoming.get(), incoming->name().c_str(), root);
  make_directory(work_fd.get(), "rootfs", 0700, root);
  base::UniqueFd rootfs_fd = open_directory(work_fd.get(), "rootfs", root);

  ImportResult result;
  ReferenceRecord record;
  record.reference = reference;
  record.source_kind = kind;
  detail::RootfsWriter writer(rootfs_fd.get(), ownership, limits, result.notes);
  fill(writer, record.config, record.source_digest);
  const detail::TreeSummary summary = writer.finish();
  record.id = summary.id;

  // Published content must survive a power cut: flush it before it can be named.
  if (::syncfs(rootfs_fd.get()) != 0) throw_errno("cannot sync", shown(root, work));
  rootfs_fd.reset();
  const Json image_json = {
      {"id", summary.id}, {"entries", summary.entries}, {"bytes", summary.bytes}};
  detail::write_file_atomically(work_fd.get(), "image.json", image_json.dump(2) + "\n",
                                shown(root, work + "/image.json"));
  base::UniqueFd use(
      ::openat(work_fd.get(), "use.lock", O_RDONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!use) throw_errno("cannot create", shown(root, work + "/use.lock"));
  use.reset();
  work_fd.reset();

  {
    base::UniqueFd exclusive = lock_store(handles.root.get(), LOCK_EX, root);
    const std::string content = id_hex(summary.id);
    struct stat st {};
    if (::fstatat(handles.content.get(), content.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno != ENOENT) throw_errno("cannot inspect", shown(root, "content/" + content));
      if (::renameat(handles.incoming.get(), incoming->name().c_str(), handles.content.get(),
                     content.c_str()) != 0) {
        throw_errno("cannot publish", shown(root, "content/" + content));
      }
      incoming->mark_moved();
      if (::fsync(handles.content.get()) != 0) throw_errno("cannot sync", shown(root, "content"));
    }
    result.replaced = read_reference(handles, reference, root).has_value();
    record.created_at = std::chrono::system_clock::now();
    detail::write_file_atomically(handles.refs.get(), reference_file(reference),
                                  to_json(record).dump(2) + "\n",
                                  shown(root, "refs/" + reference_file(reference)));
    result.image = describe(handles, record, root);
    collect_garbage(handles, root, doomed);
  }
  incoming.reset();
  doomed.clear();
  spdlog::info("image store: {} is {} ({} entries, {} bytes)", result.image.reference,
               result.image.id, result.image.entries, result.image.bytes);
  return result;
}

}  // namespace

ImportResult ImageStore::import_directory(const std::filesystem::path& source,
                                          std::string_view reference) {
  return import_with(root_, ownership_, limits_, reference, SourceKind::directory,
                     [&](detail::RootfsWriter& writer, ImageConfig&, std::string&) {
                       writer.begin_layer(false);
                       detail::read_directory(source, writer);
                     });
}

ImportResult ImageStore::import_tar(const std::filesystem::path& source,
                                    std::string_view reference) {
  return import_with(root_, ownership_, limits_, reference, SourceKind::tar,
                     [&](detail::RootfsWriter& writer, ImageConfig&, std::string&) {
                       base::UniqueFd fd(::open(source.c_str(), O_RDONLY | O_CLOEXEC));
                       if (!fd) throw_errno("cannot open", source.string());
                       struct stat st {};
                       if (::fstat(fd.get(), &st) != 0)
                         throw_errno("cannot inspect", source.string());
                       if (S_ISDIR(st.st_mode)) {
                         throw InvalidArgument(
                             "'" + source.string() + "' is a directory, not a tar archive",
                             "format");
                       }
                       writer.begin_layer(false);
                       detail::read_tar(fd.get(), source.string(), writer);
                     });
}

ImportResult ImageStore::import_oci_layout(const std::filesystem::path& layout,
                                           std::string_view reference,
                                           const std::optional<std::string>& tag) {
  return import_with(
      root_, ownership_, limits_, reference, SourceKind::oci_layout,
      [&](detail::RootfsWriter& writer, ImageConfig& config, std::string& source_digest) {
        base::UniqueFd fd(::open(layout.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
        if (!fd) throw_errno("cannot open the OCI layout", layout.string());
        const detail::OciImage image =
            detail::read_oci_layout(fd.get(), layout.string(), tag, limits_);
        detail::apply_oci_layers(fd.get(), image, writer);
        config = image.config;
        source_digest = image.manifest_digest;
      });
}

ImportResult ImageStore::import_path(const std::filesystem::path& source,
                                     std::string_view reference, std::optional<SourceKind> kind,
                                     const std::optional<std::string>& oci_tag) {
  // Refuse a bad reference before looking at the source at all.
  parse_reference(reference);
  const SourceKind chosen = kind ? *kind : detect_source_kind(source);
  if (oci_tag && chosen != SourceKind::oci_layout) {
    throw InvalidArgument("a tag selects a manifest of an OCI layout; '" + source.string() +
                              "' is imported as " + std::string(to_string(chosen)),
                          "tag");
  }
  switch (chosen) {
    case SourceKind::directory:
      return import_directory(source, reference);
    case SourceKind::tar:
      return import_tar(source, reference);
    case SourceKind::oci_layout:
      return import_oci_layout(source, reference, oci_tag);
  }
  return import_tar(source, reference);
}

std::optional<ImageInfo> ImageStore::find(std::string_view reference) const {
  if (is_image_id(reference)) {
    std::optional<Handles> handles = open_store(root_, ownership_, false);
    if (!handles) return std::nullopt;
    base::UniqueFd shared = lock_store(handles->root.get(), LOCK_SH, root_);
    for (const auto& record : read_all_references(*handles, root_)) {
      if (record.id == reference) return describe(*handles, record, root_);
    }
    return std::nullopt;
  }
  const ImageReference parsed = parse_reference(reference);
  std::optional<Handles> handles = open_store(root_, ownership_, false);
  if (!handles) return std::nullopt;
  base::UniqueFd shared = lock_store(handles->root.get(), LOCK_SH, root_);
  const std::optional<ReferenceRecord> record = read_reference(*handles, parsed, root_);
  if (!record) return std::nullopt;
  return describe(*handles, *record, root_);
}

ImageInfo ImageStore::resolve(std::string_view reference) const {
  std::optional<ImageInfo> found = find(reference);
  if (!found) {
    unknown_reference(
        is_image_id(reference) ? std::string(reference) : parse_reference(reference).to_string(),
        root_);
  }
  return std::move(*found);
}

ImagePin ImageStore::pin(std::string_view reference) const {
  // A full image id is accepted as resolve accepts it: the first reference to that content.
  const bool by_id = is_image_id(reference);
  const std::string shown_reference =
      by_id ? std::string(reference) : parse_reference(reference).to_string();
  std::optional<Handles> handles = open_store(root_, ownership_, false);
  if (!handles) unknown_reference(shown_reference, root_);
  // Shared store lock across resolve + flock: a remover needs the exclusive lock to decide.
  base::UniqueFd shared = lock_store(handles->root.get(), LOCK_SH, root_);
  std::optional<ReferenceRecord> record;
  if (by_id) {
    for (auto& candidate : read_all_references(*handles, root_)) {
      if (candidate.id == reference) {
        record = std::move(candidate);
        break;
      }
    }
  } else {
    record = read_reference(*handles, parse_reference(reference), root_);
  }
  if (!record) unknown_reference(shown_reference, root_);
  ImageInfo info = describe(*handles, *record, root_);
  const std::string use = id_hex(record->id) + "/use.lock";
  base::UniqueFd fd(
      ::openat(handles->content.get(), use.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) throw_errno("cannot open", shown(root_, "content/" + use));
  lock(fd.get(), LOCK_SH, shown(root_, "content/" + use));
  return ImagePin(std::move(info), fd.release());
}

std::vector<ImageInfo> ImageStore::list() const {
  std::vector<ImageInfo> images;
  std::optional<Handles> handles = open_store(root_, ownership_, false);
  if (!handles) return images;
  base::UniqueFd shared = lock_store(handles->root.get(), LOCK_SH, root_);
  for (const auto& record : read_all_references(*handles, root_)) {
    images.push_back(describe(*handles, record, root_));
  }
  return images;
}

void ImageStore::remove(std::string_view reference) {
  const ImageReference parsed = parse_reference(reference);
  std::optional<Handles> handles = open_store(root_, ownership_, false);
  if (!handles) unknown_reference(parsed.to_string(), root_);
  std::vector<IncomingEntry> doomed;
  {
    base::UniqueFd exclusive = lock_store(handles->root.get(), LOCK_EX, root_);
    const std::optional<ReferenceRecord> record = read_reference(*handles, parsed, root_);
    if (!record) unknown_reference(parsed.to_string(), root_);
    bool shared_content = false;
    for (const auto& other : read_all_references(*handles, root_)) {
      if (other.id == record->id && !(other.reference == parsed)) shared_content = true;
    }
    if (!shared_content) {
      const std::string use = id_hex(record->id) + "/use.lock";
      base::UniqueFd fd(
          ::openat(handles->content.get(), use.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
      if (fd && ::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
        throw InvalidArgument("image '" + parsed.to_string() +
                                  "' is in use by a live sandbox (its content is pinned); "
                                  "dispose of the sandbox first",
                              "in_use");
      }
    }
    if (::unlinkat(handles->refs.get(), reference_file(parsed).c_str(), 0) != 0) {
      throw_errno("cannot remove", shown(root_, "refs/" + reference_file(parsed)));
    }
    if (::fsync(handles->refs.get()) != 0) throw_errno("cannot sync", shown(root_, "refs"));
    collect_garbage(*handles, root_, doomed);
    claim_abandoned(*handles, root_, doomed);
  }
  doomed.clear();
}

}  // namespace airlock::images
