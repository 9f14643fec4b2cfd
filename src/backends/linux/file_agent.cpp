#include "backends/linux/file_agent.hpp"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "airlock/errors.hpp"
#include "backends/linux/file_plane.hpp"
#include "backends/linux/protocol.hpp"
#include "backends/linux/wire.hpp"
#include "base/syscall_error.hpp"

namespace airlock::linux_backend {
namespace {

using file_agent::Op;

constexpr std::size_t kMaxMessage = 64 * 1024;

// Bytes in a sealed-size memfd (a request's content, a read's result): a SEQPACKET message is
// bounded by the socket buffer, a file is not.
base::UniqueFd bytes_in_memfd(std::string_view bytes) {
  base::UniqueFd memory(::memfd_create("airlock-file-agent", MFD_CLOEXEC));
  if (!memory) return memory;
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t wrote = ::write(memory.get(), bytes.data() + done, bytes.size() - done);
    if (wrote <= 0) return base::UniqueFd();
    done += static_cast<std::size_t>(wrote);
  }
  return memory;
}

bool read_memfd(int fd, std::uint64_t limit, std::string& out) {
  struct stat info {};
  if (::fstat(fd, &info) != 0 || info.st_size < 0 ||
      static_cast<std::uint64_t>(info.st_size) > limit) {
    return false;
  }
  out.resize(static_cast<std::size_t>(info.st_size));
  std::size_t done = 0;
  while (done < out.size()) {
    const ssize_t got = ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(done));
    if (got <= 0) return false;
    done += static_cast<std::size_t>(got);
  }
  return true;
}

void put_entry(wire::Writer& writer, const SandboxEntry& entry) {
  writer.bytes(entry.path);
  writer.u32(static_cast<std::uint32_t>(entry.kind));
  writer.u32(entry.size_bytes ? 1 : 0);
  writer.u64(entry.size_bytes.value_or(0));
}

SandboxEntry get_entry(wire::Reader& reader) {
  SandboxEntry entry;
  entry.path = reader.bytes();
  entry.kind = static_cast<EntryKind>(reader.u32());
  const bool sized = reader.u32() != 0;
  const std::uint64_t size = reader.u64();
  if (sized) entry.size_bytes = size;
  return entry;
}

// ---- the agent ------------------------------------------------------------------------------

// One error, in full, so that the host raises the very type the host-side plane would have.
std::string encode_error(const std::exception& error) {
  wire::Writer writer;
  writer.u32(1);
  const auto* known = dynamic_cast<const Error*>(&error);
  writer.bytes(known != nullptr ? known->type() : std::string("BackendError"));
  writer.bytes(error.what());
  writer.bytes(known != nullptr ? known->check() : std::string());
  const auto* system = dynamic_cast<const SystemError*>(&error);
  writer.u32(static_cast<std::uint32_t>(system != nullptr ? system->error_number() : 0));
  writer.bytes(system != nullptr ? system->path() : std::string());
  const auto* cap = dynamic_cast<const TransferCapExceeded*>(&error);
  writer.bytes(cap != nullptr ? cap->cap() : std::string());
  writer.bytes(cap != nullptr ? cap->file() : std::string());
  writer.u64(cap != nullptr ? cap->limit() : 0);
  writer.u32(cap != nullptr && cap->size() ? 1 : 0);
  writer.u64(cap != nullptr ? cap->size().value_or(0) : 0);
  return writer.take();
}

void answer(int channel, const std::string& reply, int fd = -1) {
  (void)protocol::send_message(channel, reply, fd >= 0 ? &fd : nullptr, fd >= 0 ? 1 : 0);
}

void serve_one(int channel, int root, int proc, const std::string& request,
               std::vector<base::UniqueFd>& fds) {
  wire::Reader reader(request);
  const auto op = static_cast<Op>(reader.u32());
  const std::string path = reader.bytes();
  const std::string working_directory = reader.bytes();
  const std::uint64_t max_bytes = reader.u64();
  const bool recursive = reader.u32() != 0;
  if (!reader.finished()) {
    answer(channel, encode_error(BackendError("the file agent got a malformed request")));
    return;
  }
  // Created files are the guest root's already: this process *is* the guest root.
  const FilePlane plane(root, 0, 0, false, max_bytes, proc);
  try {
    wire::Writer reply;
    reply.u32(0);
    switch (op) {
      case Op::write: {
        // Straight from the host's memfd into the file, in the kernel.
        struct stat source {};
        if (fds.size() != 1 || ::fstat(fds.front().get(), &source) != 0 || source.st_size < 0) {
          throw BackendError("the file agent was not handed the file's bytes");
        }
        if (static_cast<std::uint64_t>(source.st_size) > max_bytes) {
          throw TransferCapExceeded("files_in.max_bytes_per_file", path, max_bytes,
                                    static_cast<std::uint64_t>(source.st_size));
        }
        plane.write_file_from(path, fds.front().get(), static_cast<std::uint64_t>(source.st_size),
                              working_directory);
        answer(channel, reply.take());
        return;
      }
      case Op::stat: {
        const auto entry = plane.stat_file(path, working_directory);
        reply.u32(entry ? 1 : 0);
        if (entry) put_entry(reply, *entry);
        answer(channel, reply.take());
        return;
      }
      case Op::read: {
        const std::string content = plane.read_file(path, working_directory, max_bytes);
        base::UniqueFd memory = bytes_in_memfd(content);
        if (!memory) throw SystemError("the file agent could not hand the file over", errno, path);
        answer(channel, reply.take(), memory.get());
        return;
      }
      case Op::list: {
        const auto entries = plane.list_dir(path, working_directory);
        reply.u32(static_cast<std::uint32_t>(entries.size()));
        for (const auto& entry : entries) put_entry(reply, entry);
        const std::string bytes = reply.take();
        if (bytes.size() > kMaxMessage - 64) {
          // A long listing travels like a read's bytes.
          base::UniqueFd memory = bytes_in_memfd(bytes);
          wire::Writer large;
          large.u32(2);
          answer(channel, large.take(), memory.get());
        } else {
          answer(channel, bytes);
        }
        return;
      }
      case Op::remove:
        plane.remove(path, working_directory, recursive);
        answer(channel, reply.take());
        return;
    }
    throw BackendError("the file agent got an unknown request");
  } catch (const std::exception& error) {
    answer(channel, encode_error(error));
  }
}

}  // namespace

