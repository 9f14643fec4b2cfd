#include "backends/gvisor/guest_channel.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "airlock/errors.hpp"
#include "backends/kit/guest/channel_frames.hpp"
#include "backends/gvisor/unix_path.hpp"

namespace airlock::gvisor_backend {
namespace {

using Clock = std::chrono::steady_clock;

// How long the shepherd may take to hand over the listening descriptor, and a connection to
// show its token (the keeper writes it the moment it connects).
constexpr auto kBrokerAnswer = std::chrono::seconds(5);
constexpr auto kTokenWait = std::chrono::milliseconds(250);

int milliseconds_until(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 60'000));
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char difference = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    difference |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return difference == 0;
}

// The token frame, read within `wait`: exactly its bytes, nothing past them.
bool shows_token(int connection, const std::string& token, Clock::time_point until) {
  const std::size_t expected = gvisor_guest::kFrameHeader + token.size();
  std::string got;
  char buffer[64];
  while (got.size() < expected) {
    pollfd watch{connection, POLLIN, 0};
    const int ready = ::poll(&watch, 1, milliseconds_until(until));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return false;
    const ssize_t read = ::read(connection, buffer, std::min(sizeof buffer, expected - got.size()));
    if (read < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (read <= 0) return false;
    got.append(buffer, static_cast<std::size_t>(read));
  }
  return constant_time_equal(got, gvisor_guest::frame(gvisor_guest::kToken, token));
}

[[noreturn]] void gone(const std::string& detail) {
  throw BackendError("the sandbox's container is gone or could not run the command", detail);
}

}  // namespace

GuestChannel::GuestChannel(std::filesystem::path broker_socket, std::filesystem::path token_file)
    : broker_socket_(std::move(broker_socket)), token_file_(std::move(token_file)) {}

void GuestChannel::attach_locked() {
  if (gone_) gone("its shepherd hung up: the sandbox's processes have ended");
  if (listener_) return;
  base::UniqueFd token(::open(token_file_.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  char text[128];
  const ssize_t size = token ? ::read(token.get(), text, sizeof text) : -1;
  if (size != static_cast<ssize_t>(gvisor_guest::kTokenLength)) {
    gone("no token at " + token_file_.string());
  }
  base::UniqueFd broker(gvisor_guest::connect_unix_path(broker_socket_.string()));
  if (!broker) gone("connecting to " + broker_socket_.string() + ": " + std::strerror(errno));
  pollfd watch{broker.get(), POLLIN, 0};
  const auto until = Clock::now() + kBrokerAnswer;
  int ready;
  do {
    ready = ::poll(&watch, 1, milliseconds_until(until));
  } while (ready < 0 && errno == EINTR);
  char byte = 0;
  iovec data{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr message{};
  message.msg_iov = &data;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof control;
  const ssize_t got = ready > 0 ? ::recvmsg(broker.get(), &message, MSG_CMSG_CLOEXEC) : -1;
  const cmsghdr* header = got == 1 ? CMSG_FIRSTHDR(&message) : nullptr;
  if (header == nullptr || header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS ||
      header->cmsg_len != CMSG_LEN(sizeof(int))) {
    gone("its shepherd gave no keeper socket");
  }
  int listener = -1;
  std::memcpy(&listener, CMSG_DATA(header), sizeof listener);
  ::fcntl(listener, F_SETFL, ::fcntl(listener, F_GETFL) | O_NONBLOCK);
  token_.assign(text, static_cast<std::size_t>(size));
  broker_ = std::move(broker);
  listener_.reset(listener);
}

base::UniqueFd GuestChannel::take(Clock::time_point deadline, std::stop_token stop) {
  int listener;
  int broker;
  std::string token;
  {
    std::lock_guard lock(mutex_);
    attach_locked();
    listener = listener_.get();
    broker = broker_.get();
    token = token_;
  }
  base::UniqueFd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  std::stop_callback on_stop(stop, [&wake] {
    const std::uint64_t one = 1;
    (void)!::write(wake.get(), &one, sizeof one);
  });
  for (;;) {
    if (stop.stop_requested() || Clock::now() >= deadline) return {};
    pollfd watch[3] = {{listener, POLLIN, 0}, {broker, POLLIN, 0}, {wake.get(), POLLIN, 0}};
    if (::poll(watch, 3, milliseconds_until(deadline)) < 0 && errno != EINTR) {
      gone(std::string("poll: ") + std::strerror(errno));
    }
    if (watch[1].revents != 0) {
      std::lock_guard lock(mutex_);
      gone_ = true;
      gone("its shepherd hung up: the sandbox's processes have ended");
    }
    if ((watch[0].revents & POLLIN) == 0) continue;
    base::UniqueFd connection(::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!connection) continue;  // another thread or process took it
    if (shows_token(connection.get(), token, std::min(deadline, Clock::now() + kTokenWait))) {
      return connection;
    }
    // Not the keeper (a guest process may connect here too), or a keeper connection that died.
  }
}

int GuestChannel::drain(std::chrono::milliseconds quiet) {
  int listener;
  {
    std::lock_guard lock(mutex_);
    attach_locked();
    listener = listener_.get();
  }
  int closed = 0;
  for (;;) {
    pollfd watch{listener, POLLIN, 0};
    const int ready = ::poll(&watch, 1, static_cast<int>(quiet.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return closed;
    base::UniqueFd connection(::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (connection) ++closed;
  }
}

}  // namespace airlock::gvisor_backend
