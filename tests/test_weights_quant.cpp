// Quantized GGUF models: the tiny fixture model (Q8_0 token_embd that doubles as the tied output
// head, Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q4_K/Q6_K layer matrices, F32 norms; scripts/make_quant_fixtures.py)
// loads through load_model and its CPU logits equal, bit for bit, those of the same model written
// with gguf.quants' dequantized f32 weights. And the real SmolLM2-135M-Instruct Q4_1 file (when
// fetched): tensor types, a few dequantized rows against gguf.quants, and the weights' load time.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <vector>

#include "backend/backend.h"
#include "model/gguf.h"
#include "model/model.h"
#include "model/weight_loader.h"
#include "model_test_util.h"

using namespace inferscale;
using namespace inferscale::testing;

namespace {

const std::string kSmolLM = std::string(INFERSCALE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

// Logits of every position of `tokens`, fed as one sequence in one forward.
std::vector<float> prompt_logits(const Model& m, const std::vector<int32_t>& tokens) {
  BackendOptions bo;
  bo.num_cache_blocks = 4;
  auto be = make_cpu_backend(m.config, m.weights, bo);
  ForwardBatch fb;
  const int32_t bs = be->block_size();
  for (int32_t i = 0; i < static_cast<int32_t>(tokens.size()); ++i) {
    fb.token_ids.push_back(tokens[static_cast<size_t>(i)]);
    fb.positions.push_back(i);
    fb.slot_mapping.push_back(i);
    fb.output_tokens.push_back(i);
  }
  fb.q_indptr = {0, static_cast<int32_t>(tokens.size())};
  for (int32_t b = 0; b * bs < static_cast<int32_t>(tokens.size()); ++b) fb.kv_indices.push_back(b);
  fb.kv_indptr = {0, static_cast<int32_t>(fb.kv_indices.size())};
  std::vector<float> out;
  be->forward(fb, out);
  return out;
}

}  // namespace

TEST(QuantModel, TinyModelLoadsWithItsQuantizedDtypes) {
  const Model m = load_model(fixture("quant/tiny_quant.gguf"));
  const ModelConfig& c = m.config;
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.hidden_size, 32);
  EXPECT_EQ(c.q_size(), 256);
  EXPECT_TRUE(c.tie_word_embeddings);  // no output.weight
  EXPECT_EQ(m.weights.embed.dtype, DType::kQ8_0);
  EXPECT_EQ(m.weights.lm_head.data, m.weights.embed.data);  // the Q8_0 embedding is the head
  EXPECT_EQ(m.weights.final_norm.dtype, DType::kF32);
  const LayerWeights& l0 = m.weights.layers[0];
  const LayerWeights& l1 = m.weights.layers[1];
  EXPECT_EQ(l0.wq.dtype, DType::kQ4_1);
  EXPECT_EQ(l0.wk.dtype, DType::kQ4_0);
  EXPECT_EQ(l0.wv.dtype, DType::kQ5_0);
  EXPECT_EQ(l0.wo.dtype, DType::kQ4_K);
  EXPECT_EQ(l0.w_up.dtype, DType::kQ5_1);
  EXPECT_EQ(l0.w_down.dtype, DType::kQ8_0);
  EXPECT_EQ(l1.wo.dtype, DType::kQ6_K);
  EXPECT_EQ(l1.wq.dtype, DType::kQ8_0);
  EXPECT_EQ(l1.ffn_norm.dtype, DType::kF32);

  // Stored bytes: blocks, counted once for the tied head; the per-dtype tally.
  const WeightStats ws = weight_stats(m.weights);
  const GgufFile g = GgufFile::open(fixture("quant/tiny_quant.gguf"));
  int64_t in_file = 0;
  for (const auto& [name, t] : g.tensors()) in_file += static_cast<int64_t>(t.nbytes());
  EXPECT_EQ(ws.bytes, in_file);
  EXPECT_EQ(ws.by_dtype.at(DType::kQ8_0).tensors, 3);
  // token_embd [64, 32], blk.0.ffn_down [32, 32], blk.1.attn_q [256, 32]: one 34-byte block per row
  EXPECT_EQ(ws.by_dtype.at(DType::kQ8_0).bytes, (64 + 32 + 256) * 34);
  EXPECT_EQ(ws.by_dtype.at(DType::kQ4_K).bytes, 32 * 256 / 256 * 144);
  EXPECT_EQ(ws.by_dtype.at(DType::kF32).tensors, 5);
  EXPECT_NE(ws.dtypes_summary().find("q4_1 x7"), std::string::npos) << ws.dtypes_summary();
}

