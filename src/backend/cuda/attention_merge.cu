// The merge of split-KV pieces: each attention kernel (attention_prefill.cu,
// attention_decode_mma.cu) writes a piece's normalized output and its log2-sum-exp into the
// partials; this kernel combines a tile row's pieces into the row of `out`.
#include <cmath>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/device_utils.cuh"

namespace inferscale::cuda {
namespace {

// CTA = one (merge item, row r < merge_rows) x one kv head; one thread per dim (blockDim = D).
// Every row is its own CTA so a few long-context tiles still spread over the GPU.
__global__ void attention_merge_kernel(AttentionArgs a) {
  // The merge item is metadata (launch.cuh): read before the wait; a CTA with no row exits
  // (which counts as its launch_dependents) without touching anything a kernel writes.
  if (a.counts != nullptr && static_cast<int>(blockIdx.x / a.merge_rows) >= a.counts[1]) return;
  const AttnMergeItem mi = a.merges[blockIdx.x / a.merge_rows];
  const int r = blockIdx.x % a.merge_rows;
  if (r >= mi.row_end - mi.row_begin) return;
  pdl_begin();
  const int kvh = blockIdx.y, d = threadIdx.x, D = a.head_dim;
  const int group = a.num_heads / a.num_kv_heads;
  auto prow = [&](int p) {
    return (static_cast<int64_t>(mi.first_partial + p) * a.num_kv_heads + kvh) * a.rows_per_tile + r;
  };
  // One pass, kMergeBatch splits' loads in flight at once (a loop of one dependent load per split
  // took 7 us for 8 splits), rescaling the running sums by each batch's new maximum.
  constexpr int kMergeBatch = 8;
  float M = -INFINITY, W = 0.0f, O = 0.0f;
  for (int p0 = 0; p0 < mi.num_splits; p0 += kMergeBatch) {
    float l[kMergeBatch], o[kMergeBatch];
#pragma unroll
    for (int u = 0; u < kMergeBatch; ++u) {
      const bool in = p0 + u < mi.num_splits;
      l[u] = in ? a.partial_lse[prow(p0 + u)] : -INFINITY;
      o[u] = in ? a.partial_o[prow(p0 + u) * D + d] : 0.0f;
    }
    float m = M;
#pragma unroll
    for (int u = 0; u < kMergeBatch; ++u) m = fmaxf(m, l[u]);
    if (m == -INFINITY) continue;  // every split so far is empty
    const float s = exp2f(M - m);  // 0 while M is -inf
    W *= s;
    O *= s;
#pragma unroll
    for (int u = 0; u < kMergeBatch; ++u) {
      const float e = exp2f(l[u] - m);  // 0 for an empty split
      W += e;
      O += e * o[u];
    }
    M = m;
  }
  const int pr = mi.row_begin + r;
  const int64_t tok = mi.q_start + pr / group;
  const int head = kvh * group + pr % group;
  a.out[(tok * a.num_heads + head) * D + d] = __float2bfloat16_rn(W > 0.0f ? O / W : 0.0f);
}
}  // namespace

void attention_merge(const AttentionArgs& a, cudaStream_t stream) {
  if (a.num_merges == 0) return;
  KERNEL_REQUIRE(a.merge_rows >= 1 && a.merge_rows <= a.rows_per_tile, "attention_merge: merge_rows");
  const int64_t blocks = static_cast<int64_t>(a.num_merges) * a.merge_rows;
  KERNEL_REQUIRE(blocks <= 0x7fffffff && a.head_dim <= 1024, "attention_merge: too many rows");
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(a.num_kv_heads));
  launch(attention_merge_kernel, grid, dim3(static_cast<unsigned>(a.head_dim)), 0, stream, a);
}

}  // namespace inferscale::cuda
