// Random weights: deterministic in (config, seed, dtype) whatever the thread count, the right
// shapes and scale, f16/bf16 the rounding of the f32 values, tied heads sharing storage.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>

#include "model/model.h"
#include "model_test_util.h"

using namespace inferscale;
using namespace inferscale::testing;

namespace {

ModelConfig small_config(bool bias, bool qk_norm, bool tied) {
  ModelConfig c = demo_config();
  c.num_layers = 2;
  c.attention_bias = bias;
  c.qk_norm = qk_norm;
  c.tie_word_embeddings = tied;
  c.finalize();
  return c;
}

// Every tensor of w in a fixed order.
std::vector<const HostTensor*> all_tensors(const ModelWeights& w) {
  std::vector<const HostTensor*> out = {&w.embed, &w.final_norm, &w.lm_head};
  for (const LayerWeights& l : w.layers)
    for (const HostTensor* t : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.bq, &l.bk, &l.bv, &l.q_norm, &l.k_norm,
                                &l.ffn_norm, &l.w_gate, &l.w_up, &l.w_down})
      out.push_back(t);
  return out;
}

bool same_bytes(const ModelWeights& a, const ModelWeights& b) {
  const auto ta = all_tensors(a), tb = all_tensors(b);
  for (size_t i = 0; i < ta.size(); ++i) {
    if (ta[i]->empty() != tb[i]->empty() || ta[i]->shape != tb[i]->shape || ta[i]->dtype != tb[i]->dtype) return false;
    if (!ta[i]->empty() && std::memcmp(ta[i]->data, tb[i]->data, ta[i]->nbytes()) != 0) return false;
  }
  return true;
}

}  // namespace

TEST(RandomWeights, DeterministicAcrossThreadCounts) {
  const ModelConfig c = small_config(true, true, false);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const ModelWeights one = make_random_weights(c, 42);
  omp_set_num_threads(3);
  const ModelWeights three = make_random_weights(c, 42);
  omp_set_num_threads(saved);
  EXPECT_TRUE(same_bytes(one, three));
  EXPECT_TRUE(same_bytes(one, make_random_weights(c, 42)));
  EXPECT_FALSE(same_bytes(one, make_random_weights(c, 43)));
  // Different tensors get different streams.
  EXPECT_NE(std::memcmp(one.layers[0].wq.data, one.layers[0].wo.data, one.layers[0].wq.nbytes()), 0);
  EXPECT_NE(std::memcmp(one.layers[0].wq.data, one.layers[1].wq.data, one.layers[0].wq.nbytes()), 0);
}

TEST(RandomWeights, ShapesAndScale) {
  const ModelConfig c = small_config(true, true, false);
  const ModelWeights w = make_random_weights(c, 7);
  ASSERT_EQ(w.layers.size(), 2u);
  EXPECT_EQ(w.embed.shape, (std::vector<int64_t>{260, 256}));
  EXPECT_EQ(w.layers[1].wk.shape, (std::vector<int64_t>{128, 256}));
  EXPECT_EQ(w.layers[1].bv.shape, (std::vector<int64_t>{128}));
  EXPECT_EQ(w.layers[1].k_norm.shape, (std::vector<int64_t>{32}));
  EXPECT_EQ(w.layers[0].w_down.shape, (std::vector<int64_t>{256, 688}));
  for (const HostTensor* t : {&w.final_norm, &w.layers[0].attn_norm, &w.layers[1].ffn_norm, &w.layers[1].q_norm})
    for (int64_t i = 0; i < t->numel(); ++i) ASSERT_EQ(t->as<float>()[i], 1.0f);
  // A big matrix: mean ~0, std ~0.02, bounded tails.
  const HostTensor& m = w.layers[0].w_gate;
  double sum = 0, sq = 0, mx = 0;
  for (int64_t i = 0; i < m.numel(); ++i) {
    const double v = m.as<float>()[i];
    sum += v, sq += v * v, mx = std::max(mx, std::fabs(v));
  }
  const double n = static_cast<double>(m.numel());
  EXPECT_NEAR(sum / n, 0.0, 2e-4);
  EXPECT_NEAR(std::sqrt(sq / n), 0.02, 4e-4);
  EXPECT_LT(mx, 0.02 * 3.5);
  EXPECT_GT(mx, 0.02 * 2.5);
}

TEST(RandomWeights, HalfTypesRoundTheF32Values) {
  const ModelConfig c = small_config(false, false, true);
  const ModelWeights f = make_random_weights(c, 9);
  const ModelWeights b = make_random_weights(c, 9, DType::kBF16);
  const ModelWeights h = make_random_weights(c, 9, DType::kF16);
  EXPECT_EQ(b.layers[1].wv.dtype, DType::kBF16);
  EXPECT_EQ(h.layers[1].wv.dtype, DType::kF16);
  const HostTensor& x = f.layers[1].wv;
  for (int64_t i = 0; i < x.numel(); ++i) {
    ASSERT_EQ(b.layers[1].wv.as<uint16_t>()[i], f32_to_bf16(x.as<float>()[i]));
    ASSERT_EQ(h.layers[1].wv.as<uint16_t>()[i], f32_to_f16(x.as<float>()[i]));
  }
  expect_error([&] { make_random_weights(c, 9, DType::kI32); }, ErrorKind::kInvalidInput, {"i32"});
}

TEST(RandomWeights, TiedAndOptionalTensors) {
  const ModelWeights t = make_random_weights(small_config(false, false, true), 1);
  EXPECT_EQ(t.lm_head.data, t.embed.data);
  EXPECT_TRUE(t.layers[0].bq.empty());
  EXPECT_TRUE(t.layers[0].q_norm.empty());
  const ModelWeights u = make_random_weights(small_config(false, false, false), 1);
  EXPECT_NE(u.lm_head.data, u.embed.data);
  EXPECT_EQ(u.lm_head.shape, u.embed.shape);
}

TEST(RandomWeights, LoadModelFromConfig) {
  LoadOptions opts;
  opts.random_weights = true;
  opts.seed = 5;
  opts.random_dtype = DType::kBF16;
  // A directory holding config.json, and the config file itself.
  const Model a = load_model(fixture("models/qwen2_bias_tied"), opts);
  EXPECT_TRUE(a.random_weights);
  EXPECT_EQ(a.name, "qwen2_bias_tied-random");
  EXPECT_EQ(a.weights.layers[0].bq.dtype, DType::kBF16);
  EXPECT_EQ(a.weights.lm_head.data, a.weights.embed.data);
  EXPECT_EQ(a.tokenizer->kind(), "byte");
  const Model b = load_model(fixture("models/qwen2_bias_tied/config.json"), opts);
  EXPECT_EQ(b.fingerprint, a.fingerprint);
  EXPECT_TRUE(same_bytes(a.weights, b.weights));
  // Seed and dtype are part of the fingerprint.
  opts.seed = 6;
  EXPECT_NE(load_model(fixture("models/qwen2_bias_tied"), opts).fingerprint, a.fingerprint);
  opts.seed = 5;
  opts.random_dtype = DType::kF32;
  EXPECT_NE(load_model(fixture("models/qwen2_bias_tied"), opts).fingerprint, a.fingerprint);
  // A shared config: named after the file.
  const std::string shared = shared_data("configs/Qwen2.5-7B.json");
  if (exists(shared)) {
    ModelConfig cfg = ModelConfig::from_hf_file(shared);
    EXPECT_EQ(cfg.num_parameters(), 7615616512LL);  // not generated here: 7.6 B parameters
  }
}
