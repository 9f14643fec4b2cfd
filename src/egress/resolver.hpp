// Name resolution off the event loop: blocking lookups on a small pool of threads.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "egress/address.hpp"

namespace airlock::egress {

struct Resolution {
  std::vector<IpAddress> addresses;  // in the resolver's order, duplicates removed, unmapped
  std::string error;                 // set when the lookup failed
};

using LookupFunction = std::function<Resolution(const std::string& host)>;

// getaddrinfo(host) for stream sockets of either family.
Resolution system_lookup(const std::string& host);

class ResolverPool {
 public:
  using Completion = std::function<void(Resolution)>;

  ResolverPool(std::size_t threads, LookupFunction lookup);
  // Drops queued lookups and joins the threads; a lookup already running is waited for.
  ~ResolverPool();
  ResolverPool(const ResolverPool&) = delete;
  ResolverPool& operator=(const ResolverPool&) = delete;

  // `done` runs on a resolver thread when the lookup ends; never after the destructor returns.
  void submit(std::string host, Completion done);

 private:
  struct Job {
    std::string host;
    Completion done;
  };
  void run();

  LookupFunction lookup_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Job> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace airlock::egress
