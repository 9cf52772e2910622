// The all-reduce of tensor-parallel ranks simulated on the CPU: each rank is a thread with its own
// CpuForwardOps (model/tensor_parallel.h), and sum() stands in for NCCL's all-reduce. The sum is
// taken in rank order (rank 0's values + rank 1's + ...), the same numbers on every rank.
//
// Every rank calls sum() the same number of times with the same n. A rank that fails calls
// abort(): the others' pending and later sum() calls throw instead of waiting for it, until
// reset() (with no rank inside sum()).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

namespace inferscale {

class RankReduce {
 public:
  explicit RankReduce(int32_t ranks);
  int32_t ranks() const { return ranks_; }

  // data[0 .. n) on every rank := the sum over the ranks of their data[0 .. n).
  void sum(int32_t rank, float* data, int64_t n);
  void abort();
  void reset();

 private:
  // Waits until every rank has arrived (kInternal once aborted).
  void arrive_and_wait(std::unique_lock<std::mutex>& lock);

  int32_t ranks_;
  std::mutex mu_;
  std::condition_variable cv_;
  int32_t arrived_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
  std::vector<float*> data_;  // each rank's buffer, posted before the first barrier
  std::vector<float> total_;  // the sum, written between the barriers
};

// A CPU backend's place among tensor-parallel ranks: none (reduce null), or `rank` of reduce's.
struct CpuRank {
  RankReduce* reduce = nullptr;
  int32_t rank = 0;
};

}  // namespace inferscale
