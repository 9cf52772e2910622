#include "server/connection_pool.h"

#include <spdlog/spdlog.h>

#include "util/check.h"

namespace inferscale::server {

ConnectionPool::ConnectionPool(size_t max_threads) : max_threads_(max_threads) {
  IS_REQUIRE(max_threads >= 1, kInvalidInput, "the connection pool needs at least one thread");
}

ConnectionPool::~ConnectionPool() { shutdown(); }

void ConnectionPool::enqueue(std::function<void()> fn) {
  {
    std::lock_guard lk(mu_);
    jobs_.push_back(std::move(fn));
    // Every queued job beyond the idle threads needs a thread of its own, while there is room.
    if (jobs_.size() > idle_ && threads_.size() < max_threads_) {
      threads_.emplace_back([this] { work(); });
      return;
    }
  }
  cv_.notify_one();
}

void ConnectionPool::shutdown() {
  std::vector<std::thread> threads;
  {
    std::lock_guard lk(mu_);
    shutdown_ = true;
    threads.swap(threads_);
  }
  cv_.notify_all();
  for (std::thread& t : threads) t.join();
}

size_t ConnectionPool::num_threads() const {
  std::lock_guard lk(mu_);
  return threads_.size();
}

void ConnectionPool::work() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock lk(mu_);
      ++idle_;
      cv_.wait(lk, [&] { return !jobs_.empty() || shutdown_; });
      --idle_;
      if (jobs_.empty()) return;  // shut down and nothing left
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    try {
      job();
    } catch (const std::exception& e) {
      spdlog::error("HTTP connection task failed: {}", e.what());
    }
  }
}

}  // namespace inferscale::server
