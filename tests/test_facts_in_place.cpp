// Zero-copy memory on the CPU backend: attention reading injected facts in place from the memory
// pool (ForwardBatch::fact_*, keys rotated as they are read) gives the logits of the copy path
// (Backend::inject into the request's blocks, then the same forward), at odd fact lengths (1, 15,
// 16, 17, 55 tokens after a 13-token prefix, so facts start and end inside blocks), GQA ratios
// 1/4/7, head_dim 64/128, f32 and FP8 pools, for a prefill and the decode step after it. Through
// the engine: the same greedy tokens and logprobs as the copy path, fewer cache blocks, and the
// copy path where facts are recomputed, counted.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/kv_rows.h"
#include "model/model.h"

using namespace inferscale;

namespace {

constexpr int32_t kBs = 16;

struct Shape {
  int64_t heads, kv_heads, head_dim;
};

ModelConfig config(const Shape& s) {
  ModelConfig c = demo_config();
  c.num_layers = 2;
  c.hidden_size = 96;
  c.intermediate_size = 160;
  c.num_heads = s.heads;
  c.num_kv_heads = s.kv_heads;
  c.head_dim = s.head_dim;
  c.finalize();
  return c;
}

// One sequence: a prefix computed, facts from the pool at [P, P + F), a question computed after.
struct Layout {
  int32_t prefix = 13;
  std::vector<int32_t> facts = {1, 15, 16, 17, 55};
  int32_t question = 9;
  int32_t fact_tokens() const {
    int32_t n = 0;
    for (int32_t f : facts) n += f;
    return n;
  }
  int32_t total() const { return prefix + fact_tokens() + question; }
};

// Each fact from a pool block boundary, as the memory pool keeps them: the slot of every fact token.
std::vector<int64_t> fact_pool_slots(const Layout& l) {
  std::vector<int64_t> slots;
  int64_t block = 0;
  for (int32_t f : l.facts) {
    for (int32_t i = 0; i < f; ++i) slots.push_back(block * kBs + i);
    block += (f + kBs - 1) / kBs;
  }
  return slots;
}

// Random pre-RoPE K and V rows into the pool slots.
void fill_pool(Backend& be, const std::vector<int64_t>& slots, uint32_t seed) {
  const ModelConfig& c = be.config();
  const int64_t n = static_cast<int64_t>(slots.size());
  HostTensor k = make_kv_rows(DType::kF32, c.num_layers, n, c.kv_size());
  HostTensor v = make_kv_rows(DType::kF32, c.num_layers, n, c.kv_size());
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (int64_t i = 0; i < k.numel(); ++i) k.as<float>()[i] = d(rng);
  for (int64_t i = 0; i < v.numel(); ++i) v.as<float>()[i] = d(rng);
  be.write_pool(slots, k, v);
}

// The forward of `positions` (computed tokens of the one sequence) with every row's logits.
ForwardBatch step(const std::vector<int32_t>& tokens, const std::vector<int32_t>& positions, const std::vector<int32_t>& table) {
  ForwardBatch fb;
  for (size_t i = 0; i < positions.size(); ++i) {
    const int32_t p = positions[i];
    fb.token_ids.push_back(tokens[static_cast<size_t>(p)]);
    fb.positions.push_back(p);
    fb.slot_mapping.push_back(static_cast<int64_t>(table[static_cast<size_t>(p / kBs)]) * kBs + p % kBs);
    fb.output_tokens.push_back(static_cast<int32_t>(i));
  }
  fb.q_indptr = {0, static_cast<int32_t>(positions.size())};
  fb.kv_indices = table;
  fb.kv_indptr = {0, static_cast<int32_t>(table.size())};
  return fb;
}

struct Logits {
  std::vector<float> prefill, decode;
};

// The prefix and question in one forward, then one decode token, facts copied in or read in place.
Logits serve(Backend& be, const Layout& l, const std::vector<int32_t>& tokens, const std::vector<int64_t>& pool,
             bool in_place, int32_t first_block) {
  const int32_t F0 = l.prefix, F1 = l.prefix + l.fact_tokens(), N = l.total();
  std::vector<int32_t> table;
  for (int32_t b = 0; b * kBs < N + 1; ++b) {
    const bool hole = in_place && b * kBs >= F0 && (b + 1) * kBs <= F1;
    table.push_back(hole ? ForwardBatch::kNoBlock : first_block + b);
  }
  std::vector<int32_t> computed;
  for (int32_t p = 0; p < N; ++p)
    if (p < F0 || p >= F1) computed.push_back(p);
  ForwardBatch fb = step(tokens, computed, table);
  ForwardBatch dec = step(tokens, {N}, table);
  if (in_place) {
    for (ForwardBatch* b : {&fb, &dec}) {
      b->fact_indptr = {0, F1 - F0};
      b->fact_start = {F0};
      b->fact_slots = pool;
    }
  } else {
    InjectBatch inj;
    for (int32_t p = F0; p < F1; ++p) {
      inj.src_slots.push_back(pool[static_cast<size_t>(p - F0)]);
      inj.dst_slots.push_back(static_cast<int64_t>(table[static_cast<size_t>(p / kBs)]) * kBs + p % kBs);
      inj.positions.push_back(p);
    }
    be.inject(inj);
  }
  Logits out;
  be.forward(fb, out.prefill);
  be.forward(dec, out.decode);
  return out;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

}  // namespace

TEST(FactsInPlace, LogitsEqualTheCopyPathAtOddShapes) {
  const Layout l;
  for (const Shape s : {Shape{2, 2, 64}, Shape{8, 2, 128}, Shape{14, 2, 64}, Shape{4, 1, 128}}) {
    for (const bool fp8_pool : {false, true}) {
      const ModelConfig c = config(s);
      const ModelWeights w = make_random_weights(c, 3);
      BackendOptions bo;
      bo.block_size = kBs;
      bo.num_cache_blocks = 64;
      bo.num_pool_blocks = 16;
      bo.pool_fp8 = fp8_pool;
      auto be = make_cpu_backend(c, w, bo);
      ASSERT_TRUE(be->reads_facts_in_place());
      const std::vector<int64_t> pool = fact_pool_slots(l);
      fill_pool(*be, pool, 5);
      std::vector<int32_t> tokens(static_cast<size_t>(l.total() + 1));
      std::mt19937 rng(9);
      for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(c.vocab_size));
      const Logits copied = serve(*be, l, tokens, pool, false, 0);
      const Logits read = serve(*be, l, tokens, pool, true, 32);
      const std::string what = "group " + std::to_string(s.heads / s.kv_heads) + ", head_dim " + std::to_string(s.head_dim) +
                               (fp8_pool ? ", fp8 pool" : "");
      EXPECT_LE(max_abs_diff(read.prefill, copied.prefill), 1e-5f) << what;
      EXPECT_LE(max_abs_diff(read.decode, copied.decode), 1e-5f) << what;
    }
  }
}

