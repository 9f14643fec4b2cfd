// The port multiplexer, both ends in one process over a socketpair standing in for the
// virtio-serial port: streams carry bytes both ways with half-closes, a slow reader on one
// stream never stalls another, and a peer that breaks the protocol ends the multiplexer instead
// of being believed.
#include "backends/microvm/mux.hpp"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace airlock::microvm_backend {
namespace {

// Every descriptor here is a socket. A write to one whose peer is gone (a multiplexer stopped at
// a test's end, under an echo still writing) fails with EPIPE rather than killing the test.
bool write_all(int fd, const std::string& data) {
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t wrote = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (wrote < 0 && errno == EAGAIN) {
      pollfd watch{fd, POLLOUT, 0};
      if (::poll(&watch, 1, 1000) <= 0) return false;
      continue;
    }
    if (wrote <= 0) return false;
    done += static_cast<std::size_t>(wrote);
  }
  return true;
}

// Everything until end of file (or `limit` bytes), bounded by `seconds`.
std::string read_until_eof(int fd, std::size_t limit = 1u << 30, int seconds = 20) {
  std::string out;
  char buffer[65536];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (out.size() < limit && std::chrono::steady_clock::now() < deadline) {
    pollfd watch{fd, POLLIN, 0};
    if (::poll(&watch, 1, 200) <= 0) continue;
    const ssize_t got = ::read(fd, buffer, sizeof buffer);
    if (got <= 0) break;
    out.append(buffer, static_cast<std::size_t>(got));
  }
  return out;
}

// A guest end whose every command stream is an echo server: it returns what it reads, then
// ends its side when the host ends its.
class Pair {
 public:
  Pair() {
    int ends[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends), 0);
    host_port_.reset(ends[0]);
    guest_port_.reset(ends[1]);
    guest_ = std::make_unique<Multiplexer>(
        guest_port_.get(), false,
        [this](const std::string& kind) -> base::UniqueFd {
          int pair[2];
          if (kind == "refuser") {
            // A command that refuses its input: it reads a little, answers and exits with the
            // rest unread (a file write refused half-way).
            ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair);
            echoes_.emplace_back([fd = pair[1]] {
              char buffer[16];
              (void)!::read(fd, buffer, sizeof buffer);
              write_all(fd, "refused, and this is my answer");
              ::close(fd);
            });
            return base::UniqueFd(pair[0]);
          }
          if (kind != kStreamCommand) return {};
          ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair);
          echoes_.emplace_back([fd = pair[1]] {
            char buffer[4096];
            for (;;) {
              const ssize_t got = ::read(fd, buffer, sizeof buffer);
              if (got <= 0) break;
              if (!write_all(fd, std::string(buffer, static_cast<std::size_t>(got)))) break;
            }
            ::close(fd);
          });
          return base::UniqueFd(pair[0]);
        },
        [](char, const std::string&) {});
    host_ = std::make_unique<Multiplexer>(host_port_.get(), true, nullptr,
                                          [this](char type, const std::string& payload) {
                                            if (type == kHello) hello_ = payload;
                                          });
    guest_thread_ = std::thread([this] { guest_why_ = guest_->run(); });
    host_thread_ = std::thread([this] { host_why_ = host_->run(); });
  }
  ~Pair() {
    host_->stop();
    guest_->stop();
    host_thread_.join();
    guest_thread_.join();
    for (auto& echo : echoes_) echo.join();
  }
  Multiplexer& host() { return *host_; }
  Multiplexer& guest() { return *guest_; }
  int guest_port() { return guest_port_.get(); }
  // Ends the guest's multiplexer, so that only the test writes to the guest's port from then on.
  void stop_guest() {
    guest_->stop();
    guest_thread_.join();
    guest_thread_ = std::thread([] {});
  }
  std::string host_why() {
    host_thread_.join();
    host_thread_ = std::thread([] {});
    return host_why_;
  }
  std::string hello_;

 private:
  base::UniqueFd host_port_;
  base::UniqueFd guest_port_;
  std::unique_ptr<Multiplexer> guest_;
  std::unique_ptr<Multiplexer> host_;
  std::thread guest_thread_;
  std::thread host_thread_;
  std::vector<std::thread> echoes_;
  std::string guest_why_;
  std::string host_why_;
};

