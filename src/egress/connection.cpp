#include "egress/connection.hpp"

#include <netinet/tcp.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/syscall_error.hpp"
#include "egress/http_response.hpp"

namespace airlock::egress {
namespace {

constexpr std::size_t kPipeSize = 64 * 1024;
constexpr std::size_t kHeadReadChunk = 16 * 1024;
// How long an error response may take to reach a client before the connection is dropped.
constexpr auto kLinger = std::chrono::seconds(2);

bool would_block(int error) {
  return error == EAGAIN || error == EWOULDBLOCK || error == EINTR;
}

std::string milliseconds_text(std::chrono::milliseconds value) {
  return std::to_string(value.count()) + " ms";
}

}  // namespace

void Pipe::allocate(std::size_t size) {
  data = std::make_unique<char[]>(size);
  capacity = size;
  begin = end = 0;
}

void Pipe::load(std::string_view bytes) {
  std::memcpy(data.get() + end, bytes.data(), bytes.size());
  end += bytes.size();
}

Connection::Connection(ProxyCore& core, std::uint64_t id, const Listener& listener,
                       base::UniqueFd client)
    : core_(core),
      id_(id),
      listener_id_(listener.id),
      policy_(listener.policy),
      sandbox_id_(listener.sandbox_id),
      client_(std::move(client)),
      reader_(listener.policy.max_header_bytes()) {}

Connection::~Connection() {
  finish();
}

void Connection::start() {
  last_activity_ = core_.now();
  set_deadline(core_.now() + policy_.header_timeout());
  update_interest();
}

// ---- phases --------------------------------------------------------------------------------

void Connection::read_head() {
  char buffer[kHeadReadChunk];
  const ssize_t n = ::recv(client_.get(), buffer, sizeof buffer, 0);
  if (n < 0 && would_block(errno)) return;
  if (n <= 0) {
    decide(EgressVerdict::deny, EgressReason::client_closed, 0,
           n == 0 ? "the client closed before a complete request head"
                  : "reading the request head: " + base::errno_text(errno));
    finish();
    return;
  }
  switch (reader_.feed(std::string_view(buffer, static_cast<std::size_t>(n)))) {
    case RequestHeadReader::State::need_more:
      return;
    case RequestHeadReader::State::complete:
      evaluate_head();
      return;
    case RequestHeadReader::State::refused:
      break;
  }
  const RequestHead& refused = reader_.result();
  switch (refused.problem) {
    case HeadProblem::method_not_allowed:
      answer(EgressVerdict::deny, EgressReason::method_not_allowed, 405, refused.why);
      return;
    case HeadProblem::too_large:
      answer(EgressVerdict::deny, EgressReason::header_too_large, 431, refused.why);
      return;
    case HeadProblem::malformed:
    case HeadProblem::none:
      answer(EgressVerdict::deny, EgressReason::malformed_request, 400, refused.why);
      return;
  }
}

void Connection::evaluate_head() {
  target_ = reader_.result().target;
  if (!policy_.host_allowed(target_.host)) {
    answer(EgressVerdict::deny, EgressReason::host_not_allowed, 403,
           "the host matches no pattern of the allowlist");
    return;
  }
  if (!policy_.port_allowed(target_.port)) {
    answer(EgressVerdict::deny, EgressReason::port_not_allowed, 403,
           "port " + std::to_string(target_.port) + " is not among the allowed ports");
    return;
  }
  set_deadline(core_.now() + policy_.dial_timeout());
  if (target_.literal) {
    const IpAddress address = target_.literal->unmapped();
    if (auto refusal = policy_.address_refusal(address)) {
      answer(EgressVerdict::deny, EgressReason::nonglobal_address, 403,
             "the literal address is " + *refusal, address.to_string());
      return;
    }
    start_dialing({address});
    return;
  }
  phase_ = Phase::resolving;
  update_interest();
  core_.resolve(id_, target_.host);
}

void Connection::on_resolved(Resolution resolution) {
  if (phase_ != Phase::resolving) return;
  if (!resolution.error.empty()) {
    answer(EgressVerdict::error, EgressReason::resolution_failed, 502,
           "resolving the host failed: " + resolution.error);
    return;
  }
  // Every answer is judged before any is dialled: see egress.hpp for why one bad address
  // refuses the name.
  for (const auto& address : resolution.addresses) {
    if (auto refusal = policy_.address_refusal(address)) {
      answer(EgressVerdict::deny, EgressReason::nonglobal_address, 403,
             "the host resolves to an address that is " + *refusal, address.to_string());
      return;
    }
  }
  start_dialing(std::move(resolution.addresses));
}

void Connection::start_dialing(std::vector<IpAddress> candidates) {
  candidates_ = std::move(candidates);
  next_candidate_ = 0;
  phase_ = Phase::dialing;
  dial_next();
}

void Connection::dial_next() {
  if (upstream_) {
    core_.watch(upstream_.get(), make_token(id_, Role::upstream), 0, upstream_interest_);
    upstream_.reset();
  }
  while (next_candidate_ < candidates_.size()) {
    const IpAddress& address = candidates_[next_candidate_++];
    dialled_ = address.to_string();
    const int domain = address.family == IpAddress::Family::v4 ? AF_INET : AF_INET6;
    base::UniqueFd fd(::socket(domain, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd) {
      last_dial_error_ = "socket: " + base::errno_text(errno);
      continue;
    }
    sockaddr_storage storage{};
    const socklen_t length = address.to_sockaddr(target_.port, storage);
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&storage), length) == 0) {
      upstream_ = std::move(fd);
      open_tunnel();
      return;
    }
    if (errno == EINPROGRESS) {
      upstream_ = std::move(fd);
      update_interest();
      return;
    }
    last_dial_error_ = base::errno_text(errno);
  }
  answer(EgressVerdict::error, EgressReason::dial_failed, 502,
         "no address of the host accepted the connection (last: " + last_dial_error_ + ")",
         dialled_);
}

