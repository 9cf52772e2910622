// FP8 E4M3 on the device: the twin of tensor/fp8.h's rounding (the FP8 KV cache, cuda_ops.h
// KvCache). A row's scale is amax / 448 and its codes e4m3(x * (1 / scale)), rounded to nearest
// even and saturating at 448 (cvt.rn.satfinite, as f32_to_e4m3 does); a zero (or non-finite) amax
// gives scale 0 and zero codes. Codes widen to f16 exactly (e4m3x16_to_f16).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "tensor/fp8.h"  // kE4M3Max, and the host rounding this file mirrors

namespace inferscale::cuda {

// The scale of a row whose largest magnitude is amax, and the factor its values are multiplied by.
__device__ __forceinline__ float e4m3_scale(float amax) {
  return (amax > 0.0f && isfinite(amax)) ? amax / kE4M3Max : 0.0f;
}
__device__ __forceinline__ float e4m3_inv(float scale) { return scale > 0.0f ? 1.0f / scale : 0.0f; }

__device__ __forceinline__ uint8_t f32_to_e4m3_code(float x) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
}

// Codes of 16 consecutive elements times `scale` as 16 f16 (two 16-byte words), by bit moves and
// one f16 multiply a pair: an E4M3 code's bits (s eeee mmm) placed as f16 (s 0eeee mmm0000000)
// are the code's value times 2^-8, subnormals included, so `scale` must carry the 2^8 (pass
// e4m3_f16_scale(scale)). The products must be within f16's range (|x| < 65504).
__device__ __forceinline__ __half2 e4m3_f16_scale(float scale) { return __float2half2_rn(scale * 256.0f); }
// Two codes at bits 0 and 16 (the other bits zero) as f16x2 of their values x 2^-8.
__device__ __forceinline__ uint32_t e4m3x2_spread_to_f16x2(uint32_t u) {
  return ((u << 7) & 0x3f803f80u) | ((u << 8) & 0x80008000u);
}
// Four codes (one word, code 0 in the low byte) as two f16x2 of their values x 2^-8: lo = codes
// 0, 1; hi = codes 2, 3.
__device__ __forceinline__ void e4m3x4_to_f16x2x2(uint32_t w, uint32_t& lo, uint32_t& hi) {
  lo = e4m3x2_spread_to_f16x2(__byte_perm(w, 0u, 0x4140u));  // codes 0, 1 at bits 0, 16
  hi = e4m3x2_spread_to_f16x2(__byte_perm(w, 0u, 0x4342u));
}
// The same, pairing the word's codes across its halves: lo = codes 0, 2; hi = codes 1, 3 (what a
// transposing ldmatrix of code pairs delivers: two entries' codes of two adjacent dims).
__device__ __forceinline__ void e4m3x4_to_f16x2x2_interleaved(uint32_t w, uint32_t& lo, uint32_t& hi) {
  lo = e4m3x2_spread_to_f16x2(__byte_perm(w, 0u, 0x4240u));
  hi = e4m3x2_spread_to_f16x2(__byte_perm(w, 0u, 0x4341u));
}
__device__ __forceinline__ void e4m3x16_to_f16(const uint4& codes, __half2 scale256, uint4& lo, uint4& hi) {
  const uint32_t w[4] = {codes.x, codes.y, codes.z, codes.w};
  uint32_t out[8];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    uint32_t bits[2];
    e4m3x4_to_f16x2x2(w[q], bits[0], bits[1]);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const __half2 v = __hmul2(*reinterpret_cast<const __half2*>(&bits[h]), scale256);
      out[2 * q + h] = *reinterpret_cast<const uint32_t*>(&v);
    }
  }
  lo = make_uint4(out[0], out[1], out[2], out[3]);
  hi = make_uint4(out[4], out[5], out[6], out[7]);
}

// Packs N (8 or 16) values times `inv` into N codes: N / 4 words, element 0 in the low byte.
template <int N>
__device__ __forceinline__ void f32_to_e4m3_words(const float* x, float inv, uint32_t* w) {
#pragma unroll
  for (int q = 0; q < N / 4; ++q) {
    w[q] = 0;
#pragma unroll
    for (int b = 0; b < 4; ++b) w[q] |= static_cast<uint32_t>(f32_to_e4m3_code(x[4 * q + b] * inv)) << (8 * b);
  }
}
__device__ __forceinline__ uint4 f32x16_to_e4m3(const float* x, float inv) {
  uint32_t w[4];
  f32_to_e4m3_words<16>(x, inv, w);
  return make_uint4(w[0], w[1], w[2], w[3]);
}
__device__ __forceinline__ uint2 f32x8_to_e4m3(const float* x, float inv) {
  uint32_t w[2];
  f32_to_e4m3_words<8>(x, inv, w);
  return make_uint2(w[0], w[1]);
}

}  // namespace inferscale::cuda
