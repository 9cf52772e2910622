#include "backend/cpu/rank_reduce.h"

namespace inferscale {

void RootReduce::sum(float* data, int64_t n) {
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  part_.resize(static_cast<size_t>(n));
  for (ByteChannel& r : ranks_) {
    r.recv(part_.data(), bytes);
    for (int64_t i = 0; i < n; ++i) data[i] += part_[static_cast<size_t>(i)];
  }
  for (ByteChannel& r : ranks_) r.send(data, bytes);
}

void RootReduce::shutdown() {
  for (ByteChannel& r : ranks_) r.shutdown();
}

void RankReduce::sum(float* data, int64_t n) {
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  root_.send(data, bytes);
  root_.recv(data, bytes);
}

}  // namespace inferscale