void Connection::on_dial_result(int error) {
  if (error == 0) {
    open_tunnel();
    return;
  }
  last_dial_error_ = base::errno_text(error);
  dial_next();
}

void Connection::open_tunnel() {
  const int on = 1;
  ::setsockopt(upstream_.get(), IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
  phase_ = Phase::tunnel;
  decide(EgressVerdict::allow, EgressReason::allowed, 200, {}, dialled_);

  static constexpr std::string_view kEstablished = "HTTP/1.1 200 Connection Established\r\n\r\n";
  to_client_.allocate(kPipeSize);
  to_client_.load(kEstablished);
  const std::string_view early = reader_.leftover();  // bytes sent right after the head
  to_upstream_.allocate(std::max(kPipeSize, early.size()));
  to_upstream_.load(early);
  to_upstream_.readable = true;
  to_client_.readable = true;
  last_activity_ = core_.now();
  set_deadline(core_.now() + policy_.idle_timeout());
  pump();
}

// ---- the tunnel ----------------------------------------------------------------------------

void Connection::pump() {
  bool progress = true;
  while (progress && phase_ == Phase::tunnel) {
    progress = transfer(client_.get(), to_upstream_, upstream_.get());
    if (phase_ != Phase::tunnel) return;
    progress = transfer(upstream_.get(), to_client_, client_.get()) || progress;
  }
  if (phase_ != Phase::tunnel) return;
  if (to_upstream_.sink_shut && to_client_.sink_shut) {
    SPDLOG_DEBUG("egress tunnel closed sandbox={} host={} port={} up={} down={}", sandbox_id_,
                 target_.host, target_.port, bytes_up_, bytes_down_);
    finish();
    return;
  }
  update_interest();
}

bool Connection::transfer(int source, Pipe& pipe, int sink) {
  bool progress = false;
  std::uint64_t& counter = &pipe == &to_upstream_ ? bytes_up_ : bytes_down_;
  if (pipe.pending() > 0) {
    const ssize_t n = ::send(sink, pipe.data.get() + pipe.begin, pipe.pending(), MSG_NOSIGNAL);
    if (n > 0) {
      pipe.begin += static_cast<std::size_t>(n);
      if (pipe.begin == pipe.end) pipe.begin = pipe.end = 0;
      counter += static_cast<std::uint64_t>(n);
      last_activity_ = core_.now();
      progress = true;
    } else if (n < 0 && !would_block(errno)) {
      SPDLOG_DEBUG("egress tunnel aborted sandbox={} host={}: send: {}", sandbox_id_, target_.host,
                   base::errno_text(errno));
      finish();
      return false;
    }
  }
  if (pipe.space() == 0 && pipe.begin > 0) {
    std::memmove(pipe.data.get(), pipe.data.get() + pipe.begin, pipe.pending());
    pipe.end -= pipe.begin;
    pipe.begin = 0;
  }
  if (pipe.readable && !pipe.source_done && pipe.space() > 0) {
    const std::size_t wanted = pipe.space();
    const ssize_t n = ::recv(source, pipe.data.get() + pipe.end, wanted, 0);
    if (n > 0) {
      // A short read almost always drained the socket; epoll is level-triggered and reports
      // what is left, so skipping the read that would only say EAGAIN loses nothing.
      if (static_cast<std::size_t>(n) < wanted) pipe.readable = false;
      pipe.end += static_cast<std::size_t>(n);
      last_activity_ = core_.now();
      progress = true;
    } else if (n == 0) {
      pipe.source_done = true;
      progress = true;
    } else if (would_block(errno)) {
      pipe.readable = false;
    } else {
      SPDLOG_DEBUG("egress tunnel aborted sandbox={} host={}: recv: {}", sandbox_id_, target_.host,
                   base::errno_text(errno));
      finish();
      return false;
    }
  }
  if (pipe.source_done && pipe.pending() == 0 && !pipe.sink_shut) {
    ::shutdown(sink, SHUT_WR);  // relay the half-close; the other direction keeps flowing
    pipe.sink_shut = true;
    progress = true;
  }
  return progress;
}

// ---- refusals ------------------------------------------------------------------------------

void Connection::answer(EgressVerdict verdict, EgressReason reason, int status, std::string detail,
                        std::string address) {
  const std::string response = error_response(status, reason, detail);
  decide(verdict, reason, status, std::move(detail), std::move(address));
  if (upstream_) {
    core_.watch(upstream_.get(), make_token(id_, Role::upstream), 0, upstream_interest_);
    upstream_.reset();
  }
  phase_ = Phase::answering;
  to_client_.allocate(response.size());
  to_client_.load(response);
  set_deadline(core_.now() + kLinger);
  linger();
}

// Sends the error response, half-closes, then reads and drops whatever the client still sends
// until it closes: closing with unread input would reset the connection and could destroy the
// response before the client reads it.
void Connection::linger() {
  if (to_client_.pending() > 0) {
    const ssize_t n = ::send(client_.get(), to_client_.data.get() + to_client_.begin,
                             to_client_.pending(), MSG_NOSIGNAL);
    if (n > 0) {
      to_client_.begin += static_cast<std::size_t>(n);
    } else if (n < 0 && !would_block(errno)) {
      finish();
      return;
    }
    if (to_client_.pending() > 0) {
      update_interest();
      return;
    }
  }
  if (!to_client_.sink_shut) {
    ::shutdown(client_.get(), SHUT_WR);
    to_client_.sink_shut = true;
  }
  char discard[4096];
  for (int round = 0; round < 16; ++round) {
    const ssize_t n = ::recv(client_.get(), discard, sizeof discard, 0);
    if (n > 0) continue;
    if (n < 0 && would_block(errno)) break;
    finish();  // EOF or an error: the client has what it will get
    return;
  }
  update_interest();
}

// ---- events --------------------------------------------------------------------------------

void Connection::on_client(std::uint32_t events) {
  switch (phase_) {
    case Phase::reading_head:
      read_head();
      return;
    case Phase::tunnel:
      if (events & (EPOLLIN | EPOLLHUP | EPOLLRDHUP | EPOLLERR)) to_upstream_.readable = true;
      pump();
      return;
    case Phase::answering:
      linger();
      return;
    case Phase::resolving:
    case Phase::dialing:
    case Phase::done:
      return;
  }
}

void Connection::on_upstream(std::uint32_t events) {
  if (phase_ == Phase::dialing) {
    int error = 0;
    socklen_t length = sizeof error;
    if (::getsockopt(upstream_.get(), SOL_SOCKET, SO_ERROR, &error, &length) != 0) error = errno;
    on_dial_result(error);
    return;
  }
  if (phase_ == Phase::tunnel) {
    if (events & (EPOLLIN | EPOLLHUP | EPOLLRDHUP | EPOLLERR)) to_client_.readable = true;
    pump();
  }
}

void Connection::on_timer() {
  const auto now = core_.now();
  if (now < deadline_) return;  // an entry for an older deadline; the current one is queued
  switch (phase_) {
    case Phase::reading_head:
      answer(EgressVerdict::deny, EgressReason::header_timeout, 408,
             "the request head did not complete within " +
                 milliseconds_text(policy_.header_timeout()));
      return;
    case Phase::resolving:
      answer(EgressVerdict::error, EgressReason::resolution_timeout, 504,
             "resolving the host took longer than " + milliseconds_text(policy_.dial_timeout()));
      return;
    case Phase::dialing:
      answer(EgressVerdict::error, EgressReason::dial_timeout, 504,
             "no connection within " + milliseconds_text(policy_.dial_timeout()) +
                 (last_dial_error_.empty() ? "" : " (earlier: " + last_dial_error_ + ")"),
             dialled_);
      return;
    case Phase::tunnel: {
      const auto idle_until = last_activity_ + policy_.idle_timeout();
      if (now < idle_until) {
        set_deadline(idle_until);
        return;
      }
      SPDLOG_DEBUG("egress tunnel idle sandbox={} host={} port={} up={} down={}", sandbox_id_,
                   target_.host, target_.port, bytes_up_, bytes_down_);
      finish();
      return;
    }
    case Phase::answering:
      finish();
      return;
    case Phase::done:
      return;
  }
}

void Connection::close_for_shutdown() {
  decide(EgressVerdict::error, EgressReason::listener_closed, 0,
         "the listener closed before the request was decided");
  finish();
}

// ---- bookkeeping ---------------------------------------------------------------------------

void Connection::decide(EgressVerdict verdict, EgressReason reason, int status, std::string detail,
                        std::string address) {
  if (decided_) return;
  decided_ = true;
  EgressDecision decision;
  decision.verdict = verdict;
  decision.reason = reason;
  decision.http_status = status;
  decision.sandbox_id = sandbox_id_;
  decision.host = target_.host;
  decision.port = target_.port;
  decision.address = std::move(address);
  decision.detail = std::move(detail);
  core_.emit(decision);
}

void Connection::set_deadline(Clock::time_point when) {
  deadline_ = when;
  core_.schedule(make_token(id_, Role::client), when);
}

void Connection::update_interest() {
  std::uint32_t client_wants = 0;
  std::uint32_t upstream_wants = 0;
  switch (phase_) {
    case Phase::reading_head:
      client_wants = EPOLLIN;
      break;
    case Phase::dialing:
      upstream_wants = EPOLLOUT;
      break;
    case Phase::tunnel:
      if (!to_upstream_.source_done && to_upstream_.space() > 0) client_wants |= EPOLLIN;
      if (to_client_.pending() > 0) client_wants |= EPOLLOUT;
      if (!to_client_.source_done && to_client_.space() > 0) upstream_wants |= EPOLLIN;
      if (to_upstream_.pending() > 0) upstream_wants |= EPOLLOUT;
      break;
    case Phase::answering:
      client_wants = to_client_.pending() > 0 ? EPOLLOUT : EPOLLIN;
      break;
    case Phase::resolving:
    case Phase::done:
      break;
  }
  if (client_) {
    core_.watch(client_.get(), make_token(id_, Role::client), client_wants, client_interest_);
  }
  if (upstream_) {
    core_.watch(upstream_.get(), make_token(id_, Role::upstream), upstream_wants,
                upstream_interest_);
  }
}

void Connection::finish() {
  phase_ = Phase::done;
  deadline_ = Clock::time_point::max();
  if (client_) {
    core_.watch(client_.get(), make_token(id_, Role::client), 0, client_interest_);
    client_.reset();
  }
  if (upstream_) {
    core_.watch(upstream_.get(), make_token(id_, Role::upstream), 0, upstream_interest_);
    upstream_.reset();
  }
}

}  // namespace airlock::egress
