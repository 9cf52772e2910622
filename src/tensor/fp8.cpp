#include "tensor/fp8.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>

namespace inferscale {
namespace {

// All 256 codes' values (NaN at 0x7f and 0xff), built once: one load a value when dequantizing.
const std::array<float, 256>& code_values() {
  static const std::array<float, 256> v = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) {
      const int e = (c >> 3) & 0xf, m = c & 7;
      const float x = (c & 0x7f) == 0x7f ? std::nanf("")
                      : e == 0           ? std::ldexp(static_cast<float>(m), -9)  // subnormal: m / 8 * 2^-6
                                         : std::ldexp(1.0f + static_cast<float>(m) / 8.0f, e - 7);
      t[static_cast<size_t>(c)] = (c & 0x80) ? -x : x;
    }
    return t;
  }();
  return v;
}

}  // namespace

float e4m3_to_f32(uint8_t code) { return code_values()[code]; }

uint8_t f32_to_e4m3(float x) {
  if (std::isnan(x)) return 0x7f;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const float a = std::fabs(x);
  if (a >= kE4M3Max) return sign | 0x7e;  // saturate (448 is code 0x7e)
  // Subnormals (a < 2^-6) are multiples of 2^-9: the code is round(a * 2^9), 8 being 2^-6 itself.
  // Normals 2^E (1 + m/8): round a to 4 significant bits, q = round(a * 2^(3 - E)) in [8, 16]
  // (16 carries into the next exponent), code = (E + 7) * 8 + q - 8. nearbyint rounds ties to
  // even, and an even q is an even code.
  int code;
  if (a < 0.015625f) {
    code = static_cast<int>(std::nearbyint(a * 512.0f));
  } else {
    const int E = static_cast<int>((std::bit_cast<uint32_t>(a) >> 23) & 0xff) - 127;
    const float step = std::bit_cast<float>(static_cast<uint32_t>(127 + 3 - E) << 23);  // 2^(3 - E), exact
    code = (E + 7) * 8 + static_cast<int>(std::nearbyint(a * step)) - 8;
  }
  return sign | static_cast<uint8_t>(code > 0x7e ? 0x7e : code);
}

namespace {

// amax / 448 of x, or 0 for an all-zero or non-finite row (whose codes are all 0).
float row_scale(const float* x, int64_t n) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  return amax > 0.0f && std::isfinite(amax) ? amax / kE4M3Max : 0.0f;
}

}  // namespace

float quantize_e4m3_row(const float* x, int64_t n, uint8_t* codes) {
  const float scale = row_scale(x, n);
  if (scale == 0.0f) {
    std::fill(codes, codes + n, uint8_t{0});
    return 0.0f;
  }
  const float inv = 1.0f / scale;
  for (int64_t i = 0; i < n; ++i) codes[i] = f32_to_e4m3(x[i] * inv);
  return scale;
}

float round_e4m3_row(const float* x, int64_t n, float* y) {
  const float scale = row_scale(x, n);
  if (scale == 0.0f) {
    std::fill(y, y + n, 0.0f);
    return 0.0f;
  }
  const float inv = 1.0f / scale;
  const float* t = code_values().data();
  for (int64_t i = 0; i < n; ++i) y[i] = t[f32_to_e4m3(x[i] * inv)] * scale;
  return scale;
}

void dequantize_e4m3_row(const uint8_t* codes, int64_t n, float scale, float* y) {
  const float* t = code_values().data();
  for (int64_t i = 0; i < n; ++i) y[i] = t[codes[i]] * scale;
}

}  // namespace inferscale
