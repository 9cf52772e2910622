// Greedy sampling on the device: each row's largest logit among the first n ids, the lowest id on
// ties (the CPU twin is cpu::argmax_rows, the same rule as sample_token). One block per row.
#include <cmath>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/launch.cuh"

namespace inferscale::cuda {
namespace {

constexpr int kThreads = 1024;

// (v, i) replaces (best, bi) when larger, or equal with a lower id.
__device__ __forceinline__ void take_better(float v, int32_t i, float& best, int32_t& bi) {
  if (v > best || (v == best && i < bi)) {
    best = v;
    bi = i;
  }
}

__device__ __forceinline__ void warp_argmax(float& best, int32_t& bi) {
  for (int off = 16; off > 0; off >>= 1) {
    const float v = __shfl_down_sync(0xffffffffu, best, off);
    const int32_t i = __shfl_down_sync(0xffffffffu, bi, off);
    take_better(v, i, best, bi);
  }
}

__global__ void argmax_rows_kernel(const float* __restrict__ logits, int64_t ld, int64_t n, int32_t* __restrict__ out) {
  pdl_begin();
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * ld;
  float best = -INFINITY;
  int32_t bi = INT32_MAX;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) take_better(row[i], static_cast<int32_t>(i), best, bi);
  warp_argmax(best, bi);
  __shared__ float sv[kThreads / 32];
  __shared__ int32_t si[kThreads / 32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) {
    sv[warp] = best;
    si[warp] = bi;
  }
  __syncthreads();
  if (warp != 0) return;
  best = lane < kThreads / 32 ? sv[lane] : -INFINITY;
  bi = lane < kThreads / 32 ? si[lane] : INT32_MAX;
  warp_argmax(best, bi);
  if (lane == 0) out[blockIdx.x] = bi == INT32_MAX ? 0 : bi;  // a row of NaNs: id 0, as the twin
}

}  // namespace

void argmax_rows(const float* logits, int64_t R, int64_t ld, int64_t n, int32_t* out, cudaStream_t stream) {
  if (R == 0) return;
  KERNEL_REQUIRE(n >= 1 && n <= ld && n <= INT32_MAX, "argmax_rows: need 1 <= n <= ld");
  KERNEL_REQUIRE(R <= 0x7fffffff, "argmax_rows: too many rows");
  launch(argmax_rows_kernel, dim3(static_cast<unsigned>(R)), dim3(kThreads), 0, stream, logits, ld, n, out);
}

}  // namespace inferscale::cuda
