#include "egress/proxy_core.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <climits>
#include <future>

#include "airlock/errors.hpp"
#include "base/syscall_error.hpp"
#include "egress/connection.hpp"
#include "egress/http_response.hpp"

namespace airlock::egress {
namespace {

constexpr int kMaxEvents = 128;
constexpr int kAcceptsPerWakeup = 64;
// After accept() runs out of descriptors the listener rests this long instead of spinning.
constexpr auto kDescriptorPause = std::chrono::milliseconds(100);

LookupFunction make_lookup(const EgressProxy::Resolver& override_for_tests) {
  if (!override_for_tests) return system_lookup;
  return [override_for_tests](const std::string& host) {
    Resolution resolution;
    for (const auto& text : override_for_tests(host)) {
      const auto address = IpAddress::parse(text);
      if (!address) {
        resolution.addresses.clear();
        resolution.error = "the resolver answered \"" + text + "\", which is not an IP address";
        return resolution;
      }
      resolution.addresses.push_back(address->unmapped());
    }
    if (resolution.addresses.empty()) resolution.error = "no address";
    return resolution;
  };
}

[[noreturn]] void throw_errno(const std::string& what) {
  const int error = errno;
  throw SystemError(what + ": " + base::errno_text(error), error);
}

}  // namespace

Listener::~Listener() {
  if (!unix_directory) return;
  // Remove the file only while it is still the socket this listener bound: another process
  // may have replaced it (adopting a live sandbox) and its listener must keep working.
  struct stat now {};
  if (::fstatat(unix_directory.get(), unix_name.c_str(), &now, AT_SYMLINK_NOFOLLOW) == 0 &&
      now.st_dev == unix_device && now.st_ino == unix_inode) {
    ::unlinkat(unix_directory.get(), unix_name.c_str(), 0);
  }
}

ProxyCore::ProxyCore(EgressProxy::Options options) : options_(std::move(options)) {
  epoll_.reset(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_) throw_errno("egress proxy: epoll_create1");
  wakeup_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wakeup_) throw_errno("egress proxy: eventfd");
  std::uint32_t registered = 0;
  watch(wakeup_.get(), make_token(0, Role::wakeup), EPOLLIN, registered);
  resolver_ = std::make_unique<ResolverPool>(options_.resolver_threads,
                                             make_lookup(options_.resolver_override_for_tests));
  thread_ = std::thread([this] { run(); });
  loop_thread_id_ = thread_.get_id();
}

ProxyCore::~ProxyCore() {
  stop();
}

void ProxyCore::stop() {
  std::call_once(stopped_, [this] {
    if (std::this_thread::get_id() == loop_thread_id_) {
      spdlog::critical("egress proxy: destroyed from its own event loop (a decision callback)");
      std::abort();
    }
    stop_requested_ = true;
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto written = ::write(wakeup_.get(), &one, sizeof one);
    if (thread_.joinable()) thread_.join();
    resolver_.reset();  // joins the resolver threads; their late answers find the queue closed
  });
}

// ---- work from other threads ---------------------------------------------------------------

bool ProxyCore::post(std::function<void()> task) {
  bool wake = false;
  {
    std::lock_guard lock(mutex_);
    if (queue_closed_) return false;
    wake = posted_.empty();
    posted_.push_back(std::move(task));
  }
  if (wake) {
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto written = ::write(wakeup_.get(), &one, sizeof one);
  }
  return true;
}

void ProxyCore::call(const std::function<void()>& task) {
  if (std::this_thread::get_id() == loop_thread_id_) {
    task();
    return;
  }
  std::promise<void> done;
  auto result = done.get_future();
  const bool posted = post([&task, &done] {
    try {
      task();
      done.set_value();
    } catch (...) {
      done.set_exception(std::current_exception());
    }
  });
  if (!posted) throw BackendError("the egress proxy has stopped");
  result.get();
}

void ProxyCore::drain_posted() {
  std::vector<std::function<void()>> tasks;
  {
    std::lock_guard lock(mutex_);
    tasks.swap(posted_);
  }
  for (auto& task : tasks) task();
}

std::uint64_t ProxyCore::add_listener(std::unique_ptr<Listener> listener) {
  std::uint64_t id = 0;
  call([&] {
    if (stop_requested_) throw BackendError("the egress proxy has stopped");
    id = next_id_++;
    listener->id = id;
    std::uint32_t registered = 0;
    watch(listener->fd.get(), make_token(id, Role::listener), EPOLLIN, registered);
    listeners_.emplace(id, std::move(listener));
  });
  return id;
}

void ProxyCore::remove_listener(std::uint64_t id) noexcept {
  if (std::this_thread::get_id() == loop_thread_id_) {
    post([this, id] { close_listener(id); });
    return;
  }
  try {
    call([&] { close_listener(id); });
  } catch (const std::exception&) {
    // The proxy has stopped, and stopping closed every listener.
  }
}

