// The few-rows linear (cpu_linear_rows.h) against a double-precision loop and OpenBLAS' sgemm, on
// random inputs at odd shapes; a row's bits do not depend on how many rows come with it; and a
// whole model's forward with it equals the forward on OpenBLAS within f32 rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_linear_rows.h"
#include "backend/cpu/cpu_ops.h"
#include "forward_test_util.h"
#include "model/model.h"
#include "tensor/quant.h"

using namespace inferscale;

namespace {

std::vector<float> randn(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

}  // namespace

TEST(CpuLinearRows, MatchesDoubleAndSgemmAtOddShapes) {
  if (!cpu::linear_rows_available()) GTEST_SKIP() << "this CPU has no AVX2 + FMA: linears stay on OpenBLAS";
  std::mt19937 rng(7);
  int checks = 0;
  for (int64_t K : {1, 7, 8, 9, 64, 577}) {
    for (int64_t N : {1, 3, 4, 5, 33}) {
      for (int64_t T = 1; T <= cpu::kLinearRowsMax; ++T) {
        const auto x = randn(static_cast<size_t>(T * K), rng), w = randn(static_cast<size_t>(N * K), rng);
        const int64_t ldy = N + 3;  // a column slice of a wider output
        std::vector<float> y(static_cast<size_t>(T * ldy), 12345.f), blas(static_cast<size_t>(T * N));
        cpu::linear_rows(x.data(), T, K, w.data(), 0, N, y.data(), ldy);
        cpu::linear(x.data(), w.data(), nullptr, blas.data(), T, K, N);
        for (int64_t t = 0; t < T; ++t) {
          for (int64_t n = 0; n < N; ++n) {
            double ref = 0, mag = 0;
            for (int64_t k = 0; k < K; ++k) {
              ref += static_cast<double>(x[t * K + k]) * w[n * K + k];
              mag += std::fabs(static_cast<double>(x[t * K + k]) * w[n * K + k]);
            }
            const double tol = 1e-6 * mag + 1e-30;
            const float got = y[static_cast<size_t>(t * ldy + n)];
            EXPECT_NEAR(got, ref, tol) << "T " << T << " N " << N << " K " << K << " at " << t << "," << n;
            EXPECT_NEAR(got, blas[static_cast<size_t>(t * N + n)], 2 * tol) << "against sgemm";
            ++checks;
          }
          for (int64_t n = N; n < ldy; ++n) EXPECT_EQ(y[static_cast<size_t>(t * ldy + n)], 12345.f) << "past N";
        }
      }
    }
  }
  EXPECT_GT(checks, 5000);
}

// Each (t, n) is one FMA chain whatever T and the rows around it: a sequence's linears give the
// same bits alone and in a batch of up to kLinearRowsMax, x in chunks of 8 included, and a
// sub-range of rows computes only its columns.
TEST(CpuLinearRows, ARowsBitsDoNotDependOnItsCompany) {
  if (!cpu::linear_rows_available()) GTEST_SKIP() << "this CPU has no AVX2 + FMA";
  std::mt19937 rng(11);
  const int64_t K = 203, N = 37;
  const auto x = randn(static_cast<size_t>(cpu::kLinearRowsMax * K), rng), w = randn(static_cast<size_t>(N * K), rng);
  std::vector<float> alone(static_cast<size_t>(cpu::kLinearRowsMax * N));
  for (int64_t t = 0; t < cpu::kLinearRowsMax; ++t)
    cpu::linear_rows(x.data() + t * K, 1, K, w.data(), 0, N, alone.data() + t * N, N);
  for (int64_t T = 2; T <= cpu::kLinearRowsMax; ++T) {
    std::vector<float> y(static_cast<size_t>(T * N), 0.f);
    cpu::linear_rows(x.data(), T, K, w.data(), 0, 17, y.data(), N);  // two ranges, split mid-group
    cpu::linear_rows(x.data(), T, K, w.data(), 17, N, y.data(), N);
    for (int64_t i = 0; i < T * N; ++i) ASSERT_EQ(y[static_cast<size_t>(i)], alone[static_cast<size_t>(i)]) << "T " << T << " i " << i;
  }
}

TEST(CpuLinearRows, RefusesMoreRowsThanItTakes) {
  if (!cpu::linear_rows_available()) GTEST_SKIP() << "this CPU has no AVX2 + FMA";
  const int64_t T = cpu::kLinearRowsMax + 1;
  std::vector<float> x(static_cast<size_t>(T * 4)), w(4), y(static_cast<size_t>(T));
  EXPECT_THROW(cpu::linear_rows(x.data(), T, 4, w.data(), 0, 1, y.data(), 1), Error);
  EXPECT_THROW(cpu::linear_rows(x.data(), 0, 4, w.data(), 0, 1, y.data(), 1), Error);
}

// The demo model's forward of 1 to kLinearRowsMax + 1 one-token sequences with the
// few-rows linears against the same forward on OpenBLAS: logits within f32 rounding.
TEST(CpuLinearRows, AForwardMatchesTheOpenBlasForward) {
  if (!cpu::linear_rows_available()) GTEST_SKIP() << "this CPU has no AVX2 + FMA";
  const Model m = load_model("demo");
  BackendOptions on, off;
  on.num_cache_blocks = off.num_cache_blocks = 64;
  off.cpu_linear_rows = false;
  auto a = make_cpu_backend(m.config, m.weights, on), b = make_cpu_backend(m.config, m.weights, off);
  const int32_t past = static_cast<int32_t>(cpu::kLinearRowsMax) + 1;  // past the kernel: sgemm on both
  for (int32_t rows : {1, 3, 8, static_cast<int32_t>(cpu::kLinearRowsMax), past}) {
    ForwardBatch fb;
    fb.q_indptr = {0};
    fb.kv_indptr = {0};
    for (int32_t s = 0; s < rows; ++s) {
      fb.token_ids.push_back(static_cast<int32_t>(17 + 13 * s) % 256);
      fb.positions.push_back(0);
      fb.slot_mapping.push_back(static_cast<int64_t>(s) * 16);
      fb.q_indptr.push_back(s + 1);
      fb.kv_indices.push_back(s);
      fb.kv_indptr.push_back(s + 1);
      fb.output_tokens.push_back(s);
    }
    std::vector<float> la, lb;
    a->forward(fb, la);
    b->forward(fb, lb);
    ASSERT_EQ(la.size(), lb.size());
    EXPECT_LT(inferscale::testing::rel_l2(la, lb), 1e-5) << rows << " rows";
    if (rows == past) EXPECT_EQ(la, lb) << rows << " rows run sgemm on both";
  }
}

// Q4_1 and Q8_0 blocks (random quants, scales and minimums) against the double product with the
// values quant::dequantize_blocks gives, at T = 1..kLinearRowsMax, rows alone == in company.
TEST(CpuLinearRows, QuantizedBlocksMatchTheirDequantizedValues) {
  if (!cpu::linear_rows_available()) GTEST_SKIP() << "this CPU has no AVX2 + FMA";
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  for (DType t : {DType::kQ4_1, DType::kQ8_0}) {
    ASSERT_TRUE(cpu::linear_rows_quant_supported(t));
    const int64_t K = 96, N = 13, nb = K / 32, bb = dtype_block(t).bytes;
    std::vector<unsigned char> w(static_cast<size_t>(N * nb * bb));
    for (auto& c : w) c = static_cast<unsigned char>(byte(rng));
    for (int64_t b = 0; b < N * nb; ++b) {  // finite f16 scales (and minimums) in place of random bytes
      uint16_t h[2] = {f32_to_f16(scale(rng)), f32_to_f16(-scale(rng) * 8)};
      std::memcpy(w.data() + b * bb, h, t == DType::kQ4_1 ? 4 : 2);
    }
    std::vector<float> deq(static_cast<size_t>(N * K));
    quant::dequantize_blocks(t, w.data(), deq.data(), N * nb);
    const auto x = randn(static_cast<size_t>(cpu::kLinearRowsMax * K), rng);
    std::vector<float> sums(static_cast<size_t>(cpu::kLinearRowsMax * nb));
    cpu::block_sums(x.data(), cpu::kLinearRowsMax, K, sums.data());
    std::vector<float> alone(static_cast<size_t>(cpu::kLinearRowsMax * N));
    for (int64_t r = 0; r < cpu::kLinearRowsMax; ++r)
      cpu::linear_rows_quant(x.data() + r * K, sums.data() + r * nb, 1, K, w.data(), t, 0, N, alone.data() + r * N, N);
    for (int64_t T = 1; T <= cpu::kLinearRowsMax; ++T) {
      std::vector<float> y(static_cast<size_t>(T * N));
      cpu::linear_rows_quant(x.data(), sums.data(), T, K, w.data(), t, 0, 5, y.data(), N);
      cpu::linear_rows_quant(x.data(), sums.data(), T, K, w.data(), t, 5, N, y.data(), N);
      for (int64_t r = 0; r < T; ++r)
        for (int64_t n = 0; n < N; ++n) {
          double ref = 0, mag = 0;
          for (int64_t k = 0; k < K; ++k) {
            ref += static_cast<double>(x[r * K + k]) * deq[n * K + k];
            mag += std::fabs(static_cast<double>(x[r * K + k]) * deq[n * K + k]);
          }
          const float got = y[static_cast<size_t>(r * N + n)];
          EXPECT_NEAR(got, ref, 2e-6 * mag) << dtype_name(t) << " T " << T << " at " << r << "," << n;
          EXPECT_EQ(got, alone[static_cast<size_t>(r * N + n)]) << "alone";
        }
    }
  }
  EXPECT_FALSE(cpu::linear_rows_quant_supported(DType::kQ4_K));
}
