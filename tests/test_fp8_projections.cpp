// --quantization fp8 on the CPU backend: the GPU's FP8 projections' numbers emulated in f32
// (backend/fp8_projections.h). Each stacked projection (wq; wk; wv and w_gate; w_up as one) is
// rounded to E4M3 with one scale, and x with one scale for the batch (the GPU runs W8A8 at every
// size). The linear is checked against the rounding done by hand (tensor/fp8.h), the model
// against the same model whose weights were rounded by hand and loaded without the option.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_forward_ops.h"
#include "backend/fp8_projections.h"
#include "forward_test_util.h"
#include "model/model.h"
#include "tensor/fp8.h"

namespace inferscale {
namespace {

// The parts' values rounded as one E4M3 tensor (one scale over all of them), written back in place.
void round_stacked(std::initializer_list<HostTensor*> parts) {
  std::vector<float> all;
  for (const HostTensor* p : parts) all.insert(all.end(), p->as<const float>(), p->as<const float>() + p->numel());
  round_e4m3_row(all.data(), static_cast<int64_t>(all.size()), all.data());
  size_t at = 0;
  for (HostTensor* p : parts) {
    std::memcpy(p->as<float>(), all.data() + at, static_cast<size_t>(p->numel()) * 4);
    at += static_cast<size_t>(p->numel());
  }
}

HostTensor random_tensor(int64_t rows, int64_t cols, uint32_t seed) {
  HostTensor t = HostTensor::uninitialized(DType::kF32, {rows, cols});
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.as<float>()[i] = d(rng);
  return t;
}

// One projection of two stacked parts, at 1, 3 and 40 rows of x (the linear-rows, OpenBLAS and
// every other path alike): y = round(x) round(w)^T, each rounded as one tensor.
TEST(Fp8Projections, CpuLinearRoundsTheStackedWeightsAndXAsOneTensorEach) {
  const ModelConfig cfg = demo_config();
  CpuKv kv;
  CpuForwardOps ops(cfg, kv, 16, 1, true, true, /*e4m3_projections=*/true);
  constexpr int64_t K = 64, N0 = 32, N1 = 16, N = N0 + N1;
  ASSERT_TRUE(fp8_projection_shape(N, K));
  const HostTensor w0 = random_tensor(N0, K, 1), w1 = random_tensor(N1, K, 2);
  const Weight w = ops.projection({&w0, &w1});
  std::vector<float> wn(static_cast<size_t>(N * K)), wr(wn.size());  // the parts stacked, and rounded as one
  std::memcpy(wn.data(), w0.as<const float>(), static_cast<size_t>(N0 * K) * 4);
  std::memcpy(wn.data() + N0 * K, w1.as<const float>(), static_cast<size_t>(N1 * K) * 4);
  round_e4m3_row(wn.data(), N * K, wr.data());
  for (int64_t M : {1, 3, 40}) {
    const HostTensor xs = random_tensor(M, K, static_cast<uint32_t>(10 + M));
    const Act x = ops.act(0, M, K, ActType::kF32), y = ops.act(1, M, N, ActType::kF32);
    std::memcpy(x.data, xs.as<const float>(), static_cast<size_t>(M * K) * 4);
    ops.linear(x, w, {}, y, false);
    std::vector<float> xr(static_cast<size_t>(M * K));
    round_e4m3_row(xs.as<const float>(), M * K, xr.data());
    double err = 0, ref = 0, moved = 0;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double want = 0, native = 0;
        for (int64_t k = 0; k < K; ++k) {
          want += static_cast<double>(xr[m * K + k]) * wr[n * K + k];
          native += static_cast<double>(xs.as<const float>()[m * K + k]) * wn[n * K + k];
        }
        const double got = static_cast<const float*>(y.data)[m * N + n];
        err = std::max(err, std::abs(got - want));
        moved = std::max(moved, std::abs(got - native));
        ref = std::max(ref, std::abs(want));
      }
    EXPECT_LT(err, 1e-5 * ref) << M << " rows: x and w rounded by hand";
    EXPECT_GT(moved, 1e-3 * ref) << M << " rows: the rounding shows against the f32 product";
  }
}

TEST(Fp8Projections, CpuEmulationFollowsTheHandRoundedModel) {
  const ModelConfig cfg = demo_config();
  ASSERT_TRUE(fp8_projection_shape(cfg.intermediate_size, cfg.hidden_size));
  const ModelWeights w = make_random_weights(cfg, 7);
  ModelWeights rounded = make_random_weights(cfg, 7);  // the same values, its own storage
  for (LayerWeights& l : rounded.layers) {
    round_stacked({&l.wq, &l.wk, &l.wv});
    round_stacked({&l.wo});
    round_stacked({&l.w_gate, &l.w_up});
    round_stacked({&l.w_down});
  }
  BackendOptions o;
  o.num_cache_blocks = 64;
  auto native = make_cpu_backend(cfg, w, o);
  auto by_hand = make_cpu_backend(cfg, rounded, o);
  o.projections_fp8 = true;
  auto emulated = make_cpu_backend(cfg, w, o);

  std::vector<int32_t> tokens(40);
  std::iota(tokens.begin(), tokens.end(), 3);
  const std::vector<int32_t> want{3, 7, 11, 39};
  const auto n = testing::run_sequence(*native, tokens, 1, 1, want);
  // One token a forward and the whole prompt in one: off the hand-rounded model by x's rounding
  // alone, and within FP8's cost of the native one.
  for (int32_t chunk : {1, 40}) {
    const auto a = testing::run_sequence(*emulated, tokens, chunk, chunk, want);
    const auto b = testing::run_sequence(*by_hand, tokens, chunk, chunk, want);
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_GT(testing::rel_l2(a[i], b[i]), 1e-5) << "token " << want[i] << ", " << chunk << " a forward: x rounded";
      EXPECT_LT(testing::rel_l2(a[i], b[i]), 0.2);
      EXPECT_GT(testing::rel_l2(a[i], n[i]), 1e-4) << "the weights were rounded";
      EXPECT_LT(testing::rel_l2(a[i], n[i]), 0.2) << "by FP8's rounding, not more";
    }
  }
}

}  // namespace
}  // namespace inferscale