TEST(QuantModel, LogitsEqualTheDequantizedF32Model) {
  const Model q = load_model(fixture("quant/tiny_quant.gguf"));
  const Model f = load_model(fixture("quant/tiny_quant_f32.gguf"));
  for (const auto& [dt, d] : weight_stats(f.weights).by_dtype) EXPECT_EQ(dt, DType::kF32);
  const std::vector<int32_t> prompt = q.tokenizer->encode("the cat is on the mat, and the dog is not!");
  ASSERT_EQ(prompt, f.tokenizer->encode("the cat is on the mat, and the dog is not!"));
  ASSERT_GE(prompt.size(), 10u);
  const std::vector<float> lq = prompt_logits(q, prompt);
  const std::vector<float> lf = prompt_logits(f, prompt);
  ASSERT_EQ(lq.size(), prompt.size() * 64);
  ASSERT_EQ(lq.size(), lf.size());
  // Both run the same f32 forward on the same f32 weights: equal to the bit.
  EXPECT_EQ(std::memcmp(lq.data(), lf.data(), lq.size() * 4), 0);
  // ... and they are real logits: finite, not all alike, differing between positions.
  float lo = lq[0], hi = lq[0];
  for (float v : lq) {
    ASSERT_TRUE(std::isfinite(v));
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  EXPECT_GT(hi - lo, 1.0f);
  EXPECT_NE(std::memcmp(lq.data(), lq.data() + 64, 64 * 4), 0);
}

TEST(QuantModel, SmolLM2TensorsMatchGgufReference) {
  if (!exists(kSmolLM)) GTEST_SKIP() << "model not fetched (scripts/setup.sh): " << kSmolLM;
  const nlohmann::json doc = nlohmann::json::parse(read_file(fixture("quant/smollm2_rows.json")));
  ASSERT_EQ(static_cast<int64_t>(std::filesystem::file_size(kSmolLM)), doc.at("file_size").get<int64_t>())
      << "another SmolLM2 file than the fixture was made from";
  const std::string values = read_file(fixture("quant/smollm2_rows.f32"));
  const GgufFile g = GgufFile::open(kSmolLM);
  std::map<DType, int> counts;
  for (const auto& [name, t] : g.tensors()) ++counts[t.dtype];
  EXPECT_EQ(counts[DType::kQ4_1], 210);
  EXPECT_EQ(counts[DType::kF32], 61);
  EXPECT_EQ(counts[DType::kQ8_0], 1);
  EXPECT_EQ(g.tensor("token_embd.weight").dtype, DType::kQ8_0);
  size_t off = 0;
  for (const auto& e : doc.at("tensors")) {
    const std::string name = e.at("tensor").get<std::string>();
    SCOPED_TRACE(name);
    const HostTensor& t = g.tensor(name);
    EXPECT_EQ(t.shape, e.at("shape").get<std::vector<int64_t>>());
    std::vector<float> row(static_cast<size_t>(t.row_size()));
    for (const int64_t r : e.at("rows").get<std::vector<int64_t>>()) {
      ASSERT_LE(off + row.size() * 4, values.size());
      t.rows_to_f32(r, 1, row.data());
      EXPECT_EQ(std::memcmp(row.data(), values.data() + off, row.size() * 4), 0) << "row " << r;
      off += row.size() * 4;
    }
  }
  EXPECT_EQ(off, values.size());
}

// The weights of the real model: mapped (tied Q8_0 head), then dequantized to f32 by the CPU
// backend's constructor. Prints the times; the whole must stay well under a few seconds.
TEST(QuantModel, SmolLM2WeightsLoadFast) {
  if (!exists(kSmolLM)) GTEST_SKIP() << "model not fetched (scripts/setup.sh): " << kSmolLM;
  const auto t0 = std::chrono::steady_clock::now();
  const GgufFile g = GgufFile::open(kSmolLM);
  const ModelConfig c = config_from_gguf(g);
  const ModelWeights w = load_weights(c, g);
  const auto t1 = std::chrono::steady_clock::now();
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(w.lm_head.data, w.embed.data);
  BackendOptions bo;
  bo.num_cache_blocks = 4;
  auto be = make_cpu_backend(c, w, bo);
  const auto t2 = std::chrono::steady_clock::now();
  const double open_s = std::chrono::duration<double>(t1 - t0).count();
  const double deq_s = std::chrono::duration<double>(t2 - t1).count();
  const WeightStats ws = weight_stats(w);
  std::printf("SmolLM2 weights: %.1f MiB stored (%s); open + map %.3f s, dequantize to f32 (CPU backend) %.3f s\n",
              ws.bytes / 1048576.0, ws.dtypes_summary().c_str(), open_s, deq_s);
  EXPECT_LT(open_s + deq_s, 10.0);  // a loose bound for a loaded 2-core CI machine; typically far less
}
