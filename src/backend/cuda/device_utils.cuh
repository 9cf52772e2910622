// Small helpers shared by the kernels: warp/block reductions, 16-byte bf16 vectors, scalar
// stores of either output type, and the grid size of a grid-stride loop.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace inferscale::cuda {

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// `warp_op` (warp_sum, warp_max) over the whole block (blockDim.x a multiple of 32, at most
// 1024); lanes past the block's warps contribute 0. Every thread gets the result. `scratch` holds
// 32 floats of shared memory; the call contains __syncthreads.
template <float (*warp_op)(float)>
__device__ __forceinline__ float block_reduce(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_op(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < nwarps ? scratch[lane] : 0.0f;
  return warp_op(v);
}
__device__ __forceinline__ float block_sum(float v, float* scratch) { return block_reduce<warp_sum>(v, scratch); }
// The maximum of non-negative values.
__device__ __forceinline__ float block_max(float v, float* scratch) { return block_reduce<warp_max>(v, scratch); }

// One element of an output of either type, rounded to nearest for bf16.
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void store(float* p, float v) { *p = v; }

// Host side: blocks of `threads` for `work` elements of a grid-stride loop (at least 1, at most
// 65535 * 16).
inline unsigned grid_for(int64_t work, int threads) {
  const int64_t blocks = (work + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65535 * 16 ? 65535 * 16 : blocks));
}

// Host side, for the launchers' checks: whether p is aligned to n bytes.
inline bool is_aligned(const void* p, size_t n) { return reinterpret_cast<uintptr_t>(p) % n == 0; }

// Eight bf16 in one 16-byte word.
struct alignas(16) Bf16x8 {
  __nv_bfloat162 h[4];
};

__device__ __forceinline__ void bf16x8_to_f32(const Bf16x8& v, float* f) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 p = __bfloat1622float2(v.h[i]);
    f[2 * i] = p.x;
    f[2 * i + 1] = p.y;
  }
}

__device__ __forceinline__ Bf16x8 f32_to_bf16x8(const float* f) {
  Bf16x8 v;
#pragma unroll
  for (int i = 0; i < 4; ++i) v.h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
  return v;
}

// One RoPE pair (x0, x1) rotated by the angle whose cosine and sine are (c, s), in f32: the one
// expression injection and attention reading facts in place both use, so a key rotated by either
// rounds to the same bf16.
__device__ __forceinline__ void rope_pair(float x0, float x1, float c, float s, float& y0, float& y1) {
  y0 = x0 * c - x1 * s;
  y1 = x1 * c + x0 * s;
}

}  // namespace inferscale::cuda
