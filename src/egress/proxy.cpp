// The public face of the proxy: opening listeners (sockets are made on the caller's thread, so
// that a bad path or a busy port fails right there) and the handles that close them.
#include <fcntl.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "airlock/egress.hpp"
#include "airlock/errors.hpp"
#include "base/syscall_error.hpp"
#include "egress/proxy_core.hpp"

namespace airlock {

struct EgressListener::Shared {
  explicit Shared(EgressProxy::Options options) : core(std::move(options)) {}
  egress::ProxyCore core;
};

namespace {

constexpr int kBacklog = 512;

[[noreturn]] void throw_errno(const std::string& what, const std::string& path = {}) {
  const int error = errno;
  throw SystemError(what + ": " + base::errno_text(error), error, path);
}

}  // namespace

// ---- EgressListener ------------------------------------------------------------------------

EgressListener::EgressListener(std::weak_ptr<Shared> proxy, std::uint64_t id, std::string endpoint,
                               std::uint16_t port)
    : proxy_(std::move(proxy)), id_(id), endpoint_(std::move(endpoint)), port_(port) {}

EgressListener::EgressListener(EgressListener&& other) noexcept
    : proxy_(std::move(other.proxy_)),
      id_(std::exchange(other.id_, 0)),
      endpoint_(std::move(other.endpoint_)),
      port_(std::exchange(other.port_, 0)) {}

EgressListener& EgressListener::operator=(EgressListener&& other) noexcept {
  if (this != &other) {
    close();
    proxy_ = std::move(other.proxy_);
    id_ = std::exchange(other.id_, 0);
    endpoint_ = std::move(other.endpoint_);
    port_ = std::exchange(other.port_, 0);
  }
  return *this;
}

EgressListener::~EgressListener() {
  close();
}

void EgressListener::close() noexcept {
  if (id_ == 0) return;
  if (const auto proxy = proxy_.lock()) proxy->core.remove_listener(id_);
  id_ = 0;
  proxy_.reset();
}

std::size_t EgressListener::open_connections() const {
  if (id_ == 0) return 0;
  const auto proxy = proxy_.lock();
  return proxy ? proxy->core.open_connections(id_) : 0;
}

// ---- EgressProxy ---------------------------------------------------------------------------

EgressProxy::EgressProxy() : EgressProxy(Options{}) {}

EgressProxy::EgressProxy(Options options)
    : shared_(std::make_shared<EgressListener::Shared>(std::move(options))) {}

EgressProxy::~EgressProxy() {
  shared_->core.stop();
}

std::size_t EgressProxy::open_connections() const {
  return shared_->core.open_connections();
}

EgressListener EgressProxy::listen(const std::filesystem::path& path, EgressPolicy policy,
                                   std::string sandbox_id, UnixSocketOptions options) {
  auto listener = std::make_unique<egress::Listener>();
  listener->policy = egress::CompiledPolicy::compile(policy);
  const std::string text = path.string();
  const std::string name = path.filename().string();
  if (text.empty() || name.empty() || name == "." || name == "..") {
    throw InvalidArgument("egress socket path \"" + text + "\" names no file",
                          "egress.socket_path");
  }
  // Everything happens beneath the directory's descriptor, and the socket is bound through
  // /proc/self/fd/N/<name>: a path of any length works (sun_path holds 108 bytes), and nothing
  // on the way is looked up twice.
  const std::filesystem::path parent = path.has_parent_path() ? path.parent_path() : ".";
  listener->unix_directory.reset(
      ::open(parent.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!listener->unix_directory) throw_errno("egress proxy: open " + parent.string(), text);
  const int directory = listener->unix_directory.get();
  const std::string bind_path = "/proc/self/fd/" + std::to_string(directory) + "/" + name;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (bind_path.size() >= sizeof address.sun_path) {
    throw InvalidArgument("egress socket name \"" + name + "\" is longer than a unix socket "
                              "can be named by",
                          "egress.socket_path");
  }
  std::memcpy(address.sun_path, bind_path.c_str(), bind_path.size() + 1);

  struct stat existing {};
  if (::fstatat(directory, name.c_str(), &existing, AT_SYMLINK_NOFOLLOW) == 0) {
    if (!S_ISSOCK(existing.st_mode)) {
      throw InvalidArgument(
          "egress socket path \"" + text + "\" exists and is not a socket; refusing to replace it",
          "egress.socket_path");
    }
    // A socket left by an earlier listener (ours, or a process that died): replace it.
    if (::unlinkat(directory, name.c_str(), 0) != 0 && errno != ENOENT) {
      throw_errno("egress proxy: removing the stale socket " + text, text);
    }
  } else if (errno != ENOENT) {
    throw_errno("egress proxy: lstat " + text, text);
  }

  listener->fd.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!listener->fd) throw_errno("egress proxy: socket(AF_UNIX)");
  if (::bind(listener->fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) !=
      0) {
    throw_errno("egress proxy: bind " + text, text);
  }
  struct stat bound {};
  if (::fstatat(directory, name.c_str(), &bound, AT_SYMLINK_NOFOLLOW) != 0) {
    throw_errno("egress proxy: lstat " + text, text);
  }
  listener->unix_name = name;  // from here on the listener removes the file when it goes
  listener->unix_device = bound.st_dev;
  listener->unix_inode = bound.st_ino;
  if (::fchmodat(directory, name.c_str(), options.mode, 0) != 0) {
    throw_errno("egress proxy: chmod " + text, text);
  }
  if (options.owner_uid || options.owner_gid) {
    const auto uid = options.owner_uid ? static_cast<uid_t>(*options.owner_uid) : uid_t(-1);
    const auto gid = options.owner_gid ? static_cast<gid_t>(*options.owner_gid) : gid_t(-1);
    if (::fchownat(directory, name.c_str(), uid, gid, AT_SYMLINK_NOFOLLOW) != 0) {
      throw_errno("egress proxy: chown " + text, text);
    }
  }
  if (::listen(listener->fd.get(), kBacklog) != 0)
    throw_errno("egress proxy: listen " + text, text);

  listener->sandbox_id = std::move(sandbox_id);
  listener->endpoint = "unix:" + text;
  const std::string endpoint = listener->endpoint;
  const std::string described = listener->policy.describe();
  const std::string sandbox = listener->sandbox_id;
  const std::uint64_t id = shared_->core.add_listener(std::move(listener));
  spdlog::info("egress proxy: serving {} for sandbox {}; allowing {}", endpoint, sandbox,
               described);
  return EgressListener(shared_, id, endpoint, 0);
}

EgressListener EgressProxy::listen_tcp(const std::string& address, std::uint16_t port,
                                       EgressPolicy policy, std::string sandbox_id) {
  auto listener = std::make_unique<egress::Listener>();
  listener->policy = egress::CompiledPolicy::compile(policy);
  const auto ip = egress::IpAddress::parse(address);
  if (!ip) {
    throw InvalidArgument("egress listen address \"" + address +
                              "\" is not an IP literal (e.g. 127.0.0.1, 0.0.0.0, ::)",
                          "egress.listen_address");
  }
  const int domain = ip->family == egress::IpAddress::Family::v4 ? AF_INET : AF_INET6;
  listener->fd.reset(::socket(domain, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!listener->fd) throw_errno("egress proxy: socket");
  const int on = 1;
  ::setsockopt(listener->fd.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  sockaddr_storage storage{};
  const socklen_t length = ip->to_sockaddr(port, storage);
  const std::string wanted = ip->to_string(port);
  if (::bind(listener->fd.get(), reinterpret_cast<const sockaddr*>(&storage), length) != 0) {
    throw_errno("egress proxy: bind " + wanted);
  }
  if (::listen(listener->fd.get(), kBacklog) != 0) throw_errno("egress proxy: listen " + wanted);
  sockaddr_storage bound{};
  socklen_t bound_length = sizeof bound;
  if (::getsockname(listener->fd.get(), reinterpret_cast<sockaddr*>(&bound), &bound_length) != 0) {
    throw_errno("egress proxy: getsockname " + wanted);
  }
  const std::uint16_t bound_port =
      ntohs(domain == AF_INET ? reinterpret_cast<const sockaddr_in*>(&bound)->sin_port
                              : reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port);

  listener->tcp = true;
  listener->sandbox_id = std::move(sandbox_id);
  listener->endpoint = ip->to_string(bound_port);
  const std::string endpoint = listener->endpoint;
  const std::string described = listener->policy.describe();
  const std::string sandbox = listener->sandbox_id;
  const std::uint64_t id = shared_->core.add_listener(std::move(listener));
  spdlog::info("egress proxy: serving {} for sandbox {}; allowing {}", endpoint, sandbox,
               described);
  return EgressListener(shared_, id, endpoint, bound_port);
}

}  // namespace airlock
