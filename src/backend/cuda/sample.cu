// Sampling on the device (model/sampling.h's rule; the CPU twin is sample_row): one block per row,
// so no [R, vocab] logits cross PCIe for a sampled request. Greedy rows keep the argmax that
// argmax_rows wrote first. The two thresholds are found by bisection over the order-preserving
// uint32 keys of the logits (32 counting passes for top-k, 32 weighing passes for top-p; no sort),
// and the draw walks the kept ids in id order: each thread owns a contiguous chunk of ids, an
// exclusive block scan of the chunk weights finds the chunk holding r, and that thread walks it.
#include <cub/block/block_scan.cuh>

#include <cmath>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/launch.cuh"

namespace inferscale::cuda {
namespace {

constexpr int kThreads = 1024;

// Larger float -> larger key (finite values and infinities).
__device__ __forceinline__ uint32_t order_key(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Every thread gets op over all threads' v, combined in one fixed order (identical everywhere).
template <class T, class Op>
__device__ T block_all_reduce(T v, Op op, T* part /* shared [kThreads / 32] */) {
  for (int off = 16; off > 0; off >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, off));
  __syncthreads();  // the previous reduction's reads of part are done
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
  __syncthreads();
  v = part[0];
  for (int w = 1; w < kThreads / 32; ++w) v = op(v, part[w]);
  return v;
}

struct Sum {
  template <class T>
  __device__ T operator()(T a, T b) const { return a + b; }
};
struct Max {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

__global__ void __launch_bounds__(kThreads) sample_rows_kernel(const float* __restrict__ logits, int64_t ld, int64_t n,
                                                               const RowSampling* __restrict__ params,
                                                               int32_t* __restrict__ out) {
  pdl_begin();
  const RowSampling s = params[blockIdx.x];
  if (s.temperature <= 0.0f || s.top_k == 1) return;  // greedy: out holds the argmax
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * ld;
  __shared__ float fpart[kThreads / 32];
  __shared__ int32_t ipart[kThreads / 32];
  __shared__ int32_t chosen;

  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) m = fmaxf(m, row[i]);
  m = block_all_reduce(m, Max{}, fpart);
  const float inv_t = 1.0f / s.temperature;
  // Kept: at or above the threshold key, and min-p's: at most min_gap below m (sample_row's float test).
  auto keeps = [&](float l, uint32_t bar) { return order_key(l) >= bar && l - m >= s.min_gap; };

  // 1. The top-k threshold: the largest key K with at least top_k keys >= K (the k-th largest).
  uint32_t lo = 0;
  if (s.top_k > 0 && s.top_k < n) {
    for (int bit = 31; bit >= 0; --bit) {
      const uint32_t cand = lo | (1u << bit);
      int32_t c = 0;
      for (int64_t i = threadIdx.x; i < n; i += kThreads) c += order_key(row[i]) >= cand;
      if (block_all_reduce(c, Sum{}, ipart) >= s.top_k) lo = cand;
    }
  }
  // 3. The nucleus: the largest key K >= lo whose kept weight reaches top_p of step 1's.
  if (s.top_p < 1.0f) {
    float total = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += kThreads)
      if (keeps(row[i], lo)) total += expf((row[i] - m) * inv_t);
    const float target = s.top_p * block_all_reduce(total, Sum{}, fpart);
    uint32_t k = 0;
    for (int bit = 31; bit >= 0; --bit) {
      const uint32_t cand = k | (1u << bit), bar = max(cand, lo);
      float w = 0.0f;
      for (int64_t i = threadIdx.x; i < n; i += kThreads)
        if (keeps(row[i], bar)) w += expf((row[i] - m) * inv_t);
      if (block_all_reduce(w, Sum{}, fpart) >= target) k = cand;
    }
    lo = max(k, lo);
  }

  // 4. The draw: chunk weights, their exclusive scan, and the walk of the chunk holding r.
  const int64_t chunk = (n + kThreads - 1) / kThreads;
  const int64_t begin = min(n, static_cast<int64_t>(threadIdx.x) * chunk), end = min(n, begin + chunk);
  float w = 0.0f;
  int32_t last = -1;  // this chunk's last kept id
  for (int64_t i = begin; i < end; ++i)
    if (keeps(row[i], lo)) {
      w += expf((row[i] - m) * inv_t);
      last = static_cast<int32_t>(i);
    }
  using Scan = cub::BlockScan<float, kThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ float starts[kThreads + 1];  // chunk t holds draws in [starts[t], starts[t + 1])
  float before = 0.0f, W = 0.0f;
  Scan(scan_tmp).ExclusiveSum(w, before, W);
  starts[threadIdx.x] = before;
  if (threadIdx.x == 0) starts[kThreads] = W;
  const int32_t last_kept = block_all_reduce(last, [](int32_t a, int32_t b) { return max(a, b); }, ipart);
  if (threadIdx.x == 0) chosen = last_kept;  // when rounding leaves r past every chunk
  __syncthreads();
  const float r = s.u * W;
  if (last >= 0 && r >= before && r < starts[threadIdx.x + 1]) {
    float cum = before;
    int32_t pick = last;
    for (int64_t i = begin; i < end; ++i)
      if (keeps(row[i], lo)) {
        cum += expf((row[i] - m) * inv_t);
        if (cum > r) {
          pick = static_cast<int32_t>(i);
          break;
        }
      }
    chosen = pick;  // the chunks' ranges partition [0, W): one writer
  }
  __syncthreads();
  if (threadIdx.x == 0) out[blockIdx.x] = chosen;
}

}  // namespace

void sample_rows(const float* logits, int64_t R, int64_t ld, int64_t n, const RowSampling* params, int32_t* out,
                 cudaStream_t stream) {
  if (R == 0) return;
  argmax_rows(logits, R, ld, n, out, stream);
  launch(sample_rows_kernel, dim3(static_cast<unsigned>(R)), dim3(kThreads), 0, stream, logits, ld, n, params, out);
}

}  // namespace inferscale::cuda
