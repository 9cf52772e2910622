// SmolLM2-135M-Instruct (models/, fetched by scripts/setup.sh; these tests skip without it): a real
// instruction-tuned Llama-architecture chat model in a Q4_1/Q8_0 GGUF, end to end against
// transformers loading the same file in float64 (tests/fixtures/smollm2, made by
// scripts/make_smollm2_goldens.py):
// - its chat template renders the conversations as apply_chat_template does, and our tokenizer
//   gives the same prompt ids;
// - the CPU forward's logits at the last prompt token and at 7 decode steps (one token per
//   forward through the paged cache) are within 1e-3 relative error of the reference;
// - greedy generation through the engine reproduces the reference continuations.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "backend/backend.h"
#include "engine/engine.h"
#include "forward_test_util.h"
#include "model/model.h"

using namespace inferscale;

namespace {

const std::string kModel = std::string(INFERSCALE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
const std::string kGoldens = std::string(INFERSCALE_FIXTURES) + "/smollm2";

nlohmann::json goldens() {
  std::ifstream f(kGoldens + "/goldens.json");
  return nlohmann::json::parse(f);
}

std::vector<ChatMessage> messages_of(const nlohmann::json& conv) {
  std::vector<ChatMessage> out;
  for (const auto& m : conv.at("messages")) out.push_back({m.at("role"), m.at("content")});
  return out;
}

// One model for every test of this file (loading dequantizes 135M parameters).
const Model& smollm2() {
  static const Model m = load_model(kModel);
  return m;
}

#define REQUIRE_SMOLLM2() \
  if (!std::filesystem::exists(kModel)) GTEST_SKIP() << kModel << " is absent (scripts/setup.sh fetches it)"

}  // namespace

TEST(SmolLM2, ConfigFromGguf) {
  REQUIRE_SMOLLM2();
  const ModelConfig& c = smollm2().config;
  EXPECT_EQ(c.num_layers, 30);
  EXPECT_EQ(c.hidden_size, 576);
  EXPECT_EQ(c.num_heads, 9);
  EXPECT_EQ(c.num_kv_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.intermediate_size, 1536);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(c.rope_theta, 100000.0);
  EXPECT_FALSE(smollm2().random_weights);
}

TEST(SmolLM2, ChatTemplateAndPromptIdsMatchTransformers) {
  REQUIRE_SMOLLM2();
  const Model& m = smollm2();
  const nlohmann::json g = goldens();  // a range over goldens().at(...) would outlive the temporary
  for (const auto& conv : g.at("conversations")) {
    const std::string text = m.chat_template.render(messages_of(conv), true);
    EXPECT_EQ(text, conv.at("prompt").get<std::string>());
    EXPECT_EQ(m.tokenizer->encode(text), conv.at("prompt_ids").get<std::vector<int32_t>>()) << text;
  }
}

TEST(SmolLM2, CpuLogitsMatchTransformers) {
  REQUIRE_SMOLLM2();
  const Model& m = smollm2();
  const nlohmann::json g = goldens();
  const auto& L = g.at("logits");
  const auto& conv = g.at("conversations").at(L.at("conversation").get<size_t>());
  const auto rows = L.at("rows").get<int32_t>();
  const auto first = L.at("first_row_token").get<int32_t>();
  const auto ids = L.at("ids").get<std::vector<int32_t>>();
  std::vector<float> ref(static_cast<size_t>(rows) * ids.size());
  std::ifstream bin(kGoldens + "/" + L.at("file").get<std::string>(), std::ios::binary);
  bin.read(reinterpret_cast<char*>(ref.data()), static_cast<std::streamsize>(ref.size() * sizeof(float)));
  ASSERT_TRUE(bin) << "short logits file";

  std::vector<int32_t> seq = conv.at("prompt_ids").get<std::vector<int32_t>>();
  const auto greedy = conv.at("greedy_ids").get<std::vector<int32_t>>();
  seq.insert(seq.end(), greedy.begin(), greedy.begin() + rows - 1);
  std::vector<int32_t> want;
  for (int32_t r = 0; r < rows; ++r) want.push_back(first + r);
  BackendOptions bo;
  bo.num_cache_blocks = static_cast<int64_t>(seq.size()) / 16 + 2;
  auto be = make_cpu_backend(m.config, m.weights, bo);
  // The prompt in one forward, then one token per forward (decode steps).
  const auto got = inferscale::testing::run_sequence(*be, seq, first + 1, 1, want);
  ASSERT_EQ(got.size(), static_cast<size_t>(rows));
  double worst = 0;
  for (int32_t r = 0; r < rows; ++r) {
    double num = 0, den = 0;  // ||ours - ref|| / ||ref|| over the stored ids
    for (size_t i = 0; i < ids.size(); ++i) {
      const double d = got[static_cast<size_t>(r)][static_cast<size_t>(ids[i])] - ref[static_cast<size_t>(r) * ids.size() + i];
      num += d * d;
      den += static_cast<double>(ref[static_cast<size_t>(r) * ids.size() + i]) * ref[static_cast<size_t>(r) * ids.size() + i];
    }
    worst = std::max(worst, std::sqrt(num / den));
  }
  std::printf("SmolLM2 CPU logits vs transformers (float64): max relative error %.3g over %d rows\n", worst, rows);
  EXPECT_LT(worst, 1e-3);
}

TEST(SmolLM2, GreedyChatMatchesTransformers) {
  REQUIRE_SMOLLM2();
  const Model& m = smollm2();
  BackendOptions bo;
  bo.num_cache_blocks = 64;
  Engine e(make_cpu_backend(m.config, m.weights, bo), m.tokenizer, {});
  const auto convs = goldens().at("conversations");
  std::vector<int64_t> ids;
  for (const auto& conv : convs) {
    SamplingParams sp;
    sp.temperature = 0;
    sp.max_tokens = static_cast<int32_t>(conv.at("greedy_ids").size());
    sp.ignore_eos = true;
    ids.push_back(e.add_request(conv.at("prompt_ids").get<std::vector<int32_t>>(), sp));
  }
  const auto outs = e.run_to_completion();
  for (size_t c = 0; c < convs.size(); ++c) {
    const auto want = convs[c].at("greedy_ids").get<std::vector<int32_t>>();
    const RequestOutput* out = nullptr;
    for (const auto& o : outs)
      if (o.id == ids[c]) out = &o;
    ASSERT_NE(out, nullptr);
    size_t agree = 0;
    while (agree < want.size() && agree < out->new_tokens.size() && out->new_tokens[agree] == want[agree]) ++agree;
    std::printf("conversation %zu: %zu of %zu greedy tokens agree: %s\n", c, agree, want.size(),
                m.tokenizer->decode(out->new_tokens).substr(0, 60).c_str());
    EXPECT_GE(agree, 32u) << "conversation " << c;
  }
}
