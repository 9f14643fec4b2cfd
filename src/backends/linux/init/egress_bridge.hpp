// Inside the sandbox's network namespace, the only way out for an allowlisted sandbox:
// 127.0.0.1:3128 relayed byte for byte to the unix socket egress.sock in the sandbox's egress
// directory on the host, where the host's egress proxy listens. The init holds that directory as
// a descriptor opened before it left the host's mount namespace: nothing of it is mounted where
// the guest could see or reach it, and a proxy that re-creates its socket after a restart is
// still found. The bridge judges nothing; the proxy does.
#pragma once

#include <poll.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace airlock::linux_backend::init {

class EgressBridge {
 public:
  static constexpr std::uint16_t kPort = 3128;
  static constexpr const char* kSocketName = "egress.sock";

  // Binds and listens; relays to egress.sock beneath `directory` (an O_PATH descriptor, kept).
  // False (errno set) when it cannot.
  bool start(int directory);
  // Appends this bridge's descriptors to `fds`; `handle` consumes the same range afterwards.
  void add_poll_fds(std::vector<struct pollfd>& fds) const;
  void handle(const struct pollfd* fds, std::size_t count);
  std::size_t poll_fd_count() const;

  EgressBridge();
  ~EgressBridge();
  EgressBridge(const EgressBridge&) = delete;
  EgressBridge& operator=(const EgressBridge&) = delete;

 private:
  struct Pair;
  void accept_all();
  int listener_ = -1;
  std::string socket_path_;  // /proc/self/fd/<directory>/egress.sock
  std::vector<std::unique_ptr<Pair>> pairs_;
};

}  // namespace airlock::linux_backend::init
