// The fused attention prologue (FlashInfer-style append): bias, per-head q/k RMSNorm, pre-RoPE
// capture into the memory pool, RoPE, and the K/V store into the paged cache, in one pass.
//
// One warp per (token t, fused head h), h in [0, NH + 2 * NKV):
//   h <  NH            query head h             -> q_out[t, h]
//   h <  NH + NKV      key head kh = h - NH     -> k_cache[slot_mapping[t], kh]  (pool: before RoPE)
//   otherwise          value head vh            -> v_cache[slot_mapping[t], vh]  (pool: as is)
// An FP8 cache or pool (KvCache::fp8) gets the head's codes and its scale (the warp's amax).
// Lane l holds the rotation pairs p = l, l + 32, ... < D/2:
//   halves layout (HF):       elements (p, p + D/2)
//   interleaved layout:       elements (2p, 2p + 1)
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/fp8_utils.cuh"

namespace inferscale::cuda {
namespace {

constexpr int kMaxPairsPerLane = 4;  // head_dim <= 256
constexpr int kWarpsPerBlock = 4;

// A k or v head's row (x0 / x1: the lane's pairs, at elements i0 / i1) into (slot, kv head) row
// `row` of `dst`: bf16, or FP8 codes with the row's scale (the whole warp takes part).
__device__ __forceinline__ void store_head(const KvCache& dst, bool is_k, int64_t row, int D, int lane,
                                           const float* x0, const float* x1, const int* i0, const int* i1) {
  const int half = D / 2;
  if (dst.fp8) {
    float amax = 0.0f;
#pragma unroll
    for (int k = 0; k < kMaxPairsPerLane; ++k)
      if (lane + 32 * k < half) amax = fmaxf(amax, fmaxf(fabsf(x0[k]), fabsf(x1[k])));
    const float scale = e4m3_scale(warp_max(amax)), inv = e4m3_inv(scale);
    uint8_t* d = static_cast<uint8_t*>(is_k ? dst.k : dst.v) + row * D;
#pragma unroll
    for (int k = 0; k < kMaxPairsPerLane; ++k) {
      if (lane + 32 * k < half) {
        d[i0[k]] = f32_to_e4m3_code(x0[k] * inv);
        d[i1[k]] = f32_to_e4m3_code(x1[k] * inv);
      }
    }
    if (lane == 0) (is_k ? dst.k_scale : dst.v_scale)[row] = scale;
    return;
  }
  bf16* d = static_cast<bf16*>(is_k ? dst.k : dst.v) + row * D;
#pragma unroll
  for (int k = 0; k < kMaxPairsPerLane; ++k) {
    if (lane + 32 * k < half) {
      d[i0[k]] = __float2bfloat16_rn(x0[k]);
      d[i1[k]] = __float2bfloat16_rn(x1[k]);
    }
  }
}

__global__ void qkv_rope_append_kernel(QkvRopeAppendArgs a) {
  const int NH = a.num_heads, NKV = a.num_kv_heads, D = a.head_dim, half = D / 2;
  const int heads = NH + 2 * NKV;
  const int64_t warp_id = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + (threadIdx.x >> 5);
  if (warp_id >= a.T * heads) return;  // whole warp leaves together (an exit counts as launch_dependents)
  const int lane = threadIdx.x & 31;
  const int64_t t = warp_id / heads;
  const int h = static_cast<int>(warp_id % heads);
  const bool is_q = h < NH, is_k = !is_q && h < NH + NKV, is_v = !is_q && !is_k;
  const int kvh = is_k ? h - NH : h - NH - NKV;

  // Metadata and the RoPE table row (launch.cuh: no kernel writes them) before the wait, so only
  // the qkv row's load is left after it.
  const int64_t slot = a.slot_mapping[t];
  const int64_t cap = (a.capture_slot != nullptr && !is_q) ? a.capture_slot[t] : -1;
  const bool rotate = !is_v && a.cos_table != nullptr;  // no table: an encoder's heads, not rotated
  float cs[kMaxPairsPerLane], sn[kMaxPairsPerLane];
  if (rotate) {
    const int64_t pos = a.positions[t];
#pragma unroll
    for (int k = 0; k < kMaxPairsPerLane; ++k) {
      const int p = lane + 32 * k;
      cs[k] = p < half ? a.cos_table[pos * half + p] : 0.0f;
      sn[k] = p < half ? a.sin_table[pos * half + p] : 0.0f;
    }
  }
  pdl_begin();

  const float* src = a.qkv + (t * heads + h) * D;
  const float* bias = a.bias != nullptr ? a.bias + static_cast<int64_t>(h) * D : nullptr;
  float x0[kMaxPairsPerLane], x1[kMaxPairsPerLane];
  int i0[kMaxPairsPerLane], i1[kMaxPairsPerLane];
#pragma unroll
  for (int k = 0; k < kMaxPairsPerLane; ++k) {
    const int p = lane + 32 * k;
    i0[k] = a.interleaved ? 2 * p : p;
    i1[k] = a.interleaved ? 2 * p + 1 : p + half;
    x0[k] = x1[k] = 0.0f;
    if (p < half) {
      x0[k] = src[i0[k]];
      x1[k] = src[i1[k]];
      if (bias != nullptr) {
        x0[k] += bias[i0[k]];
        x1[k] += bias[i1[k]];
      }
    }
  }

  // Per-head RMSNorm (Qwen3) of q and k heads: sum of squares over the head, f32.
  const float* norm_w = is_q ? a.q_norm : (is_k ? a.k_norm : nullptr);
  if (norm_w != nullptr) {
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < kMaxPairsPerLane; ++k) ss += x0[k] * x0[k] + x1[k] * x1[k];
    ss = warp_sum(ss);
    const float inv = rsqrtf(ss / static_cast<float>(D) + a.eps);
#pragma unroll
    for (int k = 0; k < kMaxPairsPerLane; ++k) {
      if (lane + 32 * k < half) {
        x0[k] = x0[k] * inv * norm_w[i0[k]];
        x1[k] = x1[k] * inv * norm_w[i1[k]];
      }
    }
  }

