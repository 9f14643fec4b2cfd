// The host's end of a sandbox's command channel (channel_frames.hpp, guest_protocol.hpp).
//
// The keeper (PID 1 in the container) keeps connections open to a socket the sandbox's shepherd
// listens on; the shepherd hands that socket's listening descriptor to any host process that
// asks on its broker socket (in the sandbox's state directory, which the guest never sees). A
// command takes one connection: accepted here, proven to come from the keeper by the token it
// sends first (a guest process may connect to the same socket, but cannot know the token), then
// used for that one command alone. Any host process — the one that created the sandbox or one
// that adopted it later — reaches the keeper this way.
#pragma once

#include <chrono>
#include <filesystem>
#include <mutex>
#include <stop_token>
#include <string>

#include "backends/kit/guest_exec.hpp"
#include "base/unique_fd.hpp"

namespace airlock::gvisor_backend {

class GuestChannel final : public backend_kit::CommandChannel {
 public:
  GuestChannel(std::filesystem::path broker_socket, std::filesystem::path token_file);

  // A keeper connection whose token was checked, ready for one request. An empty descriptor
  // when `deadline` passed or `stop` was requested first. Throws BackendError once the sandbox
  // is gone (the shepherd hung up, or was never there).
  base::UniqueFd take(std::chrono::steady_clock::time_point deadline,
                      std::stop_token stop) override;

  // Takes every connection waiting on the keeper socket and closes it, until none has come for
  // `quiet`: the keeper's idle handlers see the hang-up and exit, so the guest holds no
  // connection to the host (gVisor cannot save one). Returns how many were closed. Meant for a
  // keeper socket whose name was taken away first, so that the keeper cannot dial again.
  int drain(std::chrono::milliseconds quiet);

 private:
  void attach_locked();

  std::filesystem::path broker_socket_;
  std::filesystem::path token_file_;
  std::mutex mutex_;
  base::UniqueFd broker_;    // held open: its hang-up says the sandbox is gone
  base::UniqueFd listener_;  // the keeper socket's listening descriptor
  std::string token_;
  bool gone_ = false;  // the shepherd hung up; descriptors stay open for callers still polling
};

}  // namespace airlock::gvisor_backend
