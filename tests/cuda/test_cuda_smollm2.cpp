// The real model on the GPU: SmolLM2-135M-Instruct (Q4_1/Q8_0 GGUF, head_dim 64, 9 q heads over 3
// kv heads, tied Q8_0 embedding as the output head). The CUDA backend (weights dequantized to bf16)
// against the CPU backend (f32) on the same chat prompts: logits within bf16 tolerance at the
// prompt's last token and through decode steps, and greedy generation agreeing on the first tokens.
// The model path: $INFERSCALE_SMOLLM2, else models/ in the source tree; skipped when absent.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <span>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "cuda_test_util.h"
#include "../forward_test_util.h"
#include "engine/engine.h"
#include "engine/logprobs.h"
#include "model/model.h"

namespace inferscale {
namespace {

std::string model_path() {
  if (const char* p = std::getenv("INFERSCALE_SMOLLM2")) return p;
  return std::string(INFERSCALE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

const std::vector<std::vector<ChatMessage>> kChats{
    {{"user", "What is the capital of France?"}},
    {{"system", "You are a concise assistant. Answer in one sentence."}, {"user", "Why is the sky blue?"}},
    {{"user", "My cat is called Miso."},
     {"assistant", "That is a lovely name for a cat!"},
     {"user", "Write a short poem about my cat, using her name."}},
};

// Greedy tokens of each chat through an engine on `be`.
std::vector<std::vector<int32_t>> greedy(std::unique_ptr<Backend> be, const Model& m, int n) {
  Engine e(std::move(be), m.tokenizer, {});
  std::vector<int64_t> ids;
  for (const auto& chat : kChats) {
    SamplingParams sp;
    sp.temperature = 0;
    sp.max_tokens = n;
    sp.ignore_eos = true;
    ids.push_back(e.add_request(m.tokenizer->encode(m.chat_template.render(chat, true)), sp));
  }
  std::vector<std::vector<int32_t>> out(ids.size());
  for (const RequestOutput& o : e.run_to_completion())
    for (size_t i = 0; i < ids.size(); ++i)
      if (o.id == ids[i]) out[i] = o.new_tokens;
  return out;
}

// Tokens [begin, end) of `seq` (positions begin.., cache blocks 0.. in order) as one sequence's
// forward; output rows: the last token, or every token (`every_row`).
ForwardBatch one_sequence(const std::vector<int32_t>& seq, int32_t begin, int32_t end, bool every_row) {
  ForwardBatch fb;
  for (int32_t i = begin; i < end; ++i) {
    fb.token_ids.push_back(seq[static_cast<size_t>(i)]);
    fb.positions.push_back(i);
    fb.slot_mapping.push_back(i);
    if (every_row) fb.output_tokens.push_back(i - begin);
  }
  if (!every_row) fb.output_tokens = {end - begin - 1};
  fb.q_indptr = {0, end - begin};
  for (int32_t b = 0; b * 16 < end; ++b) fb.kv_indices.push_back(b);
  fb.kv_indptr = {0, static_cast<int32_t>(fb.kv_indices.size())};
  return fb;
}

}  // namespace

// Each test: the model and options of a small cache; skipped without a GPU or the model file.
class CudaSmolLM2 : public ::testing::Test {
 protected:
  void SetUp() override {
    REQUIRE_GPU();
    const std::string path = model_path();
    if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent";
    m = load_model(path);
    bo.num_cache_blocks = 64;
  }
  Model m;
  BackendOptions bo;
};

TEST_F(CudaSmolLM2, LogitsAndGreedyMatchTheCpuBackend) {
  auto cpu = make_cpu_backend(m.config, m.weights, bo);
  auto gpu = make_cuda_backend(m.config, m.weights, bo);
  // Prompt of chat 0 in one forward, then 8 decode steps along the CPU's greedy path.
  std::vector<int32_t> seq = m.tokenizer->encode(m.chat_template.render(kChats[0], true));
  const int32_t prompt = static_cast<int32_t>(seq.size());
  const auto path_ids = greedy(make_cpu_backend(m.config, m.weights, bo), m, 8).at(0);
  seq.insert(seq.end(), path_ids.begin(), path_ids.end());
  double worst = 0;
  int agree = 0, rows = 0;
  for (int32_t end = prompt; end <= static_cast<int32_t>(seq.size()); ++end) {
    const ForwardBatch fb = one_sequence(seq, end == prompt ? 0 : end - 1, end, false);
    std::vector<float> lc, lg;
    cpu->forward(fb, lc);
    gpu->forward(fb, lg);
    ASSERT_EQ(lc.size(), lg.size());
    worst = std::max(worst, testing::rel_l2(lg, lc));
    agree += std::max_element(lc.begin(), lc.end()) - lc.begin() == std::max_element(lg.begin(), lg.end()) - lg.begin();
    ++rows;
  }
  std::printf("SmolLM2 CUDA (bf16) vs CPU (f32) logits: max relative error %.3g over %d rows, argmax agrees on %d\n",
              worst, rows, agree);
  test::note("SmolLM2 logits, CUDA bf16 vs CPU f32", fmt::format("rel L2 {:.3g} over {} rows, argmax agrees {}/{}", worst, rows, agree, rows));
  EXPECT_LT(worst, 0.1);  // bf16 weights and activations over 30 layers: 0.062 measured on the H200
  EXPECT_GE(agree, rows - 1);

  const auto want = greedy(make_cpu_backend(m.config, m.weights, bo), m, 32);
  const auto got = greedy(make_cuda_backend(m.config, m.weights, bo), m, 32);
  for (size_t c = 0; c < kChats.size(); ++c) {
    size_t n = 0;
    while (n < want[c].size() && n < got[c].size() && want[c][n] == got[c][n]) ++n;
    std::printf("chat %zu: %zu of %zu greedy tokens agree (GPU: %s)\n", c, n, want[c].size(),
                m.tokenizer->decode(got[c]).substr(0, 60).c_str());
    EXPECT_GE(n, 8u) << "chat " << c;
  }
}

// --quantization fp8 on the real model: the projections in E4M3 (x quantized per forward) against
// the bf16 backend, over each chat's prompt and 24 tokens of the bf16 greedy path in one forward
// (every position's next-token distribution): mean KL(bf16 || fp8) per token and top-1 agreement.
TEST_F(CudaSmolLM2, Fp8ProjectionsStayCloseToBf16) {
  auto ref = make_cuda_backend(m.config, m.weights, bo);
  bo.projections_fp8 = true;
  auto fp8 = make_cuda_backend(m.config, m.weights, bo);
  const auto paths = greedy(make_cuda_backend(m.config, m.weights, BackendOptions{}), m, 24);
  const int64_t V = m.config.vocab_size;
  double kl_sum = 0;
  int64_t tokens = 0, agree = 0;
  for (size_t c = 0; c < kChats.size(); ++c) {
    std::vector<int32_t> seq = m.tokenizer->encode(m.chat_template.render(kChats[c], true));
    seq.insert(seq.end(), paths[c].begin(), paths[c].end());
    const int32_t n = static_cast<int32_t>(seq.size());
    const ForwardBatch fb = one_sequence(seq, 0, n, true);
    std::vector<float> lr, lf;
    ref->forward(fb, lr);
    fp8->forward(fb, lf);
    ASSERT_EQ(lr.size(), lf.size());
    for (int32_t t = 0; t < n; ++t) {
      const std::vector<double> lp = log_softmax_row(std::span<const float>(lr.data() + t * V, static_cast<size_t>(V)));
      const std::vector<double> lq = log_softmax_row(std::span<const float>(lf.data() + t * V, static_cast<size_t>(V)));
      for (int64_t v = 0; v < V; ++v) kl_sum += std::exp(lp[v]) * (lp[v] - lq[v]);
      agree += std::max_element(lp.begin(), lp.end()) - lp.begin() == std::max_element(lq.begin(), lq.end()) - lq.begin();
      ++tokens;
    }
  }
  const double mean_kl = kl_sum / static_cast<double>(tokens);
  std::printf("SmolLM2 FP8 projections vs bf16: mean KL %.4f per token over %lld tokens, top-1 agrees %lld/%lld; weights %.1f vs %.1f MiB\n",
              mean_kl, static_cast<long long>(tokens), static_cast<long long>(agree), static_cast<long long>(tokens),
              fp8->weight_bytes() / 1048576.0, ref->weight_bytes() / 1048576.0);
  test::note("SmolLM2, FP8 projections vs bf16", fmt::format("mean KL {:.4f} over {} tokens, top-1 {}/{}", mean_kl, tokens, agree, tokens));
  EXPECT_LT(mean_kl, 0.15);
  EXPECT_GE(agree * 100, tokens * 85);
  EXPECT_LT(fp8->weight_bytes(), ref->weight_bytes());
}

}  // namespace inferscale