TEST(Multiplexer, AStreamCarriesBytesBothWaysAndEndsWithAHalfClose) {
  Pair pair;
  base::UniqueFd stream = pair.host().open(kStreamCommand);
  ASSERT_TRUE(stream);
  // More than one window, so credits must flow for it to arrive whole.
  std::string payload;
  for (int i = 0; i < 200000; ++i) payload += std::to_string(i % 10);
  payload += std::string(600 << 10, 'z');
  std::thread writer([&] {
    EXPECT_TRUE(write_all(stream.get(), payload));
    ::shutdown(stream.get(), SHUT_WR);
  });
  const std::string echoed = read_until_eof(stream.get());
  writer.join();
  EXPECT_EQ(echoed.size(), payload.size());
  EXPECT_TRUE(echoed == payload);
}

TEST(Multiplexer, AStreamNobodyReadsDoesNotStallAnother) {
  Pair pair;
  base::UniqueFd stalled = pair.host().open(kStreamCommand);
  // The echo of `stalled` is never read here: once its window and socket buffers are full,
  // its bytes wait — and only its bytes.
  std::thread flooder([&] {
    const std::string block(64 << 10, 'x');
    for (int i = 0; i < 64; ++i) {
      pollfd watch{stalled.get(), POLLOUT, 0};
      if (::poll(&watch, 1, 100) <= 0) break;
      if (::send(stalled.get(), block.data(), block.size(), MSG_NOSIGNAL) <= 0) break;
    }
  });
  flooder.join();
  base::UniqueFd other = pair.host().open(kStreamCommand);
  ASSERT_TRUE(write_all(other.get(), "still moving"));
  ::shutdown(other.get(), SHUT_WR);
  EXPECT_EQ(read_until_eof(other.get(), 1u << 20, 10), "still moving");
}

// The host keeps sending while the guest's program has already answered and exited with input
// unread: the answer still arrives whole, then the end of the stream, and nothing stalls.
TEST(Multiplexer, AnAnswerGivenWithInputUnreadArrivesBeforeTheEnd) {
  Pair pair;
  for (int round = 0; round < 20; ++round) {
    base::UniqueFd stream = pair.host().open("refuser");
    ASSERT_TRUE(stream);
    std::thread writer([fd = stream.get()] {
      const std::string chunk(64u << 10, 'x');
      // Until the stream ends under it (EPIPE): the multiplexer must end it rather than leave
      // the writer blocked on a window nobody credits.
      for (int i = 0; i < 32; ++i) {
        if (::send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL) < 0) break;
      }
      ::shutdown(fd, SHUT_WR);
    });
    EXPECT_EQ(read_until_eof(stream.get()), "refused, and this is my answer") << "round " << round;
    writer.join();
  }
  // The multiplexer is still whole: another stream works.
  base::UniqueFd echo = pair.host().open(kStreamCommand);
  ASSERT_TRUE(write_all(echo.get(), "still here"));
  ::shutdown(echo.get(), SHUT_WR);
  EXPECT_EQ(read_until_eof(echo.get()), "still here");
}

