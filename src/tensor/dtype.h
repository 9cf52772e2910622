// Element types of weights and activations, conversions between the 16-bit floats and float, and
// the block shape of every dtype: scalar types are blocks of one element; the GGML block-quantized
// types store a block of 32 or 256 values in a fixed number of bytes (src/tensor/quant.h draws each
// block). A block type has no per-element size: ask for the bytes of a whole number of blocks.
#pragma once
#include <cstdint>
#include <cstring>
#include <string_view>

namespace inferscale {

// The numeric values are stable (KV files store them): append new types at the end.
enum class DType : uint8_t {
  kF32, kF16, kBF16, kI32, kI64, kU8,
  // GGML block-quantized weights (read from GGUF files, dequantized to f32 by convert_to_f32)
  kQ4_0, kQ4_1, kQ5_0, kQ5_1, kQ8_0, kQ2_K, kQ3_K, kQ4_K, kQ5_K, kQ6_K,
};

// `elems` consecutive values are stored in `bytes` bytes; {1, sizeof(T)} for a scalar type.
struct BlockShape {
  int64_t elems;
  int64_t bytes;
};

constexpr BlockShape dtype_block(DType t) {
  switch (t) {
    case DType::kF32: return {1, 4};
    case DType::kF16: return {1, 2};
    case DType::kBF16: return {1, 2};
    case DType::kI32: return {1, 4};
    case DType::kI64: return {1, 8};
    case DType::kU8: return {1, 1};
    case DType::kQ4_0: return {32, 18};
    case DType::kQ4_1: return {32, 20};
    case DType::kQ5_0: return {32, 22};
    case DType::kQ5_1: return {32, 24};
    case DType::kQ8_0: return {32, 34};
    case DType::kQ2_K: return {256, 84};
    case DType::kQ3_K: return {256, 110};
    case DType::kQ4_K: return {256, 144};
    case DType::kQ5_K: return {256, 176};
    case DType::kQ6_K: return {256, 210};
  }
  return {1, 0};
}

constexpr bool is_block_quantized(DType t) { return dtype_block(t).elems > 1; }

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kU8: return "u8";
    case DType::kQ4_0: return "q4_0";
    case DType::kQ4_1: return "q4_1";
    case DType::kQ5_0: return "q5_0";
    case DType::kQ5_1: return "q5_1";
    case DType::kQ8_0: return "q8_0";
    case DType::kQ2_K: return "q2_k";
    case DType::kQ3_K: return "q3_k";
    case DType::kQ4_K: return "q4_k";
    case DType::kQ5_K: return "q5_k";
    case DType::kQ6_K: return "q6_k";
  }
  return "?";
}

namespace detail {
[[noreturn]] void throw_no_element_size(DType t);
}

// Bytes of one element of a scalar type. A block-quantized type has none: an internal error
// (callers that may see one use dtype_bytes).
inline size_t dtype_size(DType t) {
  if (is_block_quantized(t)) [[unlikely]]
    detail::throw_no_element_size(t);
  return static_cast<size_t>(dtype_block(t).bytes);
}

// Bytes of `n` consecutive values: n must be a whole number of blocks (kInvalidInput otherwise).
size_t dtype_bytes(DType t, int64_t n);

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: normalize
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      u = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_f16(float f);

// Converts n values of `src` (dtype `t`: f32, f16, bf16 or a block-quantized type, which is
// dequantized) to float. For a block type n is a whole number of blocks and `src` points at the
// first block's first byte. Large conversions are spread over the OpenMP threads; the result does
// not depend on their number.
void convert_to_f32(DType t, const void* src, float* dst, size_t n);

// Writes n floats as dtype `t` (f32: copied; f16, bf16: rounded to nearest even), one thread.
// kUnsupported for other dtypes (block-quantized types are never written here).
void convert_from_f32(DType t, const float* src, void* dst, size_t n);

}  // namespace inferscale
