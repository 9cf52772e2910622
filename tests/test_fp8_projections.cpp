// --quantization fp8 on the CPU backend: the GPU's FP8 projections' numbers emulated in f32
// (backend/fp8_projections.h). Each stacked projection (wq; wk; wv and w_gate; w_up as one) is
// rounded to E4M3 with one scale; a linear whose rows the GPU runs as a W8A16 GEMV keeps x, one it
// runs W8A8 rounds x with one scale for the batch. Checked against the same model whose weights
// were rounded by hand (tensor/fp8.h) and loaded without the option.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "backend/backend.h"
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

TEST(Fp8Projections, CpuEmulationRoundsWeightsAndTheW8A8Inputs) {
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
  // Forwards of 1 and of 4 tokens (the GPU's W8A16 GEMVs at every shape: x as it is): the
  // hand-rounded model exactly.
  for (int32_t chunk : {1, 4}) {
    const auto a = testing::run_sequence(*emulated, tokens, chunk, chunk, want);
    const auto b = testing::run_sequence(*by_hand, tokens, chunk, chunk, want);
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_LT(testing::rel_l2(a[i], b[i]), 1e-5) << "token " << want[i] << ", " << chunk << " a forward";
      EXPECT_GT(testing::rel_l2(a[i], n[i]), 1e-4) << "the weights were rounded";
      EXPECT_LT(testing::rel_l2(a[i], n[i]), 0.2) << "by FP8's rounding, not more";
    }
  }
  // The whole prompt in one forward (W8A8: x rounded too), and one token a forward with the
  // GEMVs off (fp8_w8a16_rows = 0): off the hand-rounded model by x's rounding alone, and still
  // within FP8's cost of the native one.
  o.fp8_w8a16_rows = 0;
  auto w8a8 = make_cpu_backend(cfg, w, o);
  const std::vector<std::vector<std::vector<float>>> rounded_x{testing::run_sequence(*emulated, tokens, 40, 40, want),
                                                               testing::run_sequence(*w8a8, tokens, 1, 1, want)};
  const auto q = testing::run_sequence(*by_hand, tokens, 40, 40, want);
  for (const auto& p : rounded_x)
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_GT(testing::rel_l2(p[i], q[i]), 1e-4) << "x was rounded";
      EXPECT_LT(testing::rel_l2(p[i], q[i]), 0.2);
    }
  // The GEMVs' shapes (demo: hidden 256, intermediate 688 = 16 * 43).
  EXPECT_TRUE(fp8_keeps_x(8, cfg.hidden_size, kFp8W8A16Rows)) << "the tensor-core GEMV: K % 64 == 0";
  EXPECT_TRUE(fp8_keeps_x(4, cfg.intermediate_size, kFp8W8A16Rows)) << "the CUDA-core GEMV: K % 16 == 0";
  EXPECT_FALSE(fp8_keeps_x(5, cfg.intermediate_size, kFp8W8A16Rows));
  EXPECT_FALSE(fp8_keeps_x(9, cfg.hidden_size, kFp8W8A16Rows));
  EXPECT_FALSE(fp8_keeps_x(1, cfg.hidden_size, 0));
}

}  // namespace
}  // namespace inferscale
