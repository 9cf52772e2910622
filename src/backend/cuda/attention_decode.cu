// Decode path of paged attention (CUDA cores, split-KV) and the merge of split pieces.
//
// Decode: CTA = one token's tile (its `group` <= 8 query heads of one kv head) x one kv piece
// (work_item_grid); register arrays are sized for the group rounded up to a power of two.
// Lanes are grouped LPR = D/8 to a kv row (one 16-byte chunk each); a warp walks 32/LPR rows at a
// time, so a 4-warp CTA has NS = 4 * 32/LPR independent "streams" over the piece:
//   stream s visits kv entries kv_begin + s, + NS, + 2 NS, ...
// Each stream keeps its own online softmax per query head (max m, sum l, acc[8 dims per lane]);
// the streams are combined through shared memory at the end. Scores use q pre-scaled by
// scale * log2(e), so exp2 gives the softmax.
#include <cmath>

#include "backend/cuda/attention_smem.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/device_utils.cuh"

namespace inferscale::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kUnroll = 4;  // kv entries per stream in flight (4 x 2 x 16 bytes per thread)

// G: the group rounded up to a power of two (register arrays sized at compile time).
template <int D, int kG>
__global__ void __launch_bounds__(kThreads) attention_decode_kernel(AttentionArgs a) {
  constexpr int LPR = D / 8;
  constexpr int RPW = 32 / LPR;
  constexpr int NS = (kThreads / 32) * RPW;
  __shared__ float sm_m[NS][kG];
  __shared__ float sm_l[NS][kG];
  __shared__ float sm_acc[NS][kG][D];

  pdl_begin();
  const int item = grid_work_item(a.num_items, a.counts);
  if (item < 0) return;
  const AttnWorkItem it = a.items[item];
  const int kvh = grid_kv_head();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int stream = warp * RPW + lane / LPR, sub = lane % LPR;
  const int group = a.num_heads / a.num_kv_heads;
  const int64_t tok = it.q_start + it.row_begin / group;  // rows_per_tile == group: one token per tile
  const int64_t kv_base = a.kv_indptr[it.kv_seq];
  const float scale_log2 = a.scale * kLog2e;

  float q[kG][8], acc[kG][8], m[kG], l[kG];
#pragma unroll
  for (int h = 0; h < kG; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[h][e] = q[h][e] = 0.0f;
    if (h < group) {
      const Bf16x8 v = *reinterpret_cast<const Bf16x8*>(a.q + (tok * a.num_heads + kvh * group + h) * D + sub * 8);
      bf16x8_to_f32(v, q[h]);
#pragma unroll
      for (int e = 0; e < 8; ++e) q[h][e] *= scale_log2;
    }
  }

  for (int base = it.kv_begin; base < it.kv_end; base += NS * kUnroll) {
    Bf16x8 kr[kUnroll], vr[kUnroll];
    bool valid[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {  // issue every load before the first use
      const int j = base + u * NS + stream;
      valid[u] = j < it.kv_end;
      if (valid[u]) {
        const int64_t slot =
            static_cast<int64_t>(a.kv_indices[kv_base + j / a.block_size]) * a.block_size + j % a.block_size;
        const int64_t off = (slot * a.num_kv_heads + kvh) * D + sub * 8;
        kr[u] = *reinterpret_cast<const Bf16x8*>(static_cast<const bf16*>(a.cache.k) + off);
        vr[u] = *reinterpret_cast<const Bf16x8*>(static_cast<const bf16*>(a.cache.v) + off);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float kf[8], vf[8];
      if (valid[u]) {
        bf16x8_to_f32(kr[u], kf);
        bf16x8_to_f32(vr[u], vf);
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) kf[e] = vf[e] = 0.0f;
      }
#pragma unroll
      for (int h = 0; h < kG; ++h) {
        if (h >= group) break;  // uniform across the CTA
        float d = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) d += q[h][e] * kf[e];
#pragma unroll
        for (int off = LPR / 2; off > 0; off >>= 1) d += __shfl_xor_sync(0xffffffffu, d, off);  // within the row's lanes
        if (valid[u]) {
          const float m_new = fmaxf(m[h], d);
          const float alpha = exp2f(m[h] - m_new);  // m = -inf on the first entry: alpha = 0
          const float p = exp2f(d - m_new);
          l[h] = l[h] * alpha + p;
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[h][e] = acc[h][e] * alpha + p * vf[e];
          m[h] = m_new;
        }
      }
    }
  }

  // Combine the NS streams.
#pragma unroll
  for (int h = 0; h < kG; ++h) {
    if (h >= group) break;
#pragma unroll
    for (int e = 0; e < 8; ++e) sm_acc[stream][h][sub * 8 + e] = acc[h][e];
    if (sub == 0) {
      sm_m[stream][h] = m[h];
      sm_l[stream][h] = l[h];
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < group * D; idx += kThreads) {
    const int h = idx / D, d = idx % D;
    float M = -INFINITY;
    for (int s = 0; s < NS; ++s) M = fmaxf(M, sm_m[s][h]);
    float L = 0.0f, O = 0.0f;
    if (M != -INFINITY) {
      for (int s = 0; s < NS; ++s) {
        const float w = exp2f(sm_m[s][h] - M);  // streams that saw nothing: exp2(-inf) = 0
        L += sm_l[s][h] * w;
        O += sm_acc[s][h][d] * w;
      }
    }
    const float inv = L > 0.0f ? 1.0f / L : 0.0f;
    if (it.partial < 0) {
      a.out[(tok * a.num_heads + kvh * group + h) * D + d] = __float2bfloat16_rn(O * inv);
    } else {
      const int64_t prow = (static_cast<int64_t>(it.partial) * a.num_kv_heads + kvh) * a.rows_per_tile + h;
      a.partial_o[prow * D + d] = O * inv;
      if (d == 0) a.partial_lse[prow] = L > 0.0f ? M + log2f(L) : -INFINITY;
    }
  }
}

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

template <int D>
void launch_decode(const AttentionArgs& a, int group, dim3 grid, cudaStream_t stream) {
  if (group <= 1) {
    launch(attention_decode_kernel<D, 1>, grid, dim3(kThreads), 0, stream, a);
  } else if (group <= 2) {
    launch(attention_decode_kernel<D, 2>, grid, dim3(kThreads), 0, stream, a);
  } else if (group <= 4) {
    launch(attention_decode_kernel<D, 4>, grid, dim3(kThreads), 0, stream, a);
  } else {
    launch(attention_decode_kernel<D, 8>, grid, dim3(kThreads), 0, stream, a);
  }
}

}  // namespace

