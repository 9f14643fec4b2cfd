// The multiplexer that carries every stream between the host and a microVM's agent over one
// virtio-serial port (a byte stream with no notion of connections): each command's channel
// (backends/kit/guest/channel_frames.hpp) and each egress connection is a stream of its own.
//
// Both ends run the same code. A stream is a socketpair on each side: whatever the local
// program writes into its end travels to the peer's end, and the reverse. Frames are a type
// byte, a 32-bit little-endian stream id, a 32-bit little-endian length and the payload:
//
//   kOpen    a new stream; the payload names its kind (kStreamCommand from the host,
//            kStreamEgress from the guest). Ids of streams the host opens are odd, the
//            guest's even, so the two never collide.
//   kData    bytes of a stream (at most kMaxData)
//   kCredit  decimal count of a stream's bytes the receiver has passed on to its local end: a
//            sender keeps at most kWindow bytes of a stream unacknowledged, so a stream whose
//            reader is slow never stalls the others, and a receiver never buffers more than
//            kWindow per stream
//   kFin     the sender's local end will write no more (a half-close, passed on as shutdown)
//   kReset   the sender's end is gone (refused, or its program vanished): the receiver sends
//            nothing more, delivers what it already holds, and closes its end
//   kHello   (guest, stream 0) the agent is up; the payload is kHelloText
//   kSetup   (host, stream 0) the clock, fresh randomness and the sandbox's settings (setup.hpp)
//   kReady   (guest, stream 0) the setup is applied; the payload is empty or an error line
//
// Each end treats the other as untrusted: an oversized frame, an unknown type or data beyond a
// stream's window ends the multiplexer (the host then treats the sandbox as gone; the guest's
// streams are all reset); a stream opened past kMaxPeerStreams is refused with kReset.
#pragma once

#include <poll.h>

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/unique_fd.hpp"

namespace airlock::microvm_backend {

enum MuxType : char {
  kOpen = 'o',
  kData = 'd',
  kCredit = 'c',
  kFin = 'f',
  kReset = 'x',
  kHello = 'h',
  kSetup = 's',
  kReady = 'r',
};

inline constexpr std::size_t kMuxHeader = 9;
inline constexpr std::uint32_t kMaxData = 64u << 10;
inline constexpr std::uint32_t kMaxControl = 1u << 20;  // kOpen, kSetup, kReady payloads
inline constexpr std::uint64_t kWindow = 256u << 10;
inline constexpr std::size_t kMaxPeerStreams = 256;  // streams the peer may hold open at once
inline constexpr const char* kStreamCommand = "command";
inline constexpr const char* kStreamEgress = "egress";
inline constexpr const char* kHelloText = "airlock-microvm 1";

std::string mux_frame(char type, std::uint32_t stream, std::string_view payload);

class Multiplexer {
 public:
  // Called for a stream the peer opens, with its kind (on the loop's thread, under its lock: it
  // must not call open or send_control): the local descriptor to pump it into
  // (which the multiplexer then owns), or an empty one to refuse it (the peer gets kReset).
  using OpenHandler = std::function<base::UniqueFd(const std::string& kind)>;
  // Called for every stream-0 frame (kHello, kSetup, kReady), on the loop's thread with no lock
  // held: it may call send_control and open.
  using ControlHandler = std::function<void(char type, const std::string& payload)>;
  // An extra descriptor the loop watches for POLLIN, and what to do then (the guest's child
  // signals and its egress listener).
  struct Watch {
    int fd;
    std::function<void()> ready;
  };

  Multiplexer(int port, bool host_side, OpenHandler on_open, ControlHandler on_control);
  ~Multiplexer();
  Multiplexer(const Multiplexer&) = delete;
  Multiplexer& operator=(const Multiplexer&) = delete;

  // Opens a stream of `kind` and returns the local program's end of it; `local` given, that
  // descriptor is the multiplexer's end instead of a new socketpair's (the guest's accepted
  // egress connections), and the result is empty. Thread-safe; empty once the port is closed.
  base::UniqueFd open(std::string_view kind, base::UniqueFd local = {});
  // Queues a stream-0 frame. Thread-safe.
  void send_control(char type, std::string_view payload);
  void add_watch(Watch watch);

  // Pumps until the port ends (EOF or error), the peer breaks the protocol, or stop() is
  // called. Every local end is closed on return. Returns why it stopped, for a log line.
  std::string run();
  void stop();

  // The port hung up and the agent may wait for the host to come back (the guest side, before
  // and around a snapshot's restore): run() then keeps its streams and polls the port again.
  void set_wait_for_host(bool wait) { wait_for_host_ = wait; }

 private:
  struct Stream {
    base::UniqueFd local;
    std::string to_local;          // received, not yet written to the local end
    std::uint64_t in_flight = 0;   // sent to the peer, not yet credited
    bool local_read_done = false;  // the local end said EOF (kFin sent)
    bool peer_done = false;        // the peer said kFin
    bool local_shut = false;       // shutdown(SHUT_WR) passed on, or writes to it are over
    bool write_dead = false;       // the local end reads no more: the peer's data is dropped
    bool peer_gone = false;        // the peer reset the stream: nothing more goes to it
  };

  void wake();
  bool handle_frame(char type, std::uint32_t id, std::string& payload);
  void pump_local(std::uint32_t id, Stream& stream, short revents);
  void flush_to_local(std::uint32_t id, Stream& stream);
  void drop_writes(std::uint32_t id, Stream& stream);
  void finish_if_done(std::uint32_t id);
  void queue(std::string frame);
  bool flush_port();

  int port_;
  bool host_side_;
  OpenHandler on_open_;
  ControlHandler on_control_;
  base::UniqueFd wake_read_;
  base::UniqueFd wake_write_;
  bool wait_for_host_ = false;

  std::mutex mutex_;  // guards everything below (open and send_control come from other threads)
  std::map<std::uint32_t, Stream> streams_;
  std::vector<std::uint32_t> pending_opens_;  // opened locally, kOpen queued with them
  std::string outgoing_;
  std::uint32_t next_id_;
  bool stopped_ = false;
  std::vector<Watch> watches_;
  std::vector<std::pair<char, std::string>> controls_;  // stream-0 frames not yet handed over
};

}  // namespace airlock::microvm_backend