[[noreturn]] void serve_file_agent() {
  const int channel = file_agent::kChannelFd;
  // The init's own namespaces: the user namespace first (this process's user created it, so
  // joining gives every capability in it), then the mount namespace it owns.
  // The host's /proc, kept: the sandbox's is another pid namespace's, where this process is not.
  base::UniqueFd proc(::open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!proc) ::_exit(9);
  if (::setns(file_agent::kUserNamespaceFd, CLONE_NEWUSER) != 0) ::_exit(10);
  if (::setns(file_agent::kMountNamespaceFd, CLONE_NEWNS) != 0) ::_exit(15);
  ::close(file_agent::kUserNamespaceFd);
  ::close(file_agent::kMountNamespaceFd);
  if (::setresgid(0, 0, 0) != 0 || ::setresuid(0, 0, 0) != 0) ::_exit(11);
  (void)::setgroups(0, nullptr);  // refused only where setgroups is denied, with none to drop
  if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) ::_exit(12);
  if (::chdir("/") != 0) ::_exit(13);
  base::UniqueFd root(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root) ::_exit(14);
  for (;;) {
    std::string request;
    std::vector<base::UniqueFd> fds;
    const long got = protocol::receive_message(channel, request, fds, kMaxMessage);
    if (got == -EINTR) continue;
    if (got <= 0) ::_exit(0);  // the host let go
    serve_one(channel, root.get(), proc.get(), request, fds);
  }
}

// ---- the host side --------------------------------------------------------------------------

struct RemoteFilePlane::Reply {
  std::string bytes;  // after the status word
  base::UniqueFd fd;
};

RemoteFilePlane::RemoteFilePlane(std::filesystem::path init_path, int user_namespace,
                                 int mount_namespace, std::uint64_t max_write_bytes)
    : max_write_bytes_(max_write_bytes) {
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
    throw BackendError("the sandbox's file agent could not be started",
                       base::errno_error("socketpair"));
  }
  channel_.reset(pair[0]);
  base::UniqueFd theirs(pair[1]);
  base::UniqueFd user(::fcntl(user_namespace, F_DUPFD_CLOEXEC, 10));
  base::UniqueFd mount(::fcntl(mount_namespace, F_DUPFD_CLOEXEC, 10));
  base::UniqueFd moved(::fcntl(theirs.get(), F_DUPFD_CLOEXEC, 10));
  if (!user || !mount || !moved) {
    throw BackendError("the sandbox's file agent could not be started",
                       base::errno_error("fcntl(F_DUPFD)"));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, moved.get(), file_agent::kChannelFd);
  posix_spawn_file_actions_adddup2(&actions, user.get(), file_agent::kUserNamespaceFd);
  posix_spawn_file_actions_adddup2(&actions, mount.get(), file_agent::kMountNamespaceFd);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t none;
  sigemptyset(&none);
  sigset_t all;
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attributes, &none);
  posix_spawnattr_setsigdefault(&attributes, &all);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  const std::string program = init_path.string();
  char* argv[] = {const_cast<char*>("airlock-init"), const_cast<char*>("--files"), nullptr};
  char* envp[] = {nullptr};
  const int error = ::posix_spawn(&agent_, program.c_str(), &actions, &attributes, argv, envp);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  if (error != 0) {
    agent_ = -1;
    throw BackendError("the sandbox's file agent could not be started",
                       base::SyscallError(error, "posix_spawn", program));
  }
}

RemoteFilePlane::~RemoteFilePlane() {
  channel_.reset();  // end of stream: the agent exits
  if (agent_ > 0) {
    int status = 0;
    while (::waitpid(agent_, &status, 0) < 0 && errno == EINTR) {
    }
  }
}

