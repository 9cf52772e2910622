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
#include "facts_in_place_util.h"
#include "model/model.h"

using namespace inferscale;

using namespace inferscale::facts_test;

TEST(FactsInPlace, LogitsEqualTheCopyPathAtOddShapes) {
  for (const Shape s : kShapes) {
    for (const bool fp8_pool : {false, true}) {
      const ModelConfig c = config(s);
      const ModelWeights w = make_random_weights(c, 3);
      auto be = make_cpu_backend(c, w, backend_options(fp8_pool));
      ASSERT_TRUE(be->reads_facts_in_place());
      const PathDiff d = compare_paths(*be);
      const std::string what = "group " + std::to_string(s.heads / s.kv_heads) + ", head_dim " + std::to_string(s.head_dim) +
                               (fp8_pool ? ", fp8 pool" : "");
      EXPECT_LE(d.prefill, 1e-5f) << what;
      EXPECT_LE(d.decode, 1e-5f) << what;
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
  for (int32_t i = 0; i < 24; ++i) b.fact_slots.push_back(i);
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
  EXPECT_NO_THROW(check_forward_batch(b, 64 * kBs, kBs, 16 * kBs, c.vocab_size));
  bad = b;
  bad.fact_slots[3] = 1 << 20;
  EXPECT_THROW(check_forward_batch(bad, 64 * kBs, kBs, 16 * kBs, c.vocab_size), Error);
  bad = b;
  bad.fact_slots[23] = -1;
  EXPECT_THROW(check_forward_batch(bad, 64 * kBs, kBs, 16 * kBs, c.vocab_size), Error);
}
