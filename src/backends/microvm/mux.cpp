#include "backends/microvm/mux.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace airlock::microvm_backend {
namespace {

void put_u32(std::string& out, std::uint32_t value) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

std::uint32_t get_u32(const char* data) {
  std::uint32_t value = 0;
  for (int i = 0; i < 4; ++i) {
    value |= static_cast<std::uint32_t>(static_cast<unsigned char>(data[i])) << (8 * i);
  }
  return value;
}

void set_nonblocking(int fd) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

bool parse_count(const std::string& text, std::uint64_t& value) {
  if (text.empty() || text.size() > 12) return false;
  value = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return true;
}

void pause_ms(long milliseconds) {
  timespec pause{milliseconds / 1000, (milliseconds % 1000) * 1000000};
  ::nanosleep(&pause, nullptr);
}

}  // namespace

std::string mux_frame(char type, std::uint32_t stream, std::string_view payload) {
  std::string out;
  out.reserve(kMuxHeader + payload.size());
  out.push_back(type);
  put_u32(out, stream);
  put_u32(out, static_cast<std::uint32_t>(payload.size()));
  out.append(payload);
  return out;
}

Multiplexer::Multiplexer(int port, bool host_side, OpenHandler on_open, ControlHandler on_control)
    : port_(port),
      host_side_(host_side),
      on_open_(std::move(on_open)),
      on_control_(std::move(on_control)),
      next_id_(host_side ? 1 : 2) {
  int ends[2];
  if (::pipe2(ends, O_CLOEXEC | O_NONBLOCK) == 0) {
    wake_read_.reset(ends[0]);
    wake_write_.reset(ends[1]);
  }
  set_nonblocking(port_);
}

Multiplexer::~Multiplexer() = default;

void Multiplexer::wake() {
  if (wake_write_) (void)!::write(wake_write_.get(), "w", 1);
}

void Multiplexer::queue(std::string frame) {
  outgoing_ += frame;
}

base::UniqueFd Multiplexer::open(std::string_view kind, base::UniqueFd local) {
  base::UniqueFd theirs;
  std::lock_guard lock(mutex_);
  if (stopped_) return {};
  if (!local) {
    int ends[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends) != 0) return {};
    local.reset(ends[0]);
    theirs.reset(ends[1]);
  }
  set_nonblocking(local.get());
  const std::uint32_t id = next_id_;
  next_id_ += 2;
  streams_[id].local = std::move(local);
  queue(mux_frame(kOpen, id, kind));
  wake();
  return theirs;
}

void Multiplexer::send_control(char type, std::string_view payload) {
  std::lock_guard lock(mutex_);
  queue(mux_frame(type, 0, payload));
  wake();
}

void Multiplexer::add_watch(Watch watch) {
  std::lock_guard lock(mutex_);
  watches_.push_back(std::move(watch));
  wake();
}

void Multiplexer::stop() {
  std::lock_guard lock(mutex_);
  stopped_ = true;
  wake();
}

bool Multiplexer::flush_port() {
  while (!outgoing_.empty()) {
    const ssize_t wrote = ::write(port_, outgoing_.data(), outgoing_.size());
    if (wrote > 0) {
      outgoing_.erase(0, static_cast<std::size_t>(wrote));
      continue;
    }
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote < 0 && errno == EAGAIN) return true;
    return false;
  }
  return true;
}

// The local program no longer reads (EPIPE, ECONNRESET): what the peer sent it is dropped and
// credited, so the peer's window never stalls, and so is whatever it sends later. The other
// direction goes on: the program's last words (a command's status, its exit) are still in its
// socket, and reach the peer before the stream ends.
void Multiplexer::drop_writes(std::uint32_t id, Stream& stream) {
  if (!stream.to_local.empty()) {
    queue(mux_frame(kCredit, id, std::to_string(stream.to_local.size())));
    stream.to_local.clear();
  }
  stream.write_dead = true;
  stream.local_shut = true;
}

void Multiplexer::flush_to_local(std::uint32_t id, Stream& stream) {
  std::size_t sent = 0;
  while (!stream.write_dead && sent < stream.to_local.size()) {
    const ssize_t wrote = ::send(stream.local.get(), stream.to_local.data() + sent,
                                 stream.to_local.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (wrote > 0) {
      sent += static_cast<std::size_t>(wrote);
      continue;
    }
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote < 0 && errno == EAGAIN) break;
    stream.to_local.erase(0, sent);
    if (sent > 0 && !stream.peer_gone) queue(mux_frame(kCredit, id, std::to_string(sent)));
    sent = 0;
    drop_writes(id, stream);
    break;
  }
  if (sent > 0) {
    stream.to_local.erase(0, sent);
    if (!stream.peer_gone) queue(mux_frame(kCredit, id, std::to_string(sent)));
  }
  if (stream.to_local.empty() && stream.peer_done && !stream.local_shut) {
    ::shutdown(stream.local.get(), SHUT_WR);
    stream.local_shut = true;
  }
  finish_if_done(id);
}

