// FP8 E4M3 (OCP "E4M3FN": 1 sign, 4 exponent bits of bias 7, 3 mantissa bits; no infinities,
// 0x7f / 0xff are NaN; largest finite 448, smallest subnormal 2^-9), and rows stored in it with a
// scale: code[i] = e4m3(x[i] / s), x[i] ~ e4m3_value(code[i]) * s, s = max|x| / 448 (the row's
// largest value lands on 448; an all-zero row has s = 0 and all-zero codes).
#pragma once
#include <cstdint>

namespace inferscale {

inline constexpr float kE4M3Max = 448.0f;

// Round to nearest, ties to even; beyond +-448 saturates to +-448; NaN -> 0x7f.
uint8_t f32_to_e4m3(float x);
float e4m3_to_f32(uint8_t code);

// One row of n values -> n codes; returns the scale.
float quantize_e4m3_row(const float* x, int64_t n, uint8_t* codes);
void dequantize_e4m3_row(const uint8_t* codes, int64_t n, float scale, float* y);
// The values n codes of x stand for (dequantize_e4m3_row of quantize_e4m3_row's codes, bit for
// bit) into y, without the codes; y may be x. Returns the scale.
float round_e4m3_row(const float* x, int64_t n, float* y);

}  // namespace inferscale
