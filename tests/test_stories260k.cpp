// The one real trained model here: stories260K (GGUF, llama2.c semantics: adjacent-pair RoPE,
// GQA 8/4, tied classifier). Greedy generation from a lone BOS must reproduce the independent
// float64 reference continuation token for token, through the full engine path.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "backend/backend.h"
#include "engine/engine.h"
#include "model/model.h"

using namespace inferscale;

namespace {
const std::string kDir = std::string(INFERSCALE_SHARED_DATA) + "/models/stories260K";
}

TEST(Stories260K, GreedyFromBosMatchesReference) {
  if (!std::filesystem::exists(kDir + "/stories260K.gguf")) GTEST_SKIP() << "../shared/data/models/stories260K is absent";
  std::ifstream f(kDir + "/greedy_bos_256.json");
  const auto ref = nlohmann::json::parse(f);
  const std::vector<int32_t> want = ref.at("tokens").get<std::vector<int32_t>>();
  Model m = load_model(kDir + "/stories260K.gguf");
  EXPECT_TRUE(m.config.rope_interleaved);
  BackendOptions bo;
  bo.num_cache_blocks = 64;
  EngineOptions eo;
  eo.scheduler.max_num_batched_tokens = 64;
  Engine e(make_cpu_backend(m.config, m.weights, bo), m.tokenizer, eo);
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_tokens = static_cast<int32_t>(want.size()) - 1;
  sp.ignore_eos = true;
  e.add_request({want[0]}, sp);
  const RequestOutput out = e.run_to_completion().at(0);
  std::vector<int32_t> got{want[0]};
  got.insert(got.end(), out.new_tokens.begin(), out.new_tokens.end());
  ASSERT_EQ(got.size(), want.size());
  size_t first_diff = 0;
  while (first_diff < got.size() && got[first_diff] == want[first_diff]) ++first_diff;
  EXPECT_EQ(first_diff, want.size()) << "first mismatch at token " << first_diff;
  // The streamed text is the reference text (llama2.c strips the space after BOS; HF keeps it).
  const std::string text = ref.at("text").get<std::string>();
  EXPECT_EQ(out.text, m.tokenizer->decode(out.new_tokens));
  EXPECT_NE(text.find(out.text.substr(0, 40)), std::string::npos) << out.text.substr(0, 80);
}
