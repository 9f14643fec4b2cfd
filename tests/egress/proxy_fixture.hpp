// What the proxy tests share: a decision recorder, a scriptable resolver, a temp directory, and
// a proxy whose names resolve to loopback servers the test starts.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <condition_variable>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "airlock/egress.hpp"
#include "egress/loopback.hpp"

namespace airlock::egress::testing {

class DecisionLog {
 public:
  EgressDecisionCallback callback() {
    return [this](const EgressDecision& decision) {
      {
        std::lock_guard lock(mutex_);
        decisions_.push_back(decision);
      }
      changed_.notify_all();
    };
  }
  std::vector<EgressDecision> snapshot() {
    std::lock_guard lock(mutex_);
    return decisions_;
  }
  // Waits until at least `count` decisions were made; returns all of them.
  std::vector<EgressDecision> wait_for(std::size_t count, std::chrono::milliseconds timeout = 10s) {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, timeout, [&] { return decisions_.size() >= count; });
    return decisions_;
  }
  // The last decision, after waiting for `count` of them.
  EgressDecision last(std::size_t count) {
    const auto all = wait_for(count);
    EXPECT_GE(all.size(), count) << "expected " << count << " decisions";
    return all.empty() ? EgressDecision{} : all.back();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<EgressDecision> decisions_;
};

// Name → addresses, and optional delays, answered through the test-only resolver hook.
class TestDns {
 public:
  void set(const std::string& host, std::vector<std::string> addresses,
           std::chrono::milliseconds delay = 0ms) {
    std::lock_guard lock(mutex_);
    answers_[host] = {std::move(addresses), delay};
  }
  EgressProxy::Resolver resolver() {
    return [this](const std::string& host) {
      Answer answer;
      {
        std::lock_guard lock(mutex_);
        const auto found = answers_.find(host);
        if (found == answers_.end()) throw std::runtime_error("no such host (test resolver)");
        answer = found->second;
      }
      std::this_thread::sleep_for(answer.delay);
      return answer.addresses;
    };
  }

 private:
  struct Answer {
    std::vector<std::string> addresses;
    std::chrono::milliseconds delay{0};
  };
  std::mutex mutex_;
  std::map<std::string, Answer> answers_;
};

class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/airlock-egress-XXXXXX";
    if (::mkdtemp(pattern) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

class EgressProxyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dns.set("allowed.test", {"127.0.0.1"});
    dns.set("a.wild.test", {"127.0.0.1"});
    dns.set("denied.test", {"127.0.0.1"});
    EgressProxy::Options options;
    options.on_decision = decisions.callback();
    options.resolver_override_for_tests = dns.resolver();
    proxy = std::make_unique<EgressProxy>(std::move(options));
  }
  void TearDown() override { proxy.reset(); }

  // Loopback servers are only reachable through the test knob, and only on the ports named.
  EgressPolicy policy_for(std::vector<std::uint16_t> ports) const {
    EgressPolicy policy;
    policy.allowed_hosts = {"allowed.test", "*.wild.test",  "private.test", "mixed.test",
                            "slow.test",    "nowhere.test", "closed.test"};
    policy.allowed_ports = std::move(ports);
    policy.allow_nonglobal_for_tests = {"127.0.0.0/8"};
    return policy;
  }

  std::filesystem::path socket_path(const std::string& name) const { return dir.path() / name; }

  // Sends a CONNECT for `target` and returns the response head; bytes after it go to `rest`.
  static std::string request(int fd, const std::string& target, std::string& rest) {
    send_all(fd, "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n\r\n");
    return read_head(fd, rest);
  }

  // A GET through an established tunnel to the http server; returns the whole response.
  static std::string get_through(int fd, std::string rest = {}) {
    send_all(fd, "GET / HTTP/1.1\r\nHost: loopback\r\n\r\n");
    return rest + read_to_eof(fd);
  }

  TempDir dir;
  DecisionLog decisions;
  TestDns dns;
  LoopbackServer http{LoopbackServer::Mode::http};
  std::unique_ptr<EgressProxy> proxy;
};

}  // namespace airlock::egress::testing
