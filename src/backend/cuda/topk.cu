// Retrieval: dense similarity of one query against a user's embedding matrix, then top-k.
//
//   scores:  one warp per matrix row, f32 accumulate            [N] f32
//   select:  passes of blocks that bitonic-sort chunks of 2048 (score, id) pairs in shared
//            memory and keep each chunk's best k; the candidate count shrinks from n to
//            ceil(n / 2048) * k per pass until one chunk remains, whose best k is the answer.
// Order: score descending, ties to the lower id (the CPU twin's order).
#include <cmath>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/device_utils.cuh"

namespace inferscale::cuda {
namespace {

constexpr int kChunk = 2048;         // pairs sorted by one block
constexpr int kSortThreads = 1024;   // two pairs per thread
constexpr int kScoreWarps = 8;

template <class T>
__device__ __forceinline__ float to_f32(T v) { return static_cast<float>(v); }
template <>
__device__ __forceinline__ float to_f32<bf16>(bf16 v) { return __bfloat162float(v); }

template <class T>
__global__ void scores_kernel(const T* __restrict__ m, const float* __restrict__ q, float* __restrict__ scores,
                              int64_t N, int64_t D) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(kScoreWarps) + (threadIdx.x >> 5);
  if (row >= N) return;
  const int lane = threadIdx.x & 31;
  const T* r = m + row * D;
  float acc = 0.0f;
  for (int64_t i = lane; i < D; i += 32) acc += to_f32(r[i]) * q[i];
  acc = warp_sum(acc);
  if (lane == 0) scores[row] = acc;
}

// a before b in the output order.
__device__ __forceinline__ bool better(float sa, int32_t ia, float sb, int32_t ib) {
  return sa > sb || (sa == sb && ia < ib);
}

// Sorts chunk blockIdx.x of the n input pairs (ids == null: ids are indices) and writes its
// best min(k, chunk size) pairs to out[blockIdx.x * k ...].
__global__ void select_kernel(const float* __restrict__ in_s, const int32_t* __restrict__ in_i, int64_t n, int32_t k,
                              float* __restrict__ out_s, int32_t* __restrict__ out_i) {
  __shared__ float ss[kChunk];
  __shared__ int32_t si[kChunk];
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kChunk;
  for (int x = threadIdx.x; x < kChunk; x += kSortThreads) {
    const int64_t g = begin + x;
    const bool valid = g < n;
    ss[x] = valid ? in_s[g] : -INFINITY;
    si[x] = valid ? (in_i != nullptr ? in_i[g] : static_cast<int32_t>(g)) : INT32_MAX;
  }
  __syncthreads();
  // Bitonic sort, "better" first.
  for (int size = 2; size <= kChunk; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int x = threadIdx.x; x < kChunk; x += kSortThreads) {
        const int y = x ^ stride;
        if (y > x) {
          const bool ascending_block = (x & size) == 0;  // this block sorts best-first
          const bool swap = ascending_block ? better(ss[y], si[y], ss[x], si[x]) : better(ss[x], si[x], ss[y], si[y]);
          if (swap) {
            const float ts = ss[x];
            ss[x] = ss[y];
            ss[y] = ts;
            const int32_t ti = si[x];
            si[x] = si[y];
            si[y] = ti;
          }
        }
      }
      __syncthreads();
    }
  }
  const int64_t in_chunk = n - begin < kChunk ? n - begin : kChunk;
  const int keep = static_cast<int>(in_chunk < k ? in_chunk : k);
  for (int x = threadIdx.x; x < keep; x += kSortThreads) {
    out_s[static_cast<int64_t>(blockIdx.x) * k + x] = ss[x];
    out_i[static_cast<int64_t>(blockIdx.x) * k + x] = si[x];
  }
}

// Candidate counts per pass: n -> (chunks - 1) * k + min(k, last chunk size).
int64_t next_count(int64_t n, int32_t k) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  const int64_t last = n - (chunks - 1) * kChunk;
  return (chunks - 1) * k + (last < k ? last : k);
}

}  // namespace

size_t similarity_topk_workspace_bytes(int64_t N, int32_t k) {
  // scores [N] + two ping-pong candidate buffers of (score, id), each sized for the first pass.
  const int64_t first = next_count(N, k);
  return static_cast<size_t>(N) * 4 + 2 * static_cast<size_t>(first) * 8 + 256;
}

void similarity_topk(const void* matrix, bool matrix_bf16, const float* query, int64_t N, int64_t D, int32_t k,
                     int32_t* out_ids, float* out_scores, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  KERNEL_REQUIRE(k >= 1 && k <= kChunk / 2 && k <= N, "similarity_topk: need 1 <= k <= min(1024, N)");
  KERNEL_REQUIRE(workspace_bytes >= similarity_topk_workspace_bytes(N, k), "similarity_topk: workspace too small");
  float* scores = static_cast<float*>(workspace);
  const int64_t cap = next_count(N, k);
  float* buf_s[2] = {scores + N, scores + N + cap};
  int32_t* buf_i[2] = {reinterpret_cast<int32_t*>(scores + N + 2 * cap),
                       reinterpret_cast<int32_t*>(scores + N + 2 * cap) + cap};

  const int64_t blocks = (N + kScoreWarps - 1) / kScoreWarps;
  KERNEL_REQUIRE(blocks <= 0x7fffffff, "similarity_topk: N too large");
  if (matrix_bf16) {
    scores_kernel<bf16><<<static_cast<unsigned>(blocks), 32 * kScoreWarps, 0, stream>>>(
        static_cast<const bf16*>(matrix), query, scores, N, D);
  } else {
    scores_kernel<float><<<static_cast<unsigned>(blocks), 32 * kScoreWarps, 0, stream>>>(
        static_cast<const float*>(matrix), query, scores, N, D);
  }
  CUDA_CHECK_LAUNCH("scores_kernel");

  // Passes until one chunk holds every candidate; the last pass writes the answer.
  const float* in_s = scores;
  const int32_t* in_i = nullptr;
  int64_t n = N;
  int which = 0;
  while (true) {
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    const bool last = chunks == 1;
    float* o_s = last ? out_scores : buf_s[which];
    int32_t* o_i = last ? out_ids : buf_i[which];
    select_kernel<<<static_cast<unsigned>(chunks), kSortThreads, 0, stream>>>(in_s, in_i, n, k, o_s, o_i);
    CUDA_CHECK_LAUNCH("select_kernel");
    if (last) break;
    n = next_count(n, k);
    in_s = buf_s[which];
    in_i = buf_i[which];
    which ^= 1;
  }
}

}  // namespace inferscale::cuda