void attention_decode(const AttentionArgs& a, cudaStream_t stream) {
  if (a.num_items == 0) return;
  const int group = a.num_heads / a.num_kv_heads;
  KERNEL_REQUIRE(a.num_heads % a.num_kv_heads == 0 && group <= kDecodeMaxGroup, "attention_decode: group must be <= 8");
  KERNEL_REQUIRE(a.rows_per_tile == group, "attention_decode: plan with rows_per_tile == group");
  KERNEL_REQUIRE(!a.cache.fp8, "attention_decode: the CUDA-core kernel reads a bf16 cache (an FP8 one takes the tensor-core tiles)");
  const dim3 grid = work_item_grid(a.num_items, a.num_kv_heads);
  switch (a.head_dim) {
    case 64: launch_decode<64>(a, group, grid, stream); break;
    case 128: launch_decode<128>(a, group, grid, stream); break;
    default: KERNEL_REQUIRE(false, "attention_decode: head_dim must be 64 or 128");
  }
}

void attention_merge(const AttentionArgs& a, cudaStream_t stream) {
  if (a.num_merges == 0) return;
  KERNEL_REQUIRE(a.merge_rows >= 1 && a.merge_rows <= a.rows_per_tile, "attention_merge: merge_rows");
  const int64_t blocks = static_cast<int64_t>(a.num_merges) * a.merge_rows;
  KERNEL_REQUIRE(blocks <= 0x7fffffff && a.head_dim <= 1024, "attention_merge: too many rows");
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(a.num_kv_heads));
  launch(attention_merge_kernel, grid, dim3(static_cast<unsigned>(a.head_dim)), 0, stream, a);
}

}  // namespace inferscale::cuda
