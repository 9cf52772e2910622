// Chunked RoPE is exact: a fact encoded once (keys before RoPE) and injected at position p has
// the same K and V, every layer, as a fresh prefill of that fact starting at p (w = 0), or of
// [window][fact] placed so the fact starts at p (w > 0). fp32 on CPU: relative error ~1e-5.
// Covers llama3 rope scaling at positions up to 100k, qkv bias and q/k norm.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "engine/block_manager.h"
#include "memory/kv/fact_encoder.h"
#include "model/model.h"
#include "kv_rows_test_util.h"

using namespace inferscale;

namespace {

constexpr int32_t kBs = 16;

std::vector<int32_t> random_tokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return t;
}

double rel(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

// Prefills `tokens` as one sequence whose first token sits at position `p0` (nothing before it);
// returns the cache slots of tokens [from, to).
std::vector<int64_t> prefill_at(Backend& be, const std::vector<int32_t>& tokens, int32_t p0, int32_t first_block,
                                int32_t from, int32_t to) {
  const int32_t n = static_cast<int32_t>(tokens.size());
  std::vector<int32_t> table(static_cast<size_t>((p0 + n + kBs - 1) / kBs), first_block);  // entries before p0: never read
  int32_t next = first_block;
  for (int32_t b = p0 / kBs; b < static_cast<int32_t>(table.size()); ++b) table[static_cast<size_t>(b)] = next++;
  ForwardBatch fb;
  for (int32_t i = 0; i < n; ++i) {
    const int32_t pos = p0 + i;
    fb.token_ids.push_back(tokens[static_cast<size_t>(i)]);
    fb.positions.push_back(pos);
    fb.slot_mapping.push_back(static_cast<int64_t>(table[static_cast<size_t>(pos / kBs)]) * kBs + pos % kBs);
  }
  fb.q_indptr = {0, n};
  fb.kv_indices = table;
  fb.kv_indptr = {0, static_cast<int32_t>(table.size())};
  fb.kv_start = {p0};
  std::vector<float> unused;
  be.forward(fb, unused);
  return std::vector<int64_t>(fb.slot_mapping.begin() + from, fb.slot_mapping.begin() + to);
}

struct Case {
  std::string fixture;
  int window_len;
  std::vector<int32_t> positions;
};

double worst_error(const Case& c) {
  Model m = load_model(std::string(INFERSCALE_FIXTURES) + "/models/" + c.fixture);
  const int32_t V = static_cast<int32_t>(m.config.vocab_size);
  const auto window = random_tokens(c.window_len, V, 7);
  const auto fact = random_tokens(23, V, 8);
  BackendOptions bo;
  bo.block_size = kBs;
  bo.num_cache_blocks = 64;
  bo.num_pool_blocks = 4;
  auto be = make_cpu_backend(m.config, m.weights, bo);
  BlockManager cache_blocks(32, kBs);  // blocks 0..31 for the encoder; 32..63 for references

  EncodeJob job{window, fact, {}};
  for (int32_t j = 0; j < 23; ++j) job.pool_slots.push_back(j);  // pool blocks 0 and 1
  FactEncoder enc(*be, cache_blocks);
  enc.encode(std::span<const EncodeJob>(&job, 1));
  EXPECT_EQ(cache_blocks.num_free(), 32);

  double worst = 0;
  for (int32_t p : c.positions) {
    // Injected: pool -> cache blocks 40.. at positions p .. p+22.
    InjectBatch ib;
    for (int32_t j = 0; j < 23; ++j) {
      ib.src_slots.push_back(j);
      ib.dst_slots.push_back(40 * kBs + j);
      ib.positions.push_back(p + j);
    }
    be->inject(ib);
    std::vector<float> ki, vi, kr, vr;
    test::read_cache_f32(*be, ib.dst_slots, ki, vi);
    // Reference: prefill [window][fact] so that the fact starts at p.
    std::vector<int32_t> seq = window;
    seq.insert(seq.end(), fact.begin(), fact.end());
    const int32_t w = c.window_len;
    auto slots = prefill_at(*be, seq, p - w, 44, w, w + 23);
    test::read_cache_f32(*be, slots, kr, vr);
    const double ek = rel(ki, kr), ev = rel(vi, vr);
    std::printf("%-16s w=%-2d p=%-6d  K rel err %.2e  V rel err %.2e\n", c.fixture.c_str(), w, p, ek, ev);
    worst = std::max({worst, ek, ev});
  }
  return worst;
}

}  // namespace

TEST(ChunkedRope, Llama3ScalingUpTo100kAlone) {
  EXPECT_LT(worst_error({"llama3_scaled", 0, {0, 17, 8191, 8200, 100000}}), 2e-5);
}

TEST(ChunkedRope, Llama3ScalingWithWindow) {
  EXPECT_LT(worst_error({"llama3_scaled", 40, {40, 57, 9000, 100000}}), 2e-5);
}

TEST(ChunkedRope, QkvBiasAndTiedEmbeddings) {
  EXPECT_LT(worst_error({"qwen2_bias_tied", 0, {0, 5, 3000}}), 2e-5);
  EXPECT_LT(worst_error({"qwen2_bias_tied", 19, {19, 4000}}), 2e-5);
}

TEST(ChunkedRope, QkNorm) {
  EXPECT_LT(worst_error({"qwen3_qknorm", 0, {0, 33, 50000}}), 2e-5);
  EXPECT_LT(worst_error({"qwen3_qknorm", 31, {31, 50000}}), 2e-5);
}

TEST(ChunkedRope, YarnScaling) {
  EXPECT_LT(worst_error({"llama_yarn", 12, {12, 2047}}), 2e-5);
}
