// The CPU forward matches HF transformers (float64 goldens, tests/fixtures/models/README.md) on
// tiny random models of every supported architecture: llama3 rope scaling past position 8,192,
// yarn, qkv bias, tied embeddings, q/k norm with an explicit head_dim, f16 and bf16 storage,
// sharded safetensors. The prompt runs in chunks through the paged cache, then decode steps.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "forward_test_util.h"
#include "model/model.h"

using namespace inferscale;
using inferscale::testing::run_sequence;

namespace {

double rel_err(const std::vector<float>& got, const nlohmann::json& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double r = ref[i].get<double>();
    num = std::max(num, std::fabs(got[i] - r));
    den = std::max(den, std::fabs(r));
  }
  return num / den;
}

void check_fixture(const std::string& name) {
  const std::string dir = std::string(INFERSCALE_FIXTURES) + "/models/" + name;
  std::ifstream f(dir + "/golden.json");
  ASSERT_TRUE(f) << dir;
  const nlohmann::json g = nlohmann::json::parse(f);
  Model m = load_model(dir);
  std::vector<int32_t> tokens = g.at("prompt_token_ids").get<std::vector<int32_t>>();
  const std::vector<int32_t> want = g.at("positions").get<std::vector<int32_t>>();
  const auto& decode = g.at("decode");
  BackendOptions bo;
  bo.num_cache_blocks = static_cast<int64_t>((tokens.size() + decode.size()) / 16 + 2);
  auto be = make_cpu_backend(m.config, m.weights, bo);
  // The whole sequence (prompt + teacher-forced decode tokens) in chunks of 512.
  std::vector<int32_t> all = tokens;
  std::vector<int32_t> all_want = want;
  for (const auto& d : decode) {
    all.push_back(d.at("token").get<int32_t>());
    all_want.push_back(d.at("position").get<int32_t>());
  }
  auto rows = run_sequence(*be, all, 512, 512, all_want);
  ASSERT_EQ(rows.size(), all_want.size());
  double worst = 0;
  for (size_t r = 0; r < want.size(); ++r) worst = std::max(worst, rel_err(rows[r], g.at("logits")[r]));
  for (size_t k = 0; k < decode.size(); ++k) worst = std::max(worst, rel_err(rows[want.size() + k], decode[k].at("logits")));
  std::printf("%-16s max relative error %.3g over %zu rows\n", name.c_str(), worst, rows.size());
  EXPECT_LT(worst, 1e-4) << name;
}

}  // namespace

TEST(ForwardGolden, Llama3ScaledPast8192) { check_fixture("llama3_scaled"); }
TEST(ForwardGolden, Qwen2BiasTiedSharded) { check_fixture("qwen2_bias_tied"); }
TEST(ForwardGolden, Qwen3QkNormF16) { check_fixture("qwen3_qknorm"); }
TEST(ForwardGolden, MistralBf16) { check_fixture("mistral"); }
TEST(ForwardGolden, LlamaYarn) { check_fixture("llama_yarn"); }
