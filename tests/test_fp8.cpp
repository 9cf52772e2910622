// FP8 E4M3 (tensor/fp8.h) against a brute-force reference: every code round-trips, every value
// goes to the nearest code (ties to the even code), saturation, and scaled rows.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "tensor/fp8.h"

using namespace inferscale;

namespace {

// The nearest finite code of x's sign by exhaustive search; ties to the even code.
uint8_t nearest_code(float x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const double a = std::fabs(static_cast<double>(x));
  int best = 0;
  double best_d = INFINITY;
  for (int c = 0; c <= 0x7e; ++c) {
    const double d = std::fabs(a - static_cast<double>(e4m3_to_f32(static_cast<uint8_t>(c))));
    if (d < best_d || (d == best_d && (c & 1) == 0)) {
      best = c;
      best_d = d;
    }
  }
  return sign | static_cast<uint8_t>(best);
}

}  // namespace

TEST(Fp8, EveryFiniteCodeRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(e4m3_to_f32(static_cast<uint8_t>(c))));
      continue;
    }
    const float v = e4m3_to_f32(static_cast<uint8_t>(c));
    EXPECT_EQ(f32_to_e4m3(v), c) << c << " = " << v;
  }
}

TEST(Fp8, KnownValuesAndTies) {
  EXPECT_EQ(e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_to_f32(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(e4m3_to_f32(0xb8), -1.0f);
  EXPECT_EQ(f32_to_e4m3(1.0625f), 0x38);                 // between 1 (even) and 1.125
  EXPECT_EQ(f32_to_e4m3(1.1875f), 0x3a);                 // between 1.125 and 1.25 (even)
  EXPECT_EQ(f32_to_e4m3(std::ldexp(1.0f, -10)), 0x00);   // half the smallest subnormal: to 0
  EXPECT_EQ(f32_to_e4m3(std::ldexp(3.0f, -10)), 0x02);   // 1.5 subnormal steps: to 2 (even)
  EXPECT_EQ(f32_to_e4m3(1000.0f), 0x7e);                 // saturates
  EXPECT_EQ(f32_to_e4m3(-INFINITY), 0xfe);
  EXPECT_EQ(f32_to_e4m3(NAN), 0x7f);
}

TEST(Fp8, ValuesGoToTheNearestCode) {
  std::mt19937 g(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int i = 0; i < 20000; ++i) {
    const float x = u(g) * std::ldexp(1.0f, static_cast<int>(g() % 22) - 12);  // 2^-12 .. 2^9
    const uint8_t want = std::fabs(x) >= 448.0f ? static_cast<uint8_t>((std::signbit(x) ? 0x80 : 0) | 0x7e) : nearest_code(x);
    ASSERT_EQ(f32_to_e4m3(x), want) << x;
  }
}

TEST(Fp8, ScaledRows) {
  std::mt19937 g(3);
  std::normal_distribution<float> n(0.0f, 2.5f);
  for (const int64_t len : {1, 7, 64, 128, 131}) {
    std::vector<float> x(static_cast<size_t>(len)), y(x.size());
    for (float& v : x) v = n(g);
    std::vector<uint8_t> q(x.size());
    const float s = quantize_e4m3_row(x.data(), len, q.data());
    float amax = 0;
    for (float v : x) amax = std::fmax(amax, std::fabs(v));
    EXPECT_FLOAT_EQ(s, amax / 448.0f);
    dequantize_e4m3_row(q.data(), len, s, y.data());
    for (size_t i = 0; i < x.size(); ++i) {
      // Within half a step of e4m3 at that magnitude (1/16 relative for normals) or of a
      // subnormal step, in the row's scale.
      EXPECT_LE(std::fabs(y[i] - x[i]), std::fmax(std::fabs(x[i]) / 16.0f, s * std::ldexp(1.0f, -10)) * 1.0001f) << i;
    }
    // round_e4m3_row: the same values without the codes, in place too.
    std::vector<float> r(x.size()), r2 = x;
    EXPECT_EQ(round_e4m3_row(x.data(), len, r.data()), s);
    EXPECT_EQ(round_e4m3_row(r2.data(), len, r2.data()), s);
    EXPECT_EQ(r, y);
    EXPECT_EQ(r2, y);
    // Quantizing the dequantized row gives the same scale and codes (KV files reload exactly).
    std::vector<uint8_t> q2(x.size());
    EXPECT_EQ(quantize_e4m3_row(y.data(), len, q2.data()), s);
    EXPECT_EQ(q2, q);
  }
  std::vector<float> zeros(5, 0.0f), out(5, 1.0f);
  std::vector<uint8_t> q(5, 9);
  EXPECT_EQ(round_e4m3_row(zeros.data(), 5, out.data()), 0.0f);
  for (float v : out) EXPECT_EQ(v, 0.0f);
  EXPECT_EQ(quantize_e4m3_row(zeros.data(), 5, q.data()), 0.0f);
  for (uint8_t c : q) EXPECT_EQ(c, 0);
  dequantize_e4m3_row(q.data(), 5, 0.0f, out.data());
  for (float v : out) EXPECT_EQ(v, 0.0f);
}
