// Facts read in place against facts copied, on any backend (tests/test_facts_in_place.cpp on the
// CPU, tests/cuda/test_cuda_backend.cpp on the GPU): a small Llama of a given head shape with
// random weights; one sequence of a 13-token prefix, facts of 1, 15, 16, 17 and 55 tokens from the
// pool (each from a pool block boundary, with random pre-RoPE rows), and a 9-token question,
// served through Backend::inject then a forward, or through a forward reading the facts in place;
// then one decode step.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "backend/backend.h"
#include "backend/kv_rows.h"
#include "model/model.h"
#include "tensor/dtype.h"

namespace inferscale::facts_test {

constexpr int32_t kBs = 16;

struct Shape {
  int64_t heads, kv_heads, head_dim;
};

inline ModelConfig config(const Shape& s) {
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
inline std::vector<int64_t> fact_pool_slots(const Layout& l) {
  std::vector<int64_t> slots;
  int64_t block = 0;
  for (int32_t f : l.facts) {
    for (int32_t i = 0; i < f; ++i) slots.push_back(block * kBs + i);
    block += (f + kBs - 1) / kBs;
  }
  return slots;
}

// Random pre-RoPE K and V rows into the pool slots, in the pool's dtype (f32, or the GPU's bf16).
inline void fill_pool(Backend& be, const std::vector<int64_t>& slots, uint32_t seed) {
  const ModelConfig& c = be.config();
  const int64_t n = static_cast<int64_t>(slots.size());
  const DType dt = be.pool_dtype();
  HostTensor k = make_kv_rows(dt, c.num_layers, n, c.kv_size());
  HostTensor v = make_kv_rows(dt, c.num_layers, n, c.kv_size());
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (HostTensor* t : {&k, &v})
    for (int64_t i = 0; i < t->numel(); ++i) {
      if (dt == DType::kBF16) {
        t->as<uint16_t>()[i] = f32_to_bf16(d(rng));
      } else {
        t->as<float>()[i] = d(rng);
      }
    }
  be.write_pool(slots, k, v);
}

// The forward of `positions` (computed tokens of the one sequence) with every row's logits.
inline ForwardBatch step(const std::vector<int32_t>& tokens, const std::vector<int32_t>& positions, const std::vector<int32_t>& table) {
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
inline Logits serve(Backend& be, const Layout& l, const std::vector<int32_t>& tokens, const std::vector<int64_t>& pool,
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
      b->fact_slots.assign(pool.begin(), pool.end());
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

inline float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

// The head shapes both backends' tests cover: GQA 1, 4 and 7 at head_dim 64 or 128.
inline constexpr Shape kShapes[] = {{2, 2, 64}, {8, 2, 128}, {14, 2, 64}, {4, 1, 128}};

// Room for compare_paths: the copy path's blocks from 0, the in-place path's from 32, the facts'
// 9 pool blocks.
inline BackendOptions backend_options(bool pool_fp8 = false) {
  BackendOptions bo;
  bo.block_size = kBs;
  bo.num_cache_blocks = 64;
  bo.num_pool_blocks = 16;
  bo.pool_fp8 = pool_fp8;
  return bo;
}

// Both paths on one backend (blocks 0.. for the copy, 32.. for the read in place): the largest
// absolute logit difference of the prefill's rows and of the decode step's.
struct PathDiff {
  float prefill = 0, decode = 0;
};
inline PathDiff compare_paths(Backend& be) {
  const Layout l;
  const std::vector<int64_t> pool = fact_pool_slots(l);
  fill_pool(be, pool, 5);
  std::vector<int32_t> tokens(static_cast<size_t>(l.total() + 1));
  std::mt19937 rng(9);
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(be.config().vocab_size));
  const Logits copied = serve(be, l, tokens, pool, false, 0);
  const Logits read = serve(be, l, tokens, pool, true, 32);
  return {max_abs_diff(read.prefill, copied.prefill), max_abs_diff(read.decode, copied.decode)};
}

}  // namespace inferscale::facts_test