// The fact arrays are validated: a sequence without facts beside one with them, a hole (kNoBlock)
// not wholly inside its facts, a token inside them, a pool slot out of range.
TEST(FactsInPlace, BatchesAreValidated) {
  const ModelConfig c = config({4, 2, 64});
  ForwardBatch b;
  b.token_ids = {1, 2, 3};
  b.positions = {0, 1, 40};
  b.slot_mapping = {0, 1, 16 * 5 + 8};
  b.q_indptr = {0, 2, 3};
  b.kv_indices = {0, 3, ForwardBatch::kNoBlock, 5};
  b.kv_indptr = {0, 1, 4};
  b.fact_indptr = {0, 0, 24};  // facts at [10, 34): block 1 ([16, 32)) has none of its own
  b.fact_start = {0, 10};
  for (int64_t i = 0; i < 24; ++i) b.fact_slots.push_back(i);
  b.output_tokens = {0, 1, 2};
  EXPECT_NO_THROW(b.validate(64 * kBs, kBs));
  ForwardBatch bad = b;
  bad.fact_indptr = {0, 0, 20};  // facts [10, 30): block 1 is not wholly inside them
  bad.fact_slots.resize(20);
  EXPECT_THROW(bad.validate(64 * kBs, kBs), Error);
  bad = b;
  bad.positions[2] = 20;  // a token inside its facts
  bad.slot_mapping[2] = 16 * 3 + 4;
  EXPECT_THROW(bad.validate(64 * kBs, kBs), Error);
  bad = b;
  bad.fact_slots[3] = 1 << 20;
  EXPECT_THROW(check_forward_batch(bad, 64 * kBs, kBs, 16 * kBs, c.vocab_size), Error);
}
