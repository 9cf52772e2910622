// MiniLM (all-MiniLM-L6-v2, models/) on the CPU backend: embedding throughput over the 70 LoCoMo
// texts of tests/fixtures/minilm (50 turns, 20 questions; sentence-transformers' token ids, so no
// WordPiece tokenizer is needed) and the latency of one 20-token query. Tokenization is not timed.
//   bench_bert_embed [threads=2] [rounds=5]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "engine/block_manager.h"
#include "memory/retrieval/hidden_state_embedder.h"
#include "memory/retrieval/model_embedder.h"
#include "model/config.h"
#include "model/json_file.h"
#include "model/safetensors.h"
#include "model/weight_loader.h"

using namespace inferscale;

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  const std::string dir = std::string(INFERSCALE_SOURCE_DIR) + "/models/all-MiniLM-L6-v2";
  const nlohmann::json f = load_json_file(std::string(INFERSCALE_SOURCE_DIR) + "/tests/fixtures/minilm/texts.json");
  const auto ids = f.at("ids").get<std::vector<std::vector<int32_t>>>();
  const int turns = f.at("num_turns").get<int>();
  const ModelConfig cfg = ModelConfig::from_hf_file(dir + "/config.json");
  const ModelWeights w = load_weights(cfg, SafetensorsCheckpoint::open(dir));
  BackendOptions bo;
  bo.num_threads = threads;
  ModelEmbedderOptions eo;
  bo.num_cache_blocks = embedder_cache_blocks(eo, bo.block_size);
  auto be = make_cpu_backend(cfg, w, bo);
  BlockManager blocks(be->num_cache_blocks(), be->block_size());
  using clock = std::chrono::steady_clock;
  auto embed = [&](const std::vector<std::vector<int32_t>>& batch) {
    std::vector<float> h = embedding_hidden_states(*be, blocks, eo.max_batch_tokens, batch, Pooling::kMean, true);
    std::vector<int64_t> lens;
    for (const auto& s : batch) lens.push_back(static_cast<int64_t>(s.size()));
    std::vector<float> v = pool_hidden_states(h, lens, 384, Pooling::kMean);
    l2_normalize_rows(v, 384);
    return v;
  };
  const std::vector<std::vector<int32_t>> turn_ids(ids.begin(), ids.begin() + turns);
  int64_t tokens = 0;
  for (const auto& s : turn_ids) tokens += static_cast<int64_t>(s.size());
  embed(turn_ids);  // warm
  double best = 1e9;
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = clock::now();
    embed(turn_ids);
    best = std::min(best, std::chrono::duration<double>(clock::now() - t0).count());
  }
  std::printf("throughput: %d LoCoMo turns (%lld tokens, mean %.1f) in %.1f ms (best of %d) = %.0f turns/s, %.0f tokens/s, %d threads\n",
              turns, static_cast<long long>(tokens), static_cast<double>(tokens) / turns, best * 1e3, rounds,
              turns / best, tokens / best, threads);
  // One query of exactly 20 tokens: [CLS] + 18 ids of a fixture question (repeated as needed) + [SEP].
  std::vector<int32_t> q = {ids[turns].front()};
  const std::vector<int32_t>& src = ids[turns];
  for (size_t i = 1; q.size() < 19; i = i + 1 < src.size() - 1 ? i + 1 : 1) q.push_back(src[i]);
  q.push_back(src.back());
  std::vector<double> ms;
  for (int r = 0; r < 10; ++r) embed({q});
  for (int r = 0; r < 200; ++r) {
    const auto t0 = clock::now();
    embed({q});
    ms.push_back(std::chrono::duration<double, std::milli>(clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  std::printf("query latency (20 tokens, 200 runs): p50 %.2f ms, p90 %.2f ms, p99 %.2f ms\n", ms[100], ms[180], ms[198]);
  return 0;
}
