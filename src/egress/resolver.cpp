#include "egress/resolver.hpp"

#include <netdb.h>

#include <algorithm>
#include <memory>

namespace airlock::egress {

Resolution system_lookup(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  // No AI_ADDRCONFIG: it hides loopback answers on hosts without other addresses, and every
  // answer is judged by the address rule anyway.
  addrinfo* raw = nullptr;
  const int status = ::getaddrinfo(host.c_str(), nullptr, &hints, &raw);
  Resolution resolution;
  if (status != 0) {
    resolution.error = status == EAI_SYSTEM ? std::string("getaddrinfo: system error")
                                            : std::string(::gai_strerror(status));
    return resolution;
  }
  const std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(raw, &::freeaddrinfo);
  for (const addrinfo* entry = list.get(); entry != nullptr; entry = entry->ai_next) {
    const auto address = IpAddress::from_sockaddr(entry->ai_addr);
    if (!address) continue;
    const IpAddress plain = address->unmapped();
    if (std::find(resolution.addresses.begin(), resolution.addresses.end(), plain) ==
        resolution.addresses.end()) {
      resolution.addresses.push_back(plain);
    }
  }
  if (resolution.addresses.empty()) resolution.error = "no IPv4 or IPv6 address";
  return resolution;
}

ResolverPool::ResolverPool(std::size_t threads, LookupFunction lookup)
    : lookup_(std::move(lookup)) {
  threads = std::max<std::size_t>(threads, 1);
  threads_.reserve(threads);
  for (std::size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { run(); });
}

ResolverPool::~ResolverPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    jobs_.clear();
  }
  ready_.notify_all();
  for (auto& thread : threads_) thread.join();
}

void ResolverPool::submit(std::string host, Completion done) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    jobs_.push_back(Job{std::move(host), std::move(done)});
  }
  ready_.notify_one();
}

void ResolverPool::run() {
  for (;;) {
    Job job;
    {
      std::unique_lock lock(mutex_);
      ready_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (stopping_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    Resolution resolution;
    try {
      resolution = lookup_(job.host);
    } catch (const std::exception& error) {
      resolution.addresses.clear();
      resolution.error = error.what();
    }
    job.done(std::move(resolution));
  }
}

}  // namespace airlock::egress
