// The thread pool behind cpp-httplib's accept loop (a TaskQueue): one connection per task, and a
// new thread whenever no thread is free, up to `max_threads`; past that connections wait in
// order. cpp-httplib's own ThreadPool has a fixed size, so a few idle or slow clients (each holds
// a thread while it sends nothing) made /health wait behind them. Here an idle connection costs
// one sleeping thread, and the idle and read timeouts of ConnectionServer end it.
//
// Threads are started on demand and kept until shutdown(), which runs what is queued and joins
// them all (cpp-httplib calls it once its accept loop has stopped).
#pragma once
#include <httplib.h>

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace inferscale::server {

class ConnectionPool final : public httplib::TaskQueue {
 public:
  explicit ConnectionPool(size_t max_threads);
  ~ConnectionPool() override;
  ConnectionPool(const ConnectionPool&) = delete;
  ConnectionPool& operator=(const ConnectionPool&) = delete;

  void enqueue(std::function<void()> fn) override;
  void shutdown() override;

  size_t num_threads() const;

 private:
  void work();

  const size_t max_threads_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;  // threads waiting for a job
  bool shutdown_ = false;
};

}  // namespace inferscale::server
