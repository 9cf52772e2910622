// Memory injection (Chunked RoPE): gather pool slots -> rotate K to the serving positions ->
// scatter into cache slots, for every layer in one launch. Pure data movement plus a rotation:
// its floor is the bytes (read K and V once, write them once).
//
// One thread per unit u of one (layer l, token i) row; a unit is 16 elements of one kv head
// (kh = u / (D/16), j = u % (D/16)), two 16-byte chunks of K and two of V:
//   halves layout:       K elements [8j, 8j+8) and [D/2 + 8j, D/2 + 8j + 8)  = pairs p = 8j + e, e < 8
//   interleaved layout:  K elements [16j, 16j+16)                           = pairs p = 8j + e, e < 8
//   V: elements [16j, 16j+16), copied as they are.
// Index order (u fastest, then i, then l) keeps a warp on consecutive 16-byte chunks of a row.
// An FP8 pool (KvCache::fp8) is read as codes times the row's scale, in f32. An FP8 cache: the
// D / 16 threads of one (token, kv head) row are consecutive lanes, so the row's amax (its scale)
// is a shuffle over them; every lane of a warp runs the loop the same number of times (lanes past
// the end only take part in the shuffles).
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/fp8_utils.cuh"

namespace inferscale::cuda {
namespace {

// Elements [e, e + 8) of (slot, kv head) row `row` of a pool layer's K (or V) as f32.
__device__ __forceinline__ void load8(const KvCache& p, bool is_k, int64_t row, int D, int e, float* x) {
  if (p.fp8) {
    const uint8_t* c = static_cast<const uint8_t*>(is_k ? p.k : p.v) + row * D + e;
    e4m3x8_to_f32(*reinterpret_cast<const uint2*>(c), (is_k ? p.k_scale : p.v_scale)[row], x);
  } else {
    bf16x8_to_f32(*reinterpret_cast<const Bf16x8*>(static_cast<const bf16*>(is_k ? p.k : p.v) + row * D + e), x);
  }
}

__global__ void inject_kernel(InjectArgs a) {
  const int D = a.head_dim, half = D / 2, NKV = a.num_kv_heads;
  const int units_per_head = D / 16;
  const int64_t units = static_cast<int64_t>(NKV) * units_per_head;
  const int64_t total = static_cast<int64_t>(a.num_layers) * a.N * units;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;  // a multiple of 32
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  for (int64_t base = first - (threadIdx.x & 31); base < total; base += stride) {
    const int64_t idx = base + (threadIdx.x & 31);
    const bool live = idx < total;  // a row's lanes are all live or all not (total: whole rows)
    const int64_t u = live ? idx % units : 0;
    const int64_t i = live ? (idx / units) % a.N : 0;
    const int64_t l = live ? idx / (units * a.N) : 0;
    const int kh = static_cast<int>(u / units_per_head), j = static_cast<int>(u % units_per_head);
    const int64_t src_head = a.src_slots[i] * NKV + kh;  // (slot, kv head) row of the pool layer
    const int64_t dst_row = (a.dst_slots[i] * NKV + kh) * D;
    const KvCache pl = a.pool.layer(l, a.pool_layer_stride, D);

    // V: two chunks, as they are (bf16 -> f32 -> bf16 is exact).
    float vx[16];
    load8(pl, false, src_head, D, 16 * j, vx);
    load8(pl, false, src_head, D, 16 * j + 8, vx + 8);
    const int e0 = a.interleaved ? 16 * j : 8 * j;          // first K chunk
    const int e1 = a.interleaved ? 16 * j + 8 : half + 8 * j;  // second K chunk

    // cos/sin of pairs 8j .. 8j+7 at this token's position.
    const int64_t trow = static_cast<int64_t>(a.positions[i]) * half + 8 * j;
    float c[8], s[8];
    *reinterpret_cast<float4*>(c) = *reinterpret_cast<const float4*>(a.cos_table + trow);
    *reinterpret_cast<float4*>(c + 4) = *reinterpret_cast<const float4*>(a.cos_table + trow + 4);
    *reinterpret_cast<float4*>(s) = *reinterpret_cast<const float4*>(a.sin_table + trow);
    *reinterpret_cast<float4*>(s + 4) = *reinterpret_cast<const float4*>(a.sin_table + trow + 4);

    float x[16], y[16];
    load8(pl, true, src_head, D, e0, x);
    load8(pl, true, src_head, D, e1, x + 8);
    if (a.interleaved) {  // pair e = (x[2e], x[2e+1])
#pragma unroll
      for (int e = 0; e < 8; ++e) rope_pair(x[2 * e], x[2 * e + 1], c[e], s[e], y[2 * e], y[2 * e + 1]);
    } else {  // pair e = (x[e], x[8 + e])
#pragma unroll
      for (int e = 0; e < 8; ++e) rope_pair(x[e], x[8 + e], c[e], s[e], y[e], y[8 + e]);
    }
    const KvCache cl = a.cache.layer(l, a.cache_layer_stride, D);
    if (cl.fp8) {
      // The row's scale: amax over its D / 16 lanes (xor offsets below units_per_head stay inside
      // the row's aligned group of lanes).
      float ka = 0.0f, va = 0.0f;
#pragma unroll
      for (int e = 0; e < 16; ++e) {
        ka = fmaxf(ka, fabsf(y[e]));
        va = fmaxf(va, fabsf(vx[e]));
      }
      for (int off = 1; off < units_per_head; off <<= 1) {
        ka = fmaxf(ka, __shfl_xor_sync(0xffffffffu, ka, off));
        va = fmaxf(va, __shfl_xor_sync(0xffffffffu, va, off));
      }
      if (!live) continue;
      const float ks = e4m3_scale(ka), vs = e4m3_scale(va);
      const float kinv = e4m3_inv(ks), vinv = e4m3_inv(vs);
      uint8_t* kc = static_cast<uint8_t*>(cl.k) + dst_row;
      uint8_t* vc = static_cast<uint8_t*>(cl.v) + dst_row;
      *reinterpret_cast<uint2*>(kc + e0) = f32x8_to_e4m3(y, kinv);
      *reinterpret_cast<uint2*>(kc + e1) = f32x8_to_e4m3(y + 8, kinv);
      *reinterpret_cast<uint4*>(vc + 16 * j) = f32x16_to_e4m3(vx, vinv);
      if (j == 0) {
        cl.k_scale[a.dst_slots[i] * NKV + kh] = ks;
        cl.v_scale[a.dst_slots[i] * NKV + kh] = vs;
      }
      continue;
    }
    if (!live) continue;
    bf16* kc = static_cast<bf16*>(cl.k) + dst_row;
    bf16* vc = static_cast<bf16*>(cl.v) + dst_row;
    *reinterpret_cast<Bf16x8*>(kc + e0) = f32_to_bf16x8(y);
    *reinterpret_cast<Bf16x8*>(kc + e1) = f32_to_bf16x8(y + 8);
    *reinterpret_cast<Bf16x8*>(vc + 16 * j) = f32_to_bf16x8(vx);
    *reinterpret_cast<Bf16x8*>(vc + 16 * j + 8) = f32_to_bf16x8(vx + 8);
  }
}

}  // namespace

void inject(const InjectArgs& a, cudaStream_t stream) {
  if (a.N == 0 || a.num_layers == 0) return;
  KERNEL_REQUIRE(a.head_dim % 16 == 0, "inject: head_dim must be a multiple of 16");
  const int64_t total = static_cast<int64_t>(a.num_layers) * a.N * a.num_kv_heads * (a.head_dim / 16);
  int device = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  // Enough blocks for ~8 resident per SM; the grid-stride loop takes the rest.
  const int threads = 256;
  const int64_t want = (total + threads - 1) / threads;
  const int64_t cap = static_cast<int64_t>(sms) * 16;
  inject_kernel<<<static_cast<unsigned>(want < cap ? want : cap), threads, 0, stream>>>(a);
  CUDA_CHECK_LAUNCH("inject_kernel");
}

}  // namespace inferscale::cuda
