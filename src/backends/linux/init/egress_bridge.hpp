// Inside the sandbox's network namespace, the only way out for an allowlisted sandbox:
// 127.0.0.1:3128 relayed byte for byte to the unix socket /run/airlock/egress.sock, where the
// host's egress proxy listens (the directory is bound from the host, so a proxy that re-creates
// its socket after a restart is seen). The bridge judges nothing; the proxy does.
#pragma once

#include <poll.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace airlock::linux_backend::init {

class EgressBridge {
 public:
  static constexpr std::uint16_t kPort = 3128;
  static constexpr const char* kSocketPath = "/run/airlock/egress.sock";

  // Binds and listens; false (errno set) when it cannot.
  bool start();
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
  std::vector<std::unique_ptr<Pair>> pairs_;
};

}  // namespace airlock::linux_backend::init