std::size_t ProxyCore::open_connections() const {
  return connection_count_.load();
}

std::size_t ProxyCore::open_connections(std::uint64_t listener_id) const {
  std::size_t count = 0;
  try {
    const_cast<ProxyCore*>(this)->call([&] {
      const auto found = listeners_.find(listener_id);
      if (found != listeners_.end()) count = found->second->connections.size();
    });
  } catch (const std::exception&) {
  }
  return count;
}

void ProxyCore::resolve(std::uint64_t connection_id, const std::string& host) {
  resolver_->submit(host, [this, connection_id](Resolution resolution) {
    post([this, connection_id, resolution = std::move(resolution)]() mutable {
      const auto found = connections_.find(connection_id);
      if (found == connections_.end()) return;  // the client left meanwhile
      found->second->on_resolved(std::move(resolution));
      if (found->second->finished()) destroy_connection(connection_id);
    });
  });
}

// ---- the loop ------------------------------------------------------------------------------

void ProxyCore::run() {
  epoll_event events[kMaxEvents];
  while (!stop_requested_.load()) {
    int timeout = -1;
    if (!timers_.empty()) {
      const auto wait =
          std::chrono::ceil<std::chrono::milliseconds>(timers_.top().when - Clock::now());
      timeout =
          static_cast<int>(std::clamp<std::chrono::milliseconds::rep>(wait.count(), 0, INT_MAX));
    }
    const int ready = ::epoll_wait(epoll_.get(), events, kMaxEvents, timeout);
    if (ready < 0 && errno != EINTR) {
      spdlog::error("egress proxy: epoll_wait: {}", base::errno_text(errno));
    }
    now_ = Clock::now();
    for (int i = 0; i < ready; ++i) {
      const std::uint64_t token = events[i].data.u64;
      const auto role = static_cast<Role>(token & 3);
      const std::uint64_t id = token >> 2;
      if (role == Role::wakeup) {
        std::uint64_t ignored = 0;
        [[maybe_unused]] const auto n = ::read(wakeup_.get(), &ignored, sizeof ignored);
      } else if (role == Role::listener) {
        const auto found = listeners_.find(id);
        if (found != listeners_.end()) on_listener_ready(*found->second);
      } else {
        dispatch_connection(id, role, events[i].events);
      }
    }
    drain_posted();
    fire_timers();
  }
  // Closing: run what was handed in before the queue closed (listener changes must not wait
  // forever), then end every connection and listener.
  std::vector<std::function<void()>> last;
  {
    std::lock_guard lock(mutex_);
    queue_closed_ = true;
    last.swap(posted_);
  }
  for (auto& task : last) task();
  close_everything();
}

void ProxyCore::watch(int fd, std::uint64_t token, std::uint32_t events, std::uint32_t& current) {
  if (events == current) return;
  epoll_event event{};
  event.events = events;
  event.data.u64 = token;
  const int op = current == 0 ? EPOLL_CTL_ADD : (events == 0 ? EPOLL_CTL_DEL : EPOLL_CTL_MOD);
  if (::epoll_ctl(epoll_.get(), op, fd, &event) != 0) {
    spdlog::error("egress proxy: epoll_ctl: {}", base::errno_text(errno));
  }
  current = events;
}

void ProxyCore::schedule(std::uint64_t token, Clock::time_point when) {
  timers_.push(Timer{when, token});
}

void ProxyCore::fire_timers() {
  while (!timers_.empty() && timers_.top().when <= now_) {
    const std::uint64_t token = timers_.top().token;
    timers_.pop();
    const std::uint64_t id = token >> 2;
    if (static_cast<Role>(token & 3) == Role::listener) {
      const auto found = listeners_.find(id);
      if (found == listeners_.end() || !found->second->paused) continue;
      found->second->paused = false;
      std::uint32_t registered = 0;
      watch(found->second->fd.get(), make_token(id, Role::listener), EPOLLIN, registered);
      continue;
    }
    const auto found = connections_.find(id);
    if (found == connections_.end()) continue;
    found->second->on_timer();
    if (found->second->finished()) destroy_connection(id);
  }
}

// ---- listeners and connections -------------------------------------------------------------

