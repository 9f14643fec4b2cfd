// The router's background worker: runs deletes a caller handed off instead of waiting for them.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "airlock/router.hpp"

namespace airlock {

class SandboxRouter::BackgroundWorker {
 public:
  BackgroundWorker()
      : thread_([this](std::stop_token stop) { run(stop); }) {}
  ~BackgroundWorker() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    ready_.notify_all();
  }  // the jthread joins after draining the queue

  void post(std::function<void()> task) {
    {
      std::lock_guard lock(mutex_);
      tasks_.push_back(std::move(task));
    }
    ready_.notify_one();
  }

 private:
  void run(std::stop_token) {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock lock(mutex_);
        ready_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
        if (tasks_.empty()) return;  // stopping, and drained
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }

  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::jthread thread_;  // last: started after the members it uses exist
};

}  // namespace airlock
