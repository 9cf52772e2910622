// The all-reduce of tensor-parallel ranks on the CPU: sum() leaves on every rank the sum over the
// ranks of their data[0 .. n), taken in rank order (rank 0's values + rank 1's + ...), so every
// rank holds the same numbers. Ranks 1.. send their values to rank 0 over a channel
// (util/byte_channel.h) and read the sum back; rank 0 adds them up in order and sends it out.
// Every rank calls sum() the same number of times with the same n. shutdown() ends it: a rank
// waiting in sum() on the other side throws (kUnavailable) instead of waiting on.
#pragma once
#include <cstdint>
#include <vector>

#include "util/byte_channel.h"

namespace inferscale {

class HostAllReduce {
 public:
  virtual ~HostAllReduce() = default;
  virtual void sum(float* data, int64_t n) = 0;
  virtual void shutdown() = 0;
};

// Rank 0's side: channels to ranks 1.. in order.
class RootReduce final : public HostAllReduce {
 public:
  explicit RootReduce(std::vector<ByteChannel> ranks) : ranks_(std::move(ranks)) {}
  void sum(float* data, int64_t n) override;
  void shutdown() override;

 private:
  std::vector<ByteChannel> ranks_;
  std::vector<float> part_;
};

// Rank r's side (r >= 1): its channel to rank 0.
class RankReduce final : public HostAllReduce {
 public:
  explicit RankReduce(ByteChannel root) : root_(std::move(root)) {}
  void sum(float* data, int64_t n) override;
  void shutdown() override { root_.shutdown(); }

 private:
  ByteChannel root_;
};

// A CPU backend's place among tensor-parallel ranks: none (reduce null), or `rank` of reduce's.
struct CpuRank {
  HostAllReduce* reduce = nullptr;
  int32_t rank = 0;
};

}  // namespace inferscale
