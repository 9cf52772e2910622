// Rope against transformers: inverse frequencies and attention factor for default / linear / llama3 /
// yarn configs (tests/fixtures/rope/golden.json, made by scripts/make_model_fixtures.py from
// transformers' own rope init functions), angles at large positions, and the two rotation layouts.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/rope.h"
#include "model_test_util.h"

using namespace inferscale;
using namespace inferscale::testing;
using nlohmann::json;

namespace {
json rope_golden() { return json::parse(read_file(fixture("rope/golden.json"))); }
}  // namespace

TEST(Rope, MatchesTransformersInvFreq) {
  const json g = rope_golden();
  ASSERT_EQ(g.at("format"), "inferscale-rope-golden-v1");
  ASSERT_GE(g.at("cases").size(), 8u);
  for (const json& c : g.at("cases")) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    const ModelConfig cfg = ModelConfig::from_hf_json(c.at("config"));
    const Rope rope(cfg);
    const auto want = c.at("inv_freq").get<std::vector<double>>();
    const auto want32 = c.at("inv_freq_float32").get<std::vector<double>>();
    ASSERT_EQ(rope.inv_freq().size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      // Same formula in double: agreement to rounding.
      EXPECT_NEAR(rope.inv_freq()[i], want[i], 1e-13 * want[i]) << "i=" << i;
      // What transformers itself computes (float32).
      EXPECT_NEAR(rope.inv_freq()[i], want32[i], 1e-6 * want[i]) << "i=" << i;
    }
    EXPECT_NEAR(rope.attention_factor(), c.at("attention_factor").get<double>(), 1e-14);

    // Angles: cos/sin in float of a double angle: within float rounding even at position 131,071.
    const auto positions = c.at("positions").get<std::vector<int64_t>>();
    const size_t half = want.size();
    std::vector<float> cs(half), sn(half);
    for (size_t p = 0; p < positions.size(); ++p) {
      rope.angles(positions[p], cs.data(), sn.data());
      for (size_t i = 0; i < half; ++i) {
        EXPECT_NEAR(cs[i], c.at("cos")[p][i].get<double>(), 2e-7) << "pos " << positions[p] << " i=" << i;
        EXPECT_NEAR(sn[i], c.at("sin")[p][i].get<double>(), 2e-7) << "pos " << positions[p] << " i=" << i;
      }
    }
  }
}

TEST(Rope, RotateHalvesAndInterleaved) {
  ModelConfig cfg;
  cfg.hidden_size = 32;
  cfg.intermediate_size = 64;
  cfg.num_layers = 1;
  cfg.num_heads = 2;
  cfg.num_kv_heads = 1;
  cfg.vocab_size = 10;
  cfg.max_position_embeddings = 128;
  cfg.finalize();
  ASSERT_EQ(cfg.head_dim, 16);
  const int64_t half = 8, pos = 37;
  std::vector<float> x(32);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::sin(0.7 * static_cast<double>(i) + 0.1));

  for (bool interleaved : {false, true}) {
    cfg.rope_interleaved = interleaved;
    const Rope rope(cfg);
    std::vector<float> y = x;
    rope.rotate(y.data(), 2, pos);
    for (int64_t h = 0; h < 2; ++h) {
      for (int64_t i = 0; i < half; ++i) {
        // HF rotates (x[i], x[i + half]); GGUF/llama2.c rotates (x[2i], x[2i + 1]).
        const int64_t a = h * 16 + (interleaved ? 2 * i : i);
        const int64_t b = h * 16 + (interleaved ? 2 * i + 1 : i + half);
        const double ang = static_cast<double>(pos) * rope.inv_freq()[static_cast<size_t>(i)];
        EXPECT_NEAR(y[a], x[a] * std::cos(ang) - x[b] * std::sin(ang), 1e-6);
        EXPECT_NEAR(y[b], x[b] * std::cos(ang) + x[a] * std::sin(ang), 1e-6);
      }
    }
  }
}
