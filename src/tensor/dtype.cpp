#include "tensor/dtype.h"

#include <algorithm>
#include <cmath>

#include "tensor/quant.h"
#include "util/check.h"

namespace inferscale {

uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;    // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;   // overflow (after rounding) -> inf
  if (abs < 0x38800000u) {                         // subnormal or zero in f16
    if (abs < 0x33000000u) return sign;            // below half the smallest subnormal
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exp;              // 14 + (112 - exp) ... aligns to 2^-24 units
    uint32_t v = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (v & 1u))) ++v;
    return sign | static_cast<uint16_t>(v);
  }
  uint32_t v = ((abs >> 13) - ((127 - 15) << 10));
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (v & 1u))) ++v;
  return sign | static_cast<uint16_t>(v);
}

namespace detail {
void throw_no_element_size(DType t) {
  IS_THROW(kInternal, "dtype {} is block-quantized: it has no per-element size (use dtype_bytes)", dtype_name(t));
}
}  // namespace detail

size_t dtype_bytes(DType t, int64_t n) {
  const BlockShape b = dtype_block(t);
  IS_CHECK(b.bytes > 0 && n >= 0, "dtype_bytes({}, {})", static_cast<int>(t), n);
  IS_REQUIRE(n % b.elems == 0, kInvalidInput, "{} values of dtype {} are not a whole number of {}-value blocks", n,
             dtype_name(t), b.elems);
  return static_cast<size_t>(n / b.elems * b.bytes);
}

namespace {

// One thread's share: `n_blocks` whole blocks (single values for scalar types).
void convert_serial(DType t, const uint8_t* src, float* dst, int64_t n_blocks) {
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n_blocks) * 4);
      return;
    case DType::kF16: {
      const auto* s = reinterpret_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n_blocks; ++i) dst[i] = f16_to_f32(s[i]);
      return;
    }
    case DType::kBF16: {
      const auto* s = reinterpret_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n_blocks; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    default:
      quant::dequantize_blocks(t, src, dst, n_blocks);
  }
}

}  // namespace

void convert_to_f32(DType t, const void* src, float* dst, size_t n) {
  IS_REQUIRE(t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || is_block_quantized(t), kUnsupported,
             "cannot convert dtype {} to f32", dtype_name(t));
  const BlockShape b = dtype_block(t);
  const int64_t n_blocks = static_cast<int64_t>(dtype_bytes(t, static_cast<int64_t>(n))) / b.bytes;
  // Chunks of about 256K values (~1 ms each), taken by the OpenMP threads as they come. Tensors
  // under 4M values stay on this thread: a parallel region costs a fork and a barrier, and on a
  // busy machine the barrier waits for a descheduled thread (measured on 2 loaded cores, SmolLM2's
  // 272 tensors: 0.6 s on one thread, 2.5-4.5 s with a region per tensor). Each chunk is converted
  // alone, so the values do not depend on the thread count.
  const int64_t per_chunk = std::max<int64_t>(1, (int64_t{1} << 18) / b.elems);
  const int64_t n_chunks = (n_blocks + per_chunk - 1) / per_chunk;
  const bool parallel = n_blocks * b.elems >= (int64_t{1} << 22);
  const auto* s = static_cast<const uint8_t*>(src);
  // Checked here: nothing may throw inside the parallel loop.
  IS_CHECK(t == DType::kF32 || reinterpret_cast<uintptr_t>(src) % 2 == 0, "{} data at an odd address", dtype_name(t));
#pragma omp parallel for schedule(dynamic) if (parallel)
  for (int64_t c = 0; c < n_chunks; ++c) {
    const int64_t first = c * per_chunk;
    convert_serial(t, s + first * b.bytes, dst + first * b.elems, std::min(per_chunk, n_blocks - first));
  }
}

void convert_from_f32(DType t, const float* src, void* dst, size_t n) {
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::kF16:
      for (size_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = f32_to_f16(src[i]);
      return;
    case DType::kBF16:
      for (size_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = f32_to_bf16(src[i]);
      return;
    default:
      IS_THROW(kUnsupported, "cannot convert f32 to dtype {}", dtype_name(t));
  }
}

}  // namespace inferscale
