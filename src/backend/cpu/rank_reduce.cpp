#include "backend/cpu/rank_reduce.h"

#include <cstring>

#include "util/check.h"

namespace inferscale {

RankReduce::RankReduce(int32_t ranks) : ranks_(ranks), data_(static_cast<size_t>(ranks), nullptr) {
  IS_CHECK(ranks >= 1, "{} ranks", ranks);
}

// The last rank to arrive sums every rank's buffer into total_ and releases the others; each then
// copies total_ out. total_ is written again only when every rank has entered the next sum(),
// after its copy.
void RankReduce::sum(int32_t rank, float* data, int64_t n) {
  std::unique_lock<std::mutex> lock(mu_);
  data_[static_cast<size_t>(rank)] = data;
  if (arrived_ + 1 == ranks_) {
    IS_CHECK(!aborted_, "a tensor-parallel rank failed");
    total_.assign(data_[0], data_[0] + n);
    for (int32_t r = 1; r < ranks_; ++r) {
      const float* p = data_[static_cast<size_t>(r)];
      for (int64_t i = 0; i < n; ++i) total_[static_cast<size_t>(i)] += p[i];
    }
  }
  arrive_and_wait(lock);
  lock.unlock();
  std::memcpy(data, total_.data(), static_cast<size_t>(n) * sizeof(float));
}

void RankReduce::arrive_and_wait(std::unique_lock<std::mutex>& lock) {
  IS_CHECK(!aborted_, "a tensor-parallel rank failed");
  if (++arrived_ == ranks_) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  const uint64_t gen = generation_;
  cv_.wait(lock, [&] { return generation_ != gen || aborted_; });
  IS_CHECK(generation_ != gen, "a tensor-parallel rank failed");
}

void RankReduce::abort() {
  std::lock_guard<std::mutex> lock(mu_);
  aborted_ = true;
  cv_.notify_all();
}

void RankReduce::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  aborted_ = false;
  arrived_ = 0;
}

}  // namespace inferscale
