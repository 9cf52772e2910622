// FP8 E4M3 on the device: the twin of tensor/fp8.h's rounding (the FP8 KV cache, cuda_ops.h
// KvCache). A row's scale is amax / 448 and its codes e4m3(x * (1 / scale)), rounded to nearest
// even and saturating at 448 (cvt.rn.satfinite, as f32_to_e4m3 does); a zero (or non-finite) amax
// gives scale 0 and zero codes. Codes widen to f16 exactly (e4m3x2_to_f16x2).
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

// Widening: E4M3 codes to f16, exactly (every E4M3 value is an f16), by the hardware's pair
// conversion (cvt.rn.f16x2.e4m3x2, sm_89+: one instruction per two codes).
// Two codes (code 0 in the low byte) as f16x2 of their values, code 0 in the low half.
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t pair) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair & 0xffffu), __NV_E4M3);
  return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
}
// Four codes (one word, code 0 in the low byte) as two f16x2 of their values: lo = codes 0, 1;
// hi = codes 2, 3.
__device__ __forceinline__ void e4m3x4_to_f16x2x2(uint32_t w, uint32_t& lo, uint32_t& hi) {
  lo = e4m3x2_to_f16x2(w);
  hi = e4m3x2_to_f16x2(w >> 16);
}
// The same, pairing the word's codes across its halves: lo = codes 0, 2; hi = codes 1, 3 (what a
// transposing ldmatrix of code pairs delivers: two entries' codes of two adjacent dims).
__device__ __forceinline__ void e4m3x4_to_f16x2x2_interleaved(uint32_t w, uint32_t& lo, uint32_t& hi) {
  lo = e4m3x2_to_f16x2(__byte_perm(w, 0u, 0x0020u));
  hi = e4m3x2_to_f16x2(__byte_perm(w, 0u, 0x0031u));
}
// Codes of 16 consecutive elements times a row's scale as 16 f16 (two 16-byte words). The scale
// travels as f16 times 2^8 (e4m3_f16_scale), so that small scales keep their precision, and the
// widened values are taken times 2^-8 first (exact: the smallest E4M3 subnormal, 2^-9, becomes
// 2^-17, an f16 subnormal). The products must be within f16's range (|x| < 65504).
__device__ __forceinline__ __half2 e4m3_f16_scale(float scale) { return __float2half2_rn(scale * 256.0f); }
__device__ __forceinline__ void e4m3x16_to_f16(const uint4& codes, __half2 scale256, uint4& lo, uint4& hi) {
  const __half2 kTwoPowMinus8 = __float2half2_rn(1.0f / 256.0f);
  const uint32_t w[4] = {codes.x, codes.y, codes.z, codes.w};
  uint32_t out[8];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    uint32_t bits[2];
    e4m3x4_to_f16x2x2(w[q], bits[0], bits[1]);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const __half2 v = __hmul2(__hmul2(*reinterpret_cast<const __half2*>(&bits[h]), kTwoPowMinus8), scale256);
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

// Eight codes (element 0 in the low byte of w.x) as f32: each code's value times `scale`, one f32
// multiply each (tensor/fp8.h's dequantize_e4m3_row, bit for bit).
__device__ __forceinline__ void e4m3x8_to_f32(uint2 codes, float scale, float* y) {
  const uint32_t w[2] = {codes.x, codes.y};
#pragma unroll
  for (int q = 0; q < 2; ++q) {
    uint32_t h[2];
    e4m3x4_to_f16x2x2(w[q], h[0], h[1]);
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h[e]));
      y[4 * q + 2 * e] = f.x * scale;
      y[4 * q + 2 * e + 1] = f.y * scale;
    }
  }
}

}  // namespace inferscale::cuda
