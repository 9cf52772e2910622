// A small fork-join pool for the CPU backend's hot loops. Idle workers block on a condition
// variable instead of spinning: OpenMP's spin-waiting starves OpenBLAS's GEMM threads on a
// small machine (measured: 17 tok/s with spinning vs ~420 tok/s blocking, demo model, 2 cores).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace inferscale {

class ThreadPool {
 public:
  // num_threads counts the calling thread; 0 = hardware concurrency.
  explicit ThreadPool(int32_t num_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int32_t size() const { return static_cast<int32_t>(workers_.size()) + 1; }
  // Runs fn(begin, end) over [0, n) split into contiguous chunks of at least `grain` items, on the
  // workers and the calling thread; returns when all are done. The first exception is rethrown.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop(int32_t index);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int32_t job_chunks_ = 0;
  int64_t generation_ = 0;
  int32_t pending_ = 0;
  std::exception_ptr error_;
  bool stop_ = false;
};

}  // namespace inferscale