  // Write path: k before rotation, v as is. `cap` is per token, so a warp is all in or all out.
  if (cap >= 0) store_head(a.pool, is_k, cap * NKV + kvh, D, lane, x0, x1, i0, i1);

  if (rotate) {  // RoPE with the host-built table row of this token's position
#pragma unroll
    for (int k = 0; k < kMaxPairsPerLane; ++k) {
      if (lane + 32 * k < half) {
        const float u = x0[k], v = x1[k];
        x0[k] = u * cs[k] - v * sn[k];
        x1[k] = v * cs[k] + u * sn[k];
      }
    }
  }

  if (!is_q) {
    store_head(a.cache, is_k, slot * NKV + kvh, D, lane, x0, x1, i0, i1);
    return;
  }
  bf16* dst = a.q_out + (t * NH + h) * D;
#pragma unroll
  for (int k = 0; k < kMaxPairsPerLane; ++k) {
    if (lane + 32 * k < half) {
      dst[i0[k]] = __float2bfloat16_rn(x0[k]);
      dst[i1[k]] = __float2bfloat16_rn(x1[k]);
    }
  }
}

}  // namespace

void qkv_rope_append(const QkvRopeAppendArgs& a, cudaStream_t stream) {
  if (a.T == 0) return;
  KERNEL_REQUIRE(a.head_dim % 2 == 0 && a.head_dim <= 2 * 32 * kMaxPairsPerLane, "qkv_rope_append: head_dim");
  KERNEL_REQUIRE((a.q_norm == nullptr) == (a.k_norm == nullptr), "qkv_rope_append: q_norm and k_norm go together");
  KERNEL_REQUIRE(a.capture_slot == nullptr || (a.pool.k != nullptr && a.pool.v != nullptr),
                 "qkv_rope_append: capture without a pool");
  const int64_t warps = a.T * (a.num_heads + 2 * a.num_kv_heads);
  const int64_t blocks = (warps + kWarpsPerBlock - 1) / kWarpsPerBlock;
  KERNEL_REQUIRE(blocks <= 0x7fffffff, "qkv_rope_append: too many tokens");
  launch(qkv_rope_append_kernel, dim3(static_cast<unsigned>(blocks)), dim3(32 * kWarpsPerBlock), 0, stream, a);
}

}  // namespace inferscale::cuda
