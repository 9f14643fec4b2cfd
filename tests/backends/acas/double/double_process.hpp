// Starts airlock-acas-double for a test and talks to it: its endpoints, its control API
// (/_double/…) and a plain libcurl request helper that trusts its certificate. The destructor
// stops it (SIGTERM, then SIGKILL after a bound), so a failing test never leaves it running.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "airlock/json.hpp"

namespace airlock::acas_double::testing {

struct DoubleOptions {
  std::string subscription = "sub-0001";
  std::string resource_group = "rg-double";
  std::string sandbox_group = "sg-double";
  std::string tenant = "tenant-0001";
  std::string client_secret = "double-secret";
  // A token every data-plane request may use without the identity half.
  std::string accept_token = "test-token";
  std::string state_dir;  // "" = the double's private one
  std::vector<std::string> extra_flags;
  std::chrono::milliseconds start_timeout{60'000};
  std::chrono::milliseconds stop_timeout{60'000};
};

struct HttpAnswer {
  long status = 0;  // 0: no HTTP answer (see `error`)
  std::string body;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string error;  // libcurl's message when the exchange failed ("" otherwise)
  bool timed_out = false;

  json::Json json() const { return json::Json::parse(body, nullptr, false); }
};

struct HttpCall {
  std::string method = "GET";
  std::string url;
  std::optional<std::string> body;
  std::vector<std::string> headers;  // "Name: value"
  std::chrono::milliseconds timeout{60'000};
  std::string ca_file;  // "" = no TLS trust set (plain http)
};

// One exchange with libcurl: no retries, no redirects.
HttpAnswer http_call(const HttpCall& call);

class DoubleProcess {
 public:
  explicit DoubleProcess(DoubleOptions options = {});
  ~DoubleProcess();
  DoubleProcess(const DoubleProcess&) = delete;
  DoubleProcess& operator=(const DoubleProcess&) = delete;

  const std::string& endpoint() const noexcept { return endpoint_; }            // https://…
  const std::string& identity_http() const noexcept { return identity_http_; }  // http://…
  const std::string& ca_file() const noexcept { return ca_file_; }
  const std::string& state_dir() const noexcept { return state_dir_; }
  const DoubleOptions& options() const noexcept { return options_; }
  pid_t pid() const noexcept { return pid_; }
  // endpoint + /subscriptions/…/sandboxGroups/…
  std::string group_url() const;

  // A data-plane request: the group URL + `suffix`, api-version added, bearer `accept_token`.
  HttpAnswer data_plane(const std::string& method, const std::string& suffix,
                        std::optional<std::string> body = std::nullopt,
                        std::chrono::milliseconds timeout = std::chrono::seconds(60),
                        std::vector<std::string> headers = {}) const;

  json::Json add_fault(const json::Json& fault) const;
  json::Json state() const;
  json::Json requests() const;
  void clear_requests() const;
  void reset() const;
  void set_state(const std::string& id, const std::string& state,
                 std::optional<std::string> stopped_reason = std::nullopt) const;

  // Closes the double's stdin: it was started with --exit-on-stdin-eof, so it stops by itself.
  void close_stdin();
  // Waits (bounded by stop_timeout) for the double to exit by itself; its wait status, or
  // nullopt when it is still running.
  std::optional<int> wait_exit();
  // SIGTERM, wait (bounded), SIGKILL. Returns the wait status (or -1 when already stopped).
  int stop();
  // What the double wrote to stderr so far.
  std::string stderr_text() const;

 private:
  HttpAnswer control(const std::string& method, const std::string& path,
                     std::optional<std::string> body = std::nullopt) const;

  DoubleOptions options_;
  pid_t pid_ = -1;
  int stdin_fd_ = -1;
  std::string stderr_path_;
  std::string endpoint_;
  std::string identity_http_;
  std::string ca_file_;
  std::string state_dir_;
};

}  // namespace airlock::acas_double::testing