// A guest (its kernel compromised, say) opens stream after stream towards the host: each
// would cost the host a descriptor and a connection to the egress proxy. Past kMaxPeerStreams
// open at once the host refuses the rest, and a stream let go makes room again.
TEST(Multiplexer, APeerOpeningStreamsWithoutEndIsRefusedPastTheCap) {
  int ends[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends), 0);
  base::UniqueFd host_port(ends[0]), guest_port(ends[1]);
  std::mutex held_mutex;
  std::vector<base::UniqueFd> held;  // the far ends of what the host accepted, kept open
  std::atomic<int> opened{0};
  Multiplexer host(
      host_port.get(), true,
      [&](const std::string& kind) -> base::UniqueFd {
        if (kind != kStreamEgress) return {};
        int pair[2];
        if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) return {};
        ++opened;
        std::lock_guard lock(held_mutex);
        held.emplace_back(pair[1]);
        return base::UniqueFd(pair[0]);
      },
      [](char, const std::string&) {});
  std::thread loop([&] { host.run(); });
  const std::size_t attempts = kMaxPeerStreams + 44;
  std::string frames;
  for (std::size_t i = 0; i < attempts; ++i) {
    frames += mux_frame(kOpen, static_cast<std::uint32_t>(2 * (i + 1)), kStreamEgress);
  }
  ASSERT_TRUE(write_all(guest_port.get(), frames));
  // What the host answers: a reset for each open past the cap, and nothing else.
  std::string answers;
  std::size_t resets = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (resets < attempts - kMaxPeerStreams && std::chrono::steady_clock::now() < deadline) {
    pollfd watch{guest_port.get(), POLLIN, 0};
    if (::poll(&watch, 1, 200) <= 0) continue;
    char buffer[4096];
    const ssize_t got = ::read(guest_port.get(), buffer, sizeof buffer);
    if (got <= 0) break;
    answers.append(buffer, static_cast<std::size_t>(got));
    resets = 0;
    for (std::size_t at = 0; at + kMuxHeader <= answers.size();) {
      std::uint32_t size = 0;
      for (int i = 0; i < 4; ++i) {
        size |= static_cast<std::uint32_t>(static_cast<unsigned char>(answers[at + 5 + i]))
                << (8 * i);
      }
      if (answers[at] == kReset) ++resets;
      at += kMuxHeader + size;
    }
  }
  EXPECT_EQ(opened.load(), static_cast<int>(kMaxPeerStreams));
  EXPECT_EQ(resets, attempts - kMaxPeerStreams);
  host.stop();
  loop.join();
}

TEST(Multiplexer, ControlFramesReachTheOtherEnd) {
  Pair pair;
  pair.guest().send_control(kHello, kHelloText);
  for (int i = 0; i < 200 && pair.hello_.empty(); ++i) ::usleep(10000);
  EXPECT_EQ(pair.hello_, kHelloText);
}

TEST(Multiplexer, APeerThatBreaksTheProtocolEndsItAndItsStreams) {
  Pair pair;
  base::UniqueFd stream = pair.host().open(kStreamCommand);
  ASSERT_TRUE(write_all(stream.get(), "x"));
  pair.stop_guest();
  // The guest's port end, written behind the guest multiplexer's back: a data frame far past
  // any stream's window, for a stream id the host opened.
  const std::string forged = mux_frame(kData, 1, std::string(kMaxData, 'a'));
  for (int i = 0; i < 16; ++i) {
    if (!write_all(pair.guest_port(), forged)) break;  // the host stopped reading: it broke off
  }
  EXPECT_NE(pair.host_why(), "");
  // The host's streams end with it (what arrived within the window was passed on; nothing
  // past it), and no new one opens.
  const auto reading = std::chrono::steady_clock::now();
  const std::string delivered = read_until_eof(stream.get(), 16u << 20, 10);
  EXPECT_LT(std::chrono::steady_clock::now() - reading, std::chrono::seconds(5))
      << "no end of file";
  EXPECT_LT(delivered.size(), 16u * kMaxData);
  EXPECT_FALSE(pair.host().open(kStreamCommand));
}

TEST(Multiplexer, AnOversizedFrameIsRefusedBeforeItIsBuffered) {
  Pair pair;
  pair.stop_guest();
  std::string header;
  header.push_back(kOpen);
  for (int i = 0; i < 4; ++i) header.push_back(i == 0 ? 2 : 0);
  for (int i = 0; i < 4; ++i) header.push_back(static_cast<char>(0xff));  // 4 GiB
  ASSERT_TRUE(write_all(pair.guest_port(), header));
  EXPECT_EQ(pair.host_why(), "the peer broke the multiplexer's protocol");
}

}  // namespace
}  // namespace airlock::microvm_backend
