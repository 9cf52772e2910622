// Dense retrieval's embedding model on the GPU vs the CPU: a Qwen3-Embedding-0.6B shape (28
// layers, hidden 1024, 16 q / 8 kv heads, head_dim 128, q/k norm; seeded random bf16 weights, the
// same numbers on both backends) with the real Qwen3 tokenizer, embedding LoCoMo conv-26's turns
// (the write path: facts/s) and its questions (the read path: one query's latency, what a request
// waits before retrieval), last-token pooling with <|endoftext|> as Qwen3-Embedding does.
// Also prints the worst cosine between the two backends' vectors (bf16 vs fp32 compute).
// Usage: bench_cuda_embedder --tokenizer qwen3/tokenizer.json --locomo locomo10.json
//        [--cpu-facts 64] [--queries 20]
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "memory/formats/locomo.h"
#include "memory/retrieval/model_embedder.h"
#include "model/model.h"
#include "tokenizer/load_tokenizer.h"

using namespace inferscale;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// Qwen3-Embedding-0.6B's config.json (the numbers that shape the work).
const char* kQwen3Embedding06B = R"({
  "architectures": ["Qwen3ForCausalLM"], "hidden_size": 1024, "intermediate_size": 3072,
  "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
  "vocab_size": 151669, "max_position_embeddings": 32768, "rope_theta": 1000000, "rms_norm_eps": 1e-6,
  "tie_word_embeddings": true, "torch_dtype": "bfloat16", "bos_token_id": 151643, "eos_token_id": 151643})";

struct Run {
  double facts_per_s = 0, tokens_per_s = 0, query_ms = 0;
  std::vector<float> vectors;  // of the first `compare` facts
};

Run measure(const std::shared_ptr<const Model>& model, bool gpu, const std::vector<std::string>& facts,
            const std::vector<std::string>& queries, size_t compare) {
  ModelEmbedderOptions o;
  o.pooling = Pooling::kLastToken;
  o.eos_id = default_embedder_eos(*model->tokenizer, o.pooling);
  o.query_prefix = "Instruct: Given a question, retrieve the conversation turns that answer it\nQuery: ";
  BackendOptions bo;
  bo.num_cache_blocks = embedder_cache_blocks(o, bo.block_size);
  std::unique_ptr<Backend> be = gpu ? std::unique_ptr<Backend>(make_cuda_backend(model->config, model->weights, bo))
                                    : make_cpu_backend(model->config, model->weights, bo);
  ModelEmbedder emb(model, std::move(be), o);
  Run r;
  emb.embed(std::vector<std::string>(facts.begin(), facts.begin() + 2));  // warm-up (plans, tables)
  const int64_t tok0 = emb.tokens_processed();
  const auto t0 = Clock::now();
  for (size_t i = 0; i < facts.size(); i += 32) {
    const std::vector<std::string> batch(facts.begin() + static_cast<std::ptrdiff_t>(i),
                                         facts.begin() + static_cast<std::ptrdiff_t>(std::min(facts.size(), i + 32)));
    std::vector<float> v = emb.embed(batch);
    if (i < compare) r.vectors.insert(r.vectors.end(), v.begin(), v.begin() + static_cast<std::ptrdiff_t>(
                                                                      std::min(batch.size(), compare - i) * emb.dim()));
  }
  const double s = ms_since(t0) / 1e3;
  r.facts_per_s = static_cast<double>(facts.size()) / s;
  r.tokens_per_s = static_cast<double>(emb.tokens_processed() - tok0) / s;
  std::vector<double> q;
  for (const std::string& text : queries) {
    const auto t1 = Clock::now();
    emb.embed_query(text);
    q.push_back(ms_since(t1));
  }
  std::sort(q.begin(), q.end());
  r.query_ms = q[q.size() / 2];
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::string tokenizer, locomo;
  size_t cpu_facts = 64, queries = 20;
  CLI::App app{"embedding model on the GPU vs the CPU (Qwen3-Embedding-0.6B shape, LoCoMo texts)"};
  app.add_option("--tokenizer", tokenizer, "Qwen3 tokenizer.json")->required();
  app.add_option("--locomo", locomo, "locomo10.json")->required();
  app.add_option("--cpu-facts", cpu_facts, "facts the CPU embeds (it is slow)");
  app.add_option("--queries", queries, "questions embedded one at a time");
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);

  auto model = std::make_shared<Model>();
  model->config = ModelConfig::from_hf_json(nlohmann::json::parse(kQwen3Embedding06B));
  model->tokenizer = load_tokenizer(tokenizer).tokenizer;
  model->weights = make_random_weights(model->config, 1, DType::kBF16);
  model->name = "Qwen3-Embedding-0.6B-shape";
  model->fingerprint = "bench-random";
  model->random_weights = true;

  const std::vector<LocomoConversation> convs = load_locomo(locomo);
  const LocomoConversation& c = convs.at(0);
  std::vector<std::string> facts, questions;
  for (const auto& s : c.sessions)
    for (const auto& t : s.turns)
      if (t.text.find_first_not_of(" \t\n") != std::string::npos) facts.push_back(t.speaker + ": " + t.text);
  for (const auto& qa : c.qa)
    if (questions.size() < queries) questions.push_back(qa.question);
  cpu_facts = std::min(cpu_facts, facts.size());

  const Run gpu = measure(model, true, facts, questions, cpu_facts);
  const Run cpu = measure(model, false, std::vector<std::string>(facts.begin(), facts.begin() + static_cast<std::ptrdiff_t>(cpu_facts)),
                          questions, cpu_facts);
  const size_t d = static_cast<size_t>(model->config.hidden_size);
  double worst = 1;
  for (size_t i = 0; i < cpu_facts; ++i) {
    double dot = 0;
    for (size_t j = 0; j < d; ++j) dot += static_cast<double>(gpu.vectors[i * d + j]) * cpu.vectors[i * d + j];
    worst = std::min(worst, dot);
  }
  std::printf("## Embedding model, Qwen3-Embedding-0.6B shape (random bf16 weights), LoCoMo conv-26, last-token pooling\n\n");
  std::printf("| backend | facts embedded | facts/s | tokens/s | query latency (median of %zu, ms) |\n|---|---|---|---|---|\n",
              questions.size());
  std::printf("| cuda (bf16) | %zu | %.0f | %.0f | %.2f |\n", facts.size(), gpu.facts_per_s, gpu.tokens_per_s, gpu.query_ms);
  std::printf("| cpu (fp32, all cores) | %zu | %.1f | %.0f | %.2f |\n", cpu_facts, cpu.facts_per_s, cpu.tokens_per_s, cpu.query_ms);
  std::printf("\nGPU / CPU: %.0fx facts/s, %.0fx faster queries; worst cosine GPU vs CPU vector over %zu facts: %.6f\n",
              gpu.facts_per_s / cpu.facts_per_s, cpu.query_ms / gpu.query_ms, cpu_facts, worst);
  return 0;
}