void ProxyCore::on_listener_ready(Listener& listener) {
  for (int i = 0; i < kAcceptsPerWakeup; ++i) {
    base::UniqueFd client(
        ::accept4(listener.fd.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!client) {
      const int error = errno;
      if (error == EAGAIN || error == EWOULDBLOCK) return;
      if (error == EINTR || error == ECONNABORTED || error == EPROTO) continue;
      spdlog::warn("egress proxy: accept on {}: {}; pausing the listener", listener.endpoint,
                   base::errno_text(error));
      listener.paused = true;
      std::uint32_t registered = EPOLLIN;
      watch(listener.fd.get(), make_token(listener.id, Role::listener), 0, registered);
      schedule(make_token(listener.id, Role::listener), now_ + kDescriptorPause);
      return;
    }
    if (listener.tcp) {
      const int on = 1;
      ::setsockopt(client.get(), IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
    }
    if (listener.connections.size() >= listener.policy.max_connections()) {
      refuse_over_capacity(listener, std::move(client));
      continue;
    }
    const std::uint64_t id = next_id_++;
    auto connection = std::make_unique<Connection>(*this, id, listener, std::move(client));
    Connection& started = *connection;
    connections_.emplace(id, std::move(connection));
    listener.connections.insert(id);
    ++connection_count_;
    started.start();
  }
}

// Past the bound nothing is queued or parsed: the refusal is written at once and the socket
// closed, so a flood costs one accept and one write per connection.
void ProxyCore::refuse_over_capacity(Listener& listener, base::UniqueFd client) {
  const std::string response = error_response(503, EgressReason::over_capacity, {});
  [[maybe_unused]] const auto sent =
      ::send(client.get(), response.data(), response.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  ::shutdown(client.get(), SHUT_WR);
  char discard[4096];
  for (int round = 0; round < 4; ++round) {  // unread input would turn the close into a reset
    if (::recv(client.get(), discard, sizeof discard, MSG_DONTWAIT) <= 0) break;
  }
  EgressDecision decision;
  decision.verdict = EgressVerdict::deny;
  decision.reason = EgressReason::over_capacity;
  decision.http_status = 503;
  decision.sandbox_id = listener.sandbox_id;
  decision.detail = "the listener already holds " + std::to_string(listener.connections.size()) +
                    " connections (the bound)";
  emit(decision);
}

void ProxyCore::dispatch_connection(std::uint64_t id, Role role, std::uint32_t events) {
  const auto found = connections_.find(id);
  if (found == connections_.end()) return;  // closed earlier in this batch
  if (role == Role::client) {
    found->second->on_client(events);
  } else {
    found->second->on_upstream(events);
  }
  if (found->second->finished()) destroy_connection(id);
}

void ProxyCore::destroy_connection(std::uint64_t id) {
  const auto found = connections_.find(id);
  if (found == connections_.end()) return;
  const auto listener = listeners_.find(found->second->listener_id());
  if (listener != listeners_.end()) listener->second->connections.erase(id);
  connections_.erase(found);
  --connection_count_;
}

void ProxyCore::close_listener(std::uint64_t id) {
  const auto found = listeners_.find(id);
  if (found == listeners_.end()) return;
  Listener& listener = *found->second;
  for (const std::uint64_t connection_id : listener.connections) {
    const auto connection = connections_.find(connection_id);
    if (connection == connections_.end()) continue;
    connection->second->close_for_shutdown();
    connections_.erase(connection);
    --connection_count_;
  }
  listener.connections.clear();
  std::uint32_t registered = listener.paused ? 0u : static_cast<std::uint32_t>(EPOLLIN);
  watch(listener.fd.get(), make_token(id, Role::listener), 0, registered);
  spdlog::info("egress proxy: closed {} (sandbox {})", listener.endpoint, listener.sandbox_id);
  // By key: a decision callback above may have opened a listener and rehashed the map.
  listeners_.erase(id);  // closes the socket and removes its file
}

void ProxyCore::close_everything() {
  std::vector<std::uint64_t> ids;
  ids.reserve(listeners_.size());
  for (const auto& [id, listener] : listeners_) ids.push_back(id);
  for (const auto id : ids) close_listener(id);
}

void ProxyCore::emit(const EgressDecision& decision) {
  if (decision.verdict == EgressVerdict::allow) {
    spdlog::info("egress allow sandbox={} host={} port={} address={}", decision.sandbox_id,
                 decision.host, decision.port, decision.address);
  } else {
    const auto level = decision.reason == EgressReason::client_closed ||
                               decision.reason == EgressReason::listener_closed
                           ? spdlog::level::info
                           : spdlog::level::warn;
    spdlog::log(level, "egress {} {} status={} sandbox={} host={} port={} address={}: {}",
                to_string(decision.verdict), to_string(decision.reason), decision.http_status,
                decision.sandbox_id, decision.host.empty() ? "-" : decision.host, decision.port,
                decision.address.empty() ? "-" : decision.address, decision.detail);
  }
  if (!options_.on_decision) return;
  try {
    options_.on_decision(decision);
  } catch (const std::exception& error) {
    spdlog::error("egress proxy: the decision callback threw: {}", error.what());
  } catch (...) {
    spdlog::error("egress proxy: the decision callback threw");
  }
}

}  // namespace airlock::egress