RemoteFilePlane::Reply RemoteFilePlane::call(Op op, std::string_view path,
                                             std::string_view working_directory,
                                             std::uint64_t max_bytes, bool recursive,
                                             std::string_view content) {
  wire::Writer request;
  request.u32(static_cast<std::uint32_t>(op));
  request.bytes(path);
  request.bytes(working_directory);
  request.u64(max_bytes);
  request.u32(recursive ? 1 : 0);
  if (request.data().size() > kMaxMessage) {
    throw InvalidArgument("a guest path of " + std::to_string(path.size()) +
                              " bytes is longer than the file agent takes",
                          "path");
  }
  base::UniqueFd attached;
  if (op == Op::write) {
    attached = bytes_in_memfd(content);
    if (!attached) {
      throw BackendError("the sandbox's file agent could not be handed the file",
                         base::errno_error("memfd_create/write"));
    }
  }
  std::lock_guard lock(mutex_);
  const int fd = attached.get();
  if (const int error = protocol::send_message(channel_.get(), request.data(),
                                               attached ? &fd : nullptr, attached ? 1 : 0);
      error != 0) {
    throw BackendError("the sandbox's file agent is gone", base::SyscallError(error, "sendmsg"));
  }
  std::string bytes;
  std::vector<base::UniqueFd> fds;
  long got;
  do {
    got = protocol::receive_message(channel_.get(), bytes, fds, kMaxMessage);
  } while (got == -EINTR);
  if (got <= 0) {
    throw BackendError("the sandbox's file agent is gone",
                       "reply: " + std::to_string(got) + " (the sandbox may have ended)");
  }
  wire::Reader reader(bytes);
  const std::uint32_t status = reader.u32();
  if (status == 1) {
    const std::string type = reader.bytes();
    const std::string message = reader.bytes();
    const std::string check = reader.bytes();
    const int error_number = static_cast<int>(reader.u32());
    const std::string error_path = reader.bytes();
    const std::string cap = reader.bytes();
    const std::string file = reader.bytes();
    const std::uint64_t limit = reader.u64();
    const bool sized = reader.u32() != 0;
    const std::uint64_t size = reader.u64();
    if (type == "ConfinementError") throw ConfinementError(message, check);
    if (type == "InvalidArgument") throw InvalidArgument(message, check);
    if (type == "NotFound") throw NotFound(message, error_path);
    if (type == "NotADirectory") throw NotADirectory(message, error_path);
    if (type == "IsADirectory") throw IsADirectory(message, error_path);
    if (type == "SystemError") throw SystemError(message, error_number, error_path);
    if (type == "SandboxTransferCapExceeded") {
      throw TransferCapExceeded(cap, file, limit, sized ? std::optional(size) : std::nullopt);
    }
    throw BackendError(message, "file agent: " + type);
  }
  Reply reply;
  if (status == 2) {
    // A long listing, in a memfd: its bytes are the reply proper.
    std::string inner;
    if (fds.size() != 1 || !read_memfd(fds.front().get(), std::uint64_t{1} << 30, inner)) {
      throw BackendError("the sandbox's file agent sent a listing it could not hand over");
    }
    wire::Reader again(inner);
    (void)again.u32();
    reply.bytes = inner.substr(4);
    return reply;
  }
  reply.bytes = bytes.substr(4);
  if (!fds.empty()) reply.fd = std::move(fds.front());
  return reply;
}

void RemoteFilePlane::write_file(std::string_view path, std::string_view content,
                                 std::string_view working_directory) {
  call(Op::write, path, working_directory, max_write_bytes_, false, content);
}

std::optional<SandboxEntry> RemoteFilePlane::stat_file(std::string_view path,
                                                       std::string_view working_directory) {
  const Reply reply = call(Op::stat, path, working_directory, 0, false, {});
  wire::Reader reader(reply.bytes);
  if (reader.u32() == 0) return std::nullopt;
  return get_entry(reader);
}

std::string RemoteFilePlane::read_file(std::string_view path, std::string_view working_directory,
                                       std::uint64_t max_bytes) {
  const Reply reply = call(Op::read, path, working_directory, max_bytes, false, {});
  std::string content;
  if (!reply.fd || !read_memfd(reply.fd.get(), max_bytes, content)) {
    throw BackendError("the sandbox's file agent could not hand the file over", std::string(path));
  }
  return content;
}

std::vector<SandboxEntry> RemoteFilePlane::list_dir(std::string_view path,
                                                    std::string_view working_directory) {
  const Reply reply = call(Op::list, path, working_directory, 0, false, {});
  wire::Reader reader(reply.bytes);
  const std::uint32_t count = reader.u32();
  std::vector<SandboxEntry> entries;
  for (std::uint32_t i = 0; i < count && reader.ok(); ++i) entries.push_back(get_entry(reader));
  return entries;
}

void RemoteFilePlane::remove(std::string_view path, std::string_view working_directory,
                             bool recursive) {
  call(Op::remove, path, working_directory, 0, recursive, {});
}

}  // namespace airlock::linux_backend
