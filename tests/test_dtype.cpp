#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "tensor/dtype.h"
#include "tensor/host_tensor.h"

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

TEST(HostTensor, ToF32ConvertsBf16) {
  HostTensor t = HostTensor::zeros(DType::kBF16, {2, 3});
  for (int i = 0; i < 6; ++i) t.as<uint16_t>()[i] = f32_to_bf16(static_cast<float>(i) - 2.5f);
  HostTensor f = t.to_f32();
  ASSERT_EQ(f.dtype, DType::kF32);
  EXPECT_EQ(f.shape_str(), "[2, 3]");
  for (int i = 0; i < 6; ++i) EXPECT_EQ(f.as<float>()[i], static_cast<float>(i) - 2.5f);
}