void Multiplexer::finish_if_done(std::uint32_t id) {
  const auto found = streams_.find(id);
  if (found == streams_.end()) return;
  const Stream& stream = found->second;
  // Both directions over: the local end said all it will (or the peer can hear no more), and
  // everything the peer sent was delivered (or cannot be).
  const bool reading_over = stream.local_read_done || stream.peer_gone;
  const bool writing_over = stream.local_shut || (stream.peer_gone && stream.to_local.empty());
  if (reading_over && writing_over) streams_.erase(found);
}

void Multiplexer::pump_local(std::uint32_t id, Stream& stream, short revents) {
  if ((revents & POLLOUT) != 0 && !stream.to_local.empty()) {
    flush_to_local(id, stream);
    if (streams_.find(id) == streams_.end()) return;
  }
  if ((revents & (POLLIN | POLLHUP | POLLERR)) == 0 || stream.local_read_done) return;
  if (stream.in_flight >= kWindow) return;
  char buffer[kMaxData];
  const std::size_t room =
      static_cast<std::size_t>(std::min<std::uint64_t>(kMaxData, kWindow - stream.in_flight));
  const ssize_t got = ::read(stream.local.get(), buffer, room);
  if (got > 0) {
    queue(mux_frame(kData, id, std::string_view(buffer, static_cast<std::size_t>(got))));
    stream.in_flight += static_cast<std::uint64_t>(got);
    return;
  }
  if (got < 0 && (errno == EAGAIN || errno == EINTR)) return;
  // The end of what the local program says. A unix socket closed with bytes of ours unread
  // reports ECONNRESET once its data is read, where it would otherwise report EOF: an end all
  // the same, after which it reads nothing either.
  if (got < 0) drop_writes(id, stream);
  stream.local_read_done = true;
  queue(mux_frame(kFin, id, {}));
  finish_if_done(id);
}

bool Multiplexer::handle_frame(char type, std::uint32_t id, std::string& payload) {
  if (id == 0) {
    if (type != kHello && type != kSetup && type != kReady) return false;
    controls_.emplace_back(type, std::move(payload));  // handed over once unlocked
    return true;
  }
  const bool peer_opened = (id % 2 == 1) != host_side_;
  if (type == kOpen) {
    if (!peer_opened || streams_.count(id) != 0 || payload.size() > 64) return false;
    // Every stream the peer opens costs this side a descriptor (and the host, a connection to
    // the egress proxy): past kMaxPeerStreams open at once, a new one is refused.
    std::size_t theirs = 0;
    for (const auto& entry : streams_) theirs += ((entry.first % 2 == 1) != host_side_) ? 1 : 0;
    if (theirs >= kMaxPeerStreams) {
      queue(mux_frame(kReset, id, {}));
      return true;
    }
    base::UniqueFd local = on_open_ ? on_open_(payload) : base::UniqueFd();
    if (!local) {
      queue(mux_frame(kReset, id, {}));
      return true;
    }
    set_nonblocking(local.get());
    streams_[id].local = std::move(local);
    return true;
  }
  const auto found = streams_.find(id);
  if (found == streams_.end()) {
    // A stream already over here. Its data is answered with a reset, so the peer stops sending
    // and ends its side (otherwise its window would fill and never be credited); anything else
    // raced our end and is dropped. A reset never answers a reset.
    if (type == kData) queue(mux_frame(kReset, id, {}));
    return type == kData || type == kCredit || type == kFin || type == kReset;
  }
  Stream& stream = found->second;
  switch (type) {
    case kData:
      if (stream.peer_done || stream.to_local.size() + payload.size() > kWindow) return false;
      if (stream.write_dead) {
        queue(mux_frame(kCredit, id, std::to_string(payload.size())));
        return true;
      }
      stream.to_local += payload;
      flush_to_local(id, stream);
      return true;
    case kCredit: {
      std::uint64_t count = 0;
      if (!parse_count(payload, count) || count > stream.in_flight) return false;
      stream.in_flight -= count;
      return true;
    }
    case kFin:
      stream.peer_done = true;
      flush_to_local(id, stream);
      return true;
    case kReset:
      // The peer's end is gone: nothing more goes to it, and the local end is closed once what
      // the peer sent before is delivered.
      stream.peer_gone = true;
      stream.peer_done = true;
      stream.local_read_done = true;
      flush_to_local(id, stream);
      return true;
    default:
      return false;
  }
}

