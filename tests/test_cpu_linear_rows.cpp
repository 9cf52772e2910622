// The few-rows linear (cpu_linear_rows.h) against a double-precision loop and OpenBLAS' sgemm, on
// random inputs at odd shapes; a row's bits do not depend on how many rows come with it; and a
// whole model's forward with it equals the forward on OpenBLAS within f32 rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_linear_rows.h"
#include "backend/cpu/cpu_ops.h"
#include "forward_test_util.h"
#include "model/model.h"

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
