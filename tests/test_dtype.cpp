#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/host_tensor.h"
#include "util/check.h"

using namespace inferscale;

TEST(DType, Bf16RoundTripIsNearestEven) {
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.f, 3.f);
  for (int i = 0; i < 10000; ++i) {
    const float x = d(rng);
    const float y = bf16_to_f32(f32_to_bf16(x));
    EXPECT_LE(std::fabs(x - y), std::fabs(x) * (1.f / 256.f)) << x;
  }
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f)), 1.0f);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

TEST(DType, F16RoundTrip) {
  std::mt19937 rng(2);
  std::normal_distribution<float> d(0.f, 10.f);
  for (int i = 0; i < 10000; ++i) {
    const float x = d(rng);
    const float y = f16_to_f32(f32_to_f16(x));
    EXPECT_LE(std::fabs(x - y), std::fabs(x) * (1.f / 1024.f) + 6e-8f) << x;
  }
  // Exact values, subnormals and overflow.
  EXPECT_EQ(f16_to_f32(f32_to_f16(0.5f)), 0.5f);
  EXPECT_EQ(f16_to_f32(f32_to_f16(-2.0f)), -2.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
}

// convert_from_f32 writes each value as the scalar conversions do, and convert_to_f32 reads them back.
TEST(DType, ConvertFromF32MatchesTheScalarConversions) {
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0.f, 5.f);
  std::vector<float> x(1001);
  for (float& v : x) v = d(rng);
  x[0] = 0.0f;
  x[1] = -1e6f;  // past f16's range
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    std::vector<uint8_t> buf(x.size() * dtype_size(t));
    convert_from_f32(t, x.data(), buf.data(), x.size());
    std::vector<float> back(x.size());
    convert_to_f32(t, buf.data(), back.data(), x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const float want = t == DType::kF32 ? x[i] : t == DType::kF16 ? f16_to_f32(f32_to_f16(x[i])) : bf16_to_f32(f32_to_bf16(x[i]));
      ASSERT_EQ(back[i], want) << dtype_name(t) << " " << i;
    }
  }
  float one = 1.0f;
  uint8_t out[64];
  try {
    convert_from_f32(DType::kQ4_0, &one, out, 1);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
  }
}

TEST(HostTensor, ToF32ConvertsBf16) {
  HostTensor t = HostTensor::zeros(DType::kBF16, {2, 3});
  for (int i = 0; i < 6; ++i) t.as<uint16_t>()[i] = f32_to_bf16(static_cast<float>(i) - 2.5f);
  HostTensor f = t.to_f32();
  ASSERT_EQ(f.dtype, DType::kF32);
  EXPECT_EQ(f.shape_str(), "[2, 3]");
  for (int i = 0; i < 6; ++i) EXPECT_EQ(f.as<float>()[i], static_cast<float>(i) - 2.5f);
}
