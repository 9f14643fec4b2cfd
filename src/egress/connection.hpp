// One accepted client connection, from its first byte to the end of its tunnel.
//
//   reading_head ──complete──▶ resolving ──addresses──▶ dialing ──connected──▶ tunnel
//        │                        │                       │                     │
//        └──refused / timeout─────┴───────refused─────────┴──▶ answering ──▶ done
//                                                                (error response, then a short
//                                                                 linger so it is not lost to RST)
//
// Every transition happens on the loop thread. Exactly one decision is emitted per connection.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "airlock/egress.hpp"
#include "base/unique_fd.hpp"
#include "egress/proxy_core.hpp"
#include "egress/request_head.hpp"
#include "egress/resolver.hpp"

namespace airlock::egress {

// Bytes in flight in one direction, with the state of its two ends.
struct Pipe {
  std::unique_ptr<char[]> data;
  std::size_t capacity = 0;
  std::size_t begin = 0;
  std::size_t end = 0;
  bool readable = false;     // the source reported readiness since the last EAGAIN
  bool source_done = false;  // EOF (or a read error) on the source
  bool sink_shut = false;    // shutdown(SHUT_WR) sent to the sink after source_done

  void allocate(std::size_t size);
  std::size_t pending() const noexcept { return end - begin; }
  std::size_t space() const noexcept { return capacity - end; }
  void load(std::string_view bytes);
};

class Connection {
 public:
  Connection(ProxyCore& core, std::uint64_t id, const Listener& listener, base::UniqueFd client);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  void start();
  void on_client(std::uint32_t events);
  void on_upstream(std::uint32_t events);
  void on_timer();
  void on_resolved(Resolution resolution);
  // The listener or proxy is closing: end now, reporting a decision if none was made yet.
  void close_for_shutdown();

  bool finished() const noexcept { return phase_ == Phase::done; }
  std::uint64_t listener_id() const noexcept { return listener_id_; }

 private:
  enum class Phase : std::uint8_t { reading_head, resolving, dialing, tunnel, answering, done };

  void read_head();
  void evaluate_head();
  void start_dialing(std::vector<IpAddress> candidates);
  void dial_next();
  void on_dial_result(int error);
  void open_tunnel();
  void pump();
  bool transfer(int source, Pipe& pipe, int sink);
  void answer(EgressVerdict verdict, EgressReason reason, int status, std::string detail,
              std::string address = {});
  void linger();
  void decide(EgressVerdict verdict, EgressReason reason, int status, std::string detail,
              std::string address = {});
  void set_deadline(Clock::time_point when);
  void update_interest();
  void finish();

  ProxyCore& core_;
  std::uint64_t id_;
  std::uint64_t listener_id_;
  const CompiledPolicy& policy_;
  const std::string& sandbox_id_;
  base::UniqueFd client_;
  base::UniqueFd upstream_;
  std::uint32_t client_interest_ = 0;
  std::uint32_t upstream_interest_ = 0;
  Phase phase_ = Phase::reading_head;
  bool decided_ = false;

  RequestHeadReader reader_;
  ConnectTarget target_;
  std::vector<IpAddress> candidates_;
  std::size_t next_candidate_ = 0;
  std::string dialled_;  // "address" text of the current or last attempt
  std::string last_dial_error_;

  Clock::time_point deadline_ = Clock::time_point::max();
  Clock::time_point last_activity_;
  Pipe to_upstream_;
  Pipe to_client_;
  std::uint64_t bytes_up_ = 0;
  std::uint64_t bytes_down_ = 0;
};

}  // namespace airlock::egress