std::string Multiplexer::run() {
  std::string incoming;
  std::size_t start = 0;
  std::vector<char> buffer(256u << 10);
  std::string why;
  std::unique_lock lock(mutex_);
  for (;;) {
    if (stopped_) {
      why = "stopped";
      break;
    }
    std::vector<pollfd> watch;
    std::vector<std::uint32_t> ids;
    watch.push_back({wake_read_.get(), POLLIN, 0});
    watch.push_back({port_, static_cast<short>(POLLIN | (outgoing_.empty() ? 0 : POLLOUT)), 0});
    for (auto& [id, stream] : streams_) {
      short events = 0;
      const bool reading = !stream.local_read_done && stream.in_flight < kWindow;
      if (reading) events |= POLLIN;
      if (!stream.to_local.empty()) events |= POLLOUT;
      // A stream waiting only for credit is not polled: its hang-up would wake the loop for
      // nothing until the credit comes.
      watch.push_back({events == 0 ? -1 : stream.local.get(), events, 0});
      ids.push_back(id);
    }
    const std::size_t first_watch = watch.size();
    for (const auto& extra : watches_) watch.push_back({extra.fd, POLLIN, 0});
    lock.unlock();
    const int ready = ::poll(watch.data(), watch.size(), -1);
    lock.lock();
    if (ready < 0) {
      if (errno == EINTR) continue;
      why = std::string("poll: ") + std::strerror(errno);
      break;
    }
    if ((watch[0].revents & POLLIN) != 0) {
      char drain[64];
      while (::read(wake_read_.get(), drain, sizeof drain) > 0) {
      }
    }
    const short port_events = watch[1].revents;
    if ((port_events & POLLIN) != 0) {
      const ssize_t got = ::read(port_, buffer.data(), buffer.size());
      if (got > 0) {
        incoming.append(buffer.data(), static_cast<std::size_t>(got));
      } else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
        if (!wait_for_host_) {
          why = got == 0 ? "the port closed" : std::string("port: ") + std::strerror(errno);
          break;
        }
        lock.unlock();
        pause_ms(5);
        lock.lock();
      }
    } else if ((port_events & (POLLHUP | POLLERR)) != 0) {
      if (!wait_for_host_) {
        why = "the port hung up";
        break;
      }
      // A virtio-serial port whose host side is not connected polls as hung up until it is.
      lock.unlock();
      pause_ms(5);
      lock.lock();
    }
    bool broken = false;
    while (incoming.size() - start >= kMuxHeader) {
      const char type = incoming[start];
      const std::uint32_t id = get_u32(incoming.data() + start + 1);
      const std::uint32_t size = get_u32(incoming.data() + start + 5);
      const std::uint32_t bound = type == kData ? kMaxData : kMaxControl;
      if (size > bound) {
        broken = true;
        break;
      }
      if (incoming.size() - start < kMuxHeader + size) break;
      std::string payload = incoming.substr(start + kMuxHeader, size);
      start += kMuxHeader + size;
      if (!handle_frame(type, id, payload)) {
        broken = true;
        break;
      }
    }
    if (start == incoming.size()) {
      incoming.clear();
      start = 0;
    } else if (start > (1u << 20)) {
      incoming.erase(0, start);
      start = 0;
    }
    if (broken) {
      why = "the peer broke the multiplexer's protocol";
      break;
    }
    for (std::size_t index = 0; index < ids.size(); ++index) {
      const short revents = watch[2 + index].revents;
      if (revents == 0) continue;
      const auto found = streams_.find(ids[index]);
      if (found == streams_.end()) continue;
      pump_local(ids[index], found->second, revents);
    }
    if (!flush_port()) {
      if (!wait_for_host_) {
        why = std::string("port write: ") + std::strerror(errno);
        break;
      }
    }
    std::vector<std::pair<char, std::string>> controls;
    controls.swap(controls_);
    std::vector<std::function<void()>> calls;
    for (std::size_t index = first_watch; index < watch.size(); ++index) {
      if ((watch[index].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
        calls.push_back(watches_[index - first_watch].ready);
      }
    }
    if (!calls.empty() || !controls.empty()) {
      lock.unlock();
      for (const auto& [type, payload] : controls) {
        if (on_control_) on_control_(type, payload);
      }
      for (const auto& call : calls) call();
      lock.lock();
    }
  }
  stopped_ = true;
  streams_.clear();
  return why;
}

}  // namespace airlock::microvm_backend
