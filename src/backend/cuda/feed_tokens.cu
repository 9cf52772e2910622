// Fed tokens (ForwardBatch::token_src): a forward's token ids taken on the device from the ids the
// forward before it sampled, so that it can be queued before the host has read them. The CPU
// twin is feed_tokens (model/forward_batch.h).
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"

namespace inferscale::cuda {
namespace {

__global__ void feed_tokens_kernel(int32_t* ids, const int32_t* src, const int32_t* prev_ids, int64_t T) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= T) return;
  const int32_t r = src[t];
  if (r >= 0) ids[t] = prev_ids[r];
}

}  // namespace

void feed_tokens(int32_t* ids, const int32_t* src, const int32_t* prev_ids, int64_t T, cudaStream_t stream) {
  if (T == 0) return;
  constexpr int kThreads = 256;
  feed_tokens_kernel<<<static_cast<unsigned>((T + kThreads - 1) / kThreads), kThreads, 0, stream>>>(ids, src, prev_ids, T);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace inferscale::cuda
