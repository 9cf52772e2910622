#include "backend/cuda/rope_table.h"

#include <vector>

#include "backend/cuda/cuda_check.h"

namespace inferscale {

void RopeTable::build_host(const Rope& rope, int64_t n, float* cos, float* sin) {
  const int64_t half = rope.head_dim() / 2;
#pragma omp parallel for schedule(static) if (n > 4096)
  for (int64_t p = 0; p < n; ++p) rope.angles(p, cos + p * half, sin + p * half);
}

void RopeTable::ensure(int64_t max_pos) {
  if (max_pos < capacity_) return;
  int64_t cap = 4096;
  while (cap <= max_pos) cap *= 2;
  const size_t half = static_cast<size_t>(rope_.head_dim() / 2);
  std::vector<float> c(static_cast<size_t>(cap) * half), s(c.size());
  build_host(rope_, cap, c.data(), s.data());
  cos_.resize(c.size() * 4);  // frees the old table (cudaFree waits for kernels using it)
  sin_.resize(s.size() * 4);
  CUDA_CHECK(cudaMemcpy(cos_.data(), c.data(), c.size() * 4, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(sin_.data(), s.data(), s.size() * 4, cudaMemcpyHostToDevice));
  capacity_ = cap;
}

}  // namespace inferscale
