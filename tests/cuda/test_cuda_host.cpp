// Host logic of the CUDA backend that needs no GPU: the attention planner, the CUDA-graph buckets
// and padding, and the RoPE table.
// Named Host* so a GPU-less machine can run them: test_cuda --gtest_filter='Host*'.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "backend/cuda/attention_plan.h"
#include "backend/cuda/graph_batch.h"
#include "backend/cuda/step_attention.h"
#include "backend/cuda/rope_table.h"
#include "model/config.h"
#include "model/sampling.h"
#include "util/check.h"

namespace inferscale {
namespace {

struct Batch {
  std::vector<int32_t> q_indptr{0};
  std::vector<int32_t> positions;
  std::vector<int32_t> kv_start;  // [S], first attended entry
  // Sequence with `ctx` cached entries and `n` new tokens at positions ctx .. ctx + n - 1,
  // attending from entry `start` (<= ctx) on.
  void add(int32_t ctx, int32_t n, int32_t start = 0) {
    for (int32_t i = 0; i < n; ++i) positions.push_back(ctx + i);
    q_indptr.push_back(q_indptr.back() + n);
    kv_start.push_back(start);
  }
  int32_t seqs() const { return static_cast<int32_t>(q_indptr.size()) - 1; }
  AttnPlan plan(int32_t group, const AttnPlanOptions& o, const std::vector<int32_t>* only = nullptr) const {
    return plan_attention(q_indptr.data(), seqs(), positions.data(), kv_start.data(), group, o, only);
  }
};

// Every (sequence, packed row, kv entry <= its position) is covered exactly once across the
// items of each tile, items of a split tile are referenced by exactly one merge, and no item
// reaches past its tile's last position. `only`: the sequences planned (null: all).
void check_plan(const Batch& b, int32_t group, const AttnPlanOptions& o, const AttnPlan& p,
                const std::vector<int32_t>* only = nullptr) {
  const auto planned = [&](int32_t s) { return only == nullptr || std::count(only->begin(), only->end(), s) == 1; };
  ASSERT_EQ(p.rows_per_tile, o.rows_per_tile);
  std::map<std::pair<int32_t, int32_t>, std::vector<std::pair<int32_t, int32_t>>> tiles;  // (seq,row_begin) -> kv ranges
  std::vector<int32_t> partial_used(static_cast<size_t>(p.num_partials), 0);
  for (const AttnWorkItem& it : p.items) {
    ASSERT_GE(it.kv_seq, 0);
    ASSERT_LT(it.kv_seq, b.seqs());
    EXPECT_TRUE(planned(it.kv_seq)) << "an item of sequence " << it.kv_seq << ", which was not asked for";
    EXPECT_EQ(it.q_start, b.q_indptr[it.kv_seq]);
    EXPECT_LT(it.row_begin, it.row_end);
    EXPECT_LE(it.row_end - it.row_begin, o.rows_per_tile);
    const int32_t last_tok = it.q_start + (it.row_end - 1) / group;
    EXPECT_LE(it.kv_end, b.positions[last_tok] + 1);
    EXPECT_LT(it.kv_begin, it.kv_end);
    tiles[{it.kv_seq, it.row_begin}].push_back({it.kv_begin, it.kv_end});
    if (it.partial >= 0) {
      ASSERT_LT(it.partial, p.num_partials);
      ++partial_used[static_cast<size_t>(it.partial)];
      EXPECT_EQ((it.kv_begin - b.kv_start[static_cast<size_t>(it.kv_seq)]) % o.kv_granule, 0);
    }
  }
  for (int32_t u : partial_used) EXPECT_EQ(u, 1);
  int32_t merged = 0, max_rows = 0;
  for (const AttnMergeItem& m : p.merges) {
    merged += m.num_splits;
    max_rows = std::max(max_rows, m.row_end - m.row_begin);
  }
  EXPECT_EQ(p.max_merge_rows, max_rows);
  EXPECT_EQ(merged, p.num_partials);
  // Rows: every packed row of every sequence in exactly one tile; kv ranges tile [kv_start, kv_len).
  for (int32_t s = 0; s < b.seqs(); ++s) {
    if (!planned(s)) continue;
    const int32_t rows = (b.q_indptr[s + 1] - b.q_indptr[s]) * group;
    for (int32_t r = 0; r < rows; r += o.rows_per_tile) {
      auto it = tiles.find({s, r});
      ASSERT_NE(it, tiles.end()) << "seq " << s << " row " << r << " not covered";
      auto ranges = it->second;
      std::sort(ranges.begin(), ranges.end());
      const int32_t kv_len = b.positions[b.q_indptr[s] + (std::min(rows, r + o.rows_per_tile) - 1) / group] + 1;
      int32_t at = b.kv_start[static_cast<size_t>(s)];
      for (auto [kb, ke] : ranges) {
        EXPECT_EQ(kb, at);
        at = ke;
      }
      EXPECT_EQ(at, kv_len);
      tiles.erase(it);
    }
  }
  EXPECT_TRUE(tiles.empty()) << "items for tiles that do not exist";
}

TEST(HostAttentionPlan, PrefillTilesWithoutSplitWhenGpuIsFull) {
  Batch b;
  for (int i = 0; i < 17; ++i) b.add(i * 3, 1000);
  AttnPlanOptions o;
  o.num_kv_heads = 8;
  const AttnPlan p = b.plan(4, o);
  check_plan(b, 4, o, p);
  EXPECT_EQ(p.num_partials, 0);
  EXPECT_EQ(p.items.size(), 17u * ((1000 * 4 + 63) / 64));
}

TEST(HostAttentionPlan, DecodeSplitsLongContexts) {
  Batch b;
  b.add(5000, 1);
  AttnPlanOptions o;
  o.num_kv_heads = 8;
  o.rows_per_tile = 4;
  o.kv_granule = 32;
  o.min_split_len = 128;
  const AttnPlan p = b.plan(4, o);
  check_plan(b, 4, o, p);
  EXPECT_GT(p.num_partials, 8);
  EXPECT_LE(p.num_partials, o.max_splits);
  EXPECT_EQ(p.merges.size(), 1u);
}

TEST(HostAttentionPlan, OddShapesAndGroups) {
  std::mt19937 g(7);
  const int32_t lens[] = {1, 15, 16, 17, 1000};
  for (int32_t group : {1, 4, 7}) {
    for (int32_t nseq : {1, 7, 17}) {
      Batch b;
      for (int32_t s = 0; s < nseq; ++s) b.add(static_cast<int32_t>(g() % 3000), lens[g() % 5]);
      for (int32_t sms : {1, 132}) {
        AttnPlanOptions o;
        o.num_kv_heads = 2;
        o.num_sms = sms;
        check_plan(b, group, o, b.plan(group, o));
        o.rows_per_tile = group;  // decode-style tiles
        o.kv_granule = 32;
        o.min_split_len = 128;
        check_plan(b, group, o, b.plan(group, o));
      }
    }
  }
}

TEST(HostAttentionPlan, PositionsThatJump) {
  Batch b;  // a chunk that skips an injected range: positions 0..9 then 500..531
  for (int32_t i = 0; i < 10; ++i) b.positions.push_back(i);
  for (int32_t i = 0; i < 32; ++i) b.positions.push_back(500 + i);
  b.q_indptr.push_back(42);
  b.kv_start.push_back(0);
  AttnPlanOptions o;
  o.num_kv_heads = 8;
  check_plan(b, 4, o, b.plan(4, o));
}

TEST(HostAttentionPlan, KvStartSkipsLeadingEntries) {
  // A fact encoded at its serving position p with nothing before it (ForwardBatch::kv_start).
  for (int32_t sms : {1, 132, 1000}) {
    Batch b;
    b.add(9000, 30, 9000);
    b.add(100, 1000, 40);
    b.add(5000, 1, 4990);
    AttnPlanOptions o;
    o.num_kv_heads = 8;
    o.num_sms = sms;
    const AttnPlan p = b.plan(4, o);
    check_plan(b, 4, o, p);
    for (const AttnWorkItem& it : p.items) EXPECT_GE(it.kv_begin, b.kv_start[static_cast<size_t>(it.kv_seq)]);
  }
}

// A mixed batch as the CUDA forward plans it: its one-token sequences on decode-style tiles, the
// others on prefill tiles; each plan covers its own sequences and nothing else, with the batch's
// sequence and token indices.
TEST(HostAttentionPlan, SubsetsPlanOnlyTheirSequences) {
  std::mt19937 g(11);
  for (int32_t group : {1, 4, 7}) {
    Batch b;
    std::vector<int32_t> decodes, others;
    for (int32_t s = 0; s < 23; ++s) {
      const bool decode = g() % 3 != 0;
      b.add(static_cast<int32_t>(g() % 5000), decode ? 1 : 1 + static_cast<int32_t>(g() % 70));
      (decode ? decodes : others).push_back(s);
    }
    for (int32_t sms : {1, 132}) {
      AttnPlanOptions tiles;
      tiles.num_kv_heads = 2;
      tiles.num_sms = sms;
      check_plan(b, group, tiles, b.plan(group, tiles, &others), &others);
      AttnPlanOptions dec = tiles;
      dec.rows_per_tile = group;
      dec.kv_granule = 32;
      dec.min_split_len = 128;
      dec.ctas_per_sm = 4;
      const AttnPlan p = b.plan(group, dec, &decodes);
      check_plan(b, group, dec, p, &decodes);
      for (const AttnWorkItem& it : p.items) EXPECT_EQ(it.row_end - it.row_begin, group);
    }
  }
  Batch b;
  b.add(10, 1);
  AttnPlanOptions o;
  const std::vector<int32_t> bad{1};
  EXPECT_THROW(b.plan(4, o, &bad), Error);
}

// The capacity a CUDA graph sizes its attention launches with holds every plan of that many tiles.
TEST(HostAttentionPlan, CapacityBoundsEveryPlan) {
  std::mt19937 g(11);
  for (int trial = 0; trial < 400; ++trial) {
    const int32_t group = 1 + static_cast<int32_t>(g() % 8), nkv = 1 + static_cast<int32_t>(g() % 8);
    const bool single = trial % 2 == 0, decode = trial % 4 == 0;
    Batch b;
    const int32_t S = 1 + static_cast<int32_t>(g() % 40);
    for (int32_t s = 0; s < S; ++s) {
      const int32_t ctx = g() % 5 == 0 ? static_cast<int32_t>(g() % 20000) : static_cast<int32_t>(g() % 600);
      b.add(ctx, single ? 1 : 1 + static_cast<int32_t>(g() % 70));
    }
    AttnPlanOptions o;
    o.num_kv_heads = nkv;
    o.num_sms = trial % 3 == 0 ? 1 : 132;
    o.rows_per_tile = decode ? group : 64;
    o.kv_granule = decode ? 32 : 64;
    o.min_split_len = single ? 128 : 256;
    o.ctas_per_sm = single ? 4 : 2;
    const AttnPlan p = b.plan(group, o);
    int32_t tiles = 0;
    for (int32_t s = 0; s < S; ++s) tiles += ((b.q_indptr[s + 1] - b.q_indptr[s]) * group + o.rows_per_tile - 1) / o.rows_per_tile;
    const AttnPlanCapacity cap = plan_capacity(tiles, o);
    EXPECT_LE(static_cast<int32_t>(p.items.size()), cap.items) << "trial " << trial;
    EXPECT_LE(p.num_partials, cap.partials) << "trial " << trial;
    EXPECT_LE(static_cast<int32_t>(p.merges.size()), cap.merges) << "trial " << trial;
  }
}

// A forward's sequences as (cached entries, new tokens) pairs; only what planning reads.
ForwardBatch planned_batch(const std::vector<std::pair<int32_t, int32_t>>& seqs) {
  ForwardBatch b;
  b.q_indptr = {0};
  for (const auto& [ctx, n] : seqs) {
    for (int32_t i = 0; i < n; ++i) {
      b.positions.push_back(ctx + i);
      b.token_ids.push_back(1);
    }
    b.q_indptr.push_back(b.q_indptr.back() + n);
  }
  return b;
}

// The plans of one forward (step_attention.h): a decode step runs the decode kernel over every
// sequence; a mixed batch splits, its one-token sequences on the decode kernel and the rest on the
// tiles, the two plans covering disjoint sequences; a graph's batch never splits and its capacity
// holds its plan; without a decode kernel (the tiles chosen, or a group past 8) nothing splits.
TEST(HostStepAttention, KernelsAndSplitsByBatch) {
  using cuda::AttnKernel;
  const ForwardBatch decode = planned_batch({{700, 1}, {30, 1}, {2900, 1}});
  const ForwardBatch mixed = planned_batch({{700, 1}, {0, 40}, {2900, 1}, {100, 17}});
  const int32_t group = 4, nkv = 8, sms = 132;

  const cuda::StepAttention d = cuda::plan_step_attention(decode, decode.positions.data(), group, nkv, sms, AttnKernel::kDecodeMma, false);
  EXPECT_TRUE(d.single_token);
  EXPECT_FALSE(d.split);
  EXPECT_EQ(d.kernel, AttnKernel::kDecodeMma);
  EXPECT_EQ(d.options.rows_per_tile, group);
  EXPECT_EQ(d.capacity.items, static_cast<int32_t>(d.plan.items.size()));

  const cuda::StepAttention m = cuda::plan_step_attention(mixed, mixed.positions.data(), group, nkv, sms, AttnKernel::kDecodeMma, false);
  EXPECT_FALSE(m.single_token);
  ASSERT_TRUE(m.split);
  EXPECT_EQ(m.kernel, AttnKernel::kTiles);
  EXPECT_EQ(m.decode_kernel, AttnKernel::kDecodeMma);
  EXPECT_EQ(m.options.rows_per_tile, cuda::kPrefillRowsPerTile);
  EXPECT_EQ(m.decode_plan.rows_per_tile, group);
  std::set<int32_t> tiles_seqs, decode_seqs;
  for (const AttnWorkItem& it : m.plan.items) tiles_seqs.insert(it.kv_seq);
  for (const AttnWorkItem& it : m.decode_plan.items) decode_seqs.insert(it.kv_seq);
  EXPECT_EQ(tiles_seqs, (std::set<int32_t>{1, 3}));
  EXPECT_EQ(decode_seqs, (std::set<int32_t>{0, 2}));

  const cuda::StepAttention t = cuda::plan_step_attention(mixed, mixed.positions.data(), group, nkv, sms, AttnKernel::kTiles, false);
  EXPECT_FALSE(t.split);
  EXPECT_TRUE(t.decode_plan.items.empty());
  const cuda::StepAttention g = cuda::plan_step_attention(mixed, mixed.positions.data(), group, nkv, sms, AttnKernel::kDecodeMma, true);
  EXPECT_FALSE(g.split) << "a graph's batch is never split";
  EXPECT_LE(static_cast<int32_t>(g.plan.items.size()), g.capacity.items);
  EXPECT_LE(g.plan.num_partials, g.capacity.partials);
  EXPECT_LE(static_cast<int32_t>(g.plan.merges.size()), g.capacity.merges);
  EXPECT_EQ(g.merge_rows, cuda::kPrefillRowsPerTile);
  const cuda::StepAttention gd = cuda::plan_step_attention(decode, decode.positions.data(), group, nkv, sms, AttnKernel::kDecodeMma, true);
  EXPECT_EQ(gd.merge_rows, group) << "a one-token tile merges its group's rows";
}

// A decode step: `n` sequences of one token each at the given context lengths (block size 4).
ForwardBatch decode_step(const std::vector<int32_t>& ctx) {
  ForwardBatch b;
  b.q_indptr = {0};
  b.kv_indptr = {0};
  int32_t next_block = 0;
  for (int32_t c : ctx) {
    const int32_t blocks = c / 4 + 1;
    for (int32_t i = 0; i < blocks; ++i) b.kv_indices.push_back(next_block++);
    b.token_ids.push_back(c % 97);
    b.positions.push_back(c);
    b.slot_mapping.push_back(static_cast<int64_t>(b.kv_indices[b.kv_indices.size() - blocks + c / 4]) * 4 + c % 4);
    b.output_tokens.push_back(b.num_tokens() - 1);
    b.q_indptr.push_back(b.num_tokens());
    b.kv_indptr.push_back(static_cast<int32_t>(b.kv_indices.size()));
  }
  b.output = ForwardBatch::Output::kArgmax;
  return b;
}

GraphShape decode_shape(int32_t bucket) { return {GraphShape::Kind::kDecode, bucket}; }
GraphShape prefill_shape(int32_t bucket) { return {GraphShape::Kind::kPrefill, bucket}; }

// One sequence: `n` new tokens after `ctx` cached ones (block size 4), the last one the output row.
ForwardBatch prefill_step(int32_t ctx, int32_t n) {
  ForwardBatch b;
  const int32_t blocks = (ctx + n + 3) / 4;
  for (int32_t i = 0; i < blocks; ++i) b.kv_indices.push_back(10 + i);
  for (int32_t i = 0; i < n; ++i) {
    const int32_t p = ctx + i;
    b.token_ids.push_back(p % 89);
    b.positions.push_back(p);
    b.slot_mapping.push_back(static_cast<int64_t>(10 + p / 4) * 4 + p % 4);
  }
  b.q_indptr = {0, n};
  b.kv_indptr = {0, blocks};
  b.output_tokens = {n - 1};
  b.output = ForwardBatch::Output::kArgmax;
  return b;
}

TEST(HostGraphBatch, ShapesGoToTheNextBucketUp) {
  EXPECT_EQ(graph_shape(decode_step({5})), decode_shape(1));
  EXPECT_EQ(graph_shape(decode_step({5, 9, 2})), decode_shape(4));
  EXPECT_EQ(graph_shape(decode_step(std::vector<int32_t>(17, 3))), decode_shape(24));
  EXPECT_EQ(graph_shape(decode_step(std::vector<int32_t>(128, 3))), decode_shape(128));
  EXPECT_EQ(graph_shape(decode_step(std::vector<int32_t>(129, 3))), GraphShape{}) << "past the largest bucket";
  EXPECT_EQ(graph_shape(prefill_step(0, 2)), prefill_shape(16));
  EXPECT_EQ(graph_shape(prefill_step(1500, 32)), prefill_shape(32));
  EXPECT_EQ(graph_shape(prefill_step(7, 33)), prefill_shape(48));
  EXPECT_EQ(graph_shape(prefill_step(0, 256)), prefill_shape(256));
  EXPECT_EQ(graph_shape(prefill_step(0, 257)), GraphShape{}) << "a long prefill";
  ForwardBatch b = decode_step({5, 9});
  b.output = ForwardBatch::Output::kHidden;
  EXPECT_EQ(graph_shape(b), GraphShape{}) << "hidden states of a decode step";
  b = decode_step({5, 9});
  b.output_tokens.pop_back();
  EXPECT_EQ(graph_shape(b), GraphShape{}) << "a sequence without an output row";
  b = decode_step({5, 9});
  b.capture_tokens = {0};
  b.capture_slots = {3};
  EXPECT_EQ(graph_shape(b), GraphShape{}) << "a capture";
  b = decode_step({5, 9});
  b.kv_start = {0, 2};
  EXPECT_EQ(graph_shape(b), GraphShape{}) << "kv_start";
  b = decode_step({5, 9});  // a two-token chunk beside a decode: a mixed batch
  b.token_ids.push_back(1);
  b.positions.push_back(6);
  b.slot_mapping.push_back(b.slot_mapping[0] + 1);
  b.q_indptr = {0, 2, 3};
  b.output_tokens = {1, 2};
  EXPECT_EQ(graph_shape(b), GraphShape{}) << "a mixed batch";
  b.q_indptr = {0, 0, 2};  // two sequences, two tokens, one of them empty: not a decode step
  b.output_tokens = {0, 1};
  EXPECT_EQ(graph_shape(b), GraphShape{});
  b = prefill_step(3, 10);
  b.output_tokens = {4, 9};
  EXPECT_EQ(graph_shape(b), GraphShape{}) << "prompt rows (prompt_logprobs)";
  b.output_tokens = {4};
  EXPECT_EQ(graph_shape(b), GraphShape{}) << "an output row that is not the last token";
  EXPECT_EQ(graph_shape(ForwardBatch{}), GraphShape{});
}

TEST(HostGraphBatch, DecodePaddingKeepsTheRealRowsAndValidates) {
  for (const ForwardBatch::Output out : {ForwardBatch::Output::kArgmax, ForwardBatch::Output::kSample, ForwardBatch::Output::kLogits}) {
    ForwardBatch b = decode_step({5, 0, 17});
    b.output = out;
    b.argmax_vocab = out == ForwardBatch::Output::kLogits ? 0 : 90;
    if (out == ForwardBatch::Output::kSample) b.sampling = {{0.7f, 5, 0.9f, 0.25f}, {0.0f, 0, 1.0f, 0.5f}, {1.2f, 0, 0.8f, 0.75f}};
    const int32_t scratch = static_cast<int32_t>(b.kv_indices.size());  // the first block past the cache's
    ForwardBatch p;
    p.token_ids = {7, 7, 7, 7, 7, 7, 7, 7, 7};  // stale contents are replaced
    pad_for_graph(b, decode_shape(8), scratch, 4, p);
    EXPECT_NO_THROW(p.validate((scratch + graph_scratch_blocks(4)) * 4, 4));
    ASSERT_EQ(p.num_tokens(), 8);
    ASSERT_EQ(p.num_seqs(), 8);
    EXPECT_EQ(graph_shape(p), decode_shape(8)) << "a padded batch is its bucket's shape";
    for (int32_t t = 0; t < 3; ++t) {
      EXPECT_EQ(p.token_ids[t], b.token_ids[t]);
      EXPECT_EQ(p.positions[t], b.positions[t]);
      EXPECT_EQ(p.slot_mapping[t], b.slot_mapping[t]);
    }
    EXPECT_EQ(std::vector<int32_t>(p.kv_indices.begin(), p.kv_indices.begin() + b.kv_indptr.back()), b.kv_indices);
    for (int32_t t = 3; t < 8; ++t) {
      EXPECT_EQ(p.token_ids[t], 0);
      EXPECT_EQ(p.positions[t], 0);
      EXPECT_EQ(p.slot_mapping[t], static_cast<int64_t>(scratch) * 4) << "dummies write the scratch block only";
      EXPECT_EQ(p.kv_indices[p.kv_indptr[t]], scratch);
      EXPECT_EQ(p.kv_indptr[t + 1] - p.kv_indptr[t], 1);
    }
    EXPECT_EQ(p.output, out);
    EXPECT_EQ(p.argmax_vocab, b.argmax_vocab);
    if (out == ForwardBatch::Output::kSample) {
      ASSERT_EQ(p.sampling.size(), 8u);
      EXPECT_EQ(p.sampling[2].top_p, 0.8f);
      for (int32_t t = 3; t < 8; ++t) EXPECT_TRUE(row_is_greedy(p.sampling[static_cast<size_t>(t)]));
    } else {
      EXPECT_TRUE(p.sampling.empty());
    }
  }
  ForwardBatch prefill = decode_step({5});
  prefill.output_tokens.clear();
  ForwardBatch p;
  EXPECT_THROW(pad_for_graph(prefill, decode_shape(4), 9, 4, p), Error) << "only graphable batches are padded";
  EXPECT_THROW(pad_for_graph(decode_step({5, 6, 7}), decode_shape(2), 9, 4, p), Error) << "a bucket below the batch";
  EXPECT_THROW(pad_for_graph(decode_step({5, 6, 7}), prefill_shape(16), 9, 4, p), Error) << "another kind";
}

TEST(HostGraphBatch, PrefillPaddingIsOneDummySequenceInTheScratchBlocks) {
  for (const int32_t n : {2, 13, 32}) {
    for (const int32_t bucket : {32, 48, 256}) {
      ForwardBatch b = prefill_step(1500, n);
      b.output = ForwardBatch::Output::kSample;
      b.sampling = {{0.7f, 5, 0.9f, 0.25f}};
      const int32_t scratch = 10 + b.kv_indptr.back();
      ForwardBatch p;
      pad_for_graph(b, prefill_shape(bucket), scratch, 4, p);
      EXPECT_NO_THROW(p.validate((scratch + graph_scratch_blocks(4)) * 4, 4));
      ASSERT_EQ(p.num_tokens(), bucket);
      ASSERT_EQ(p.num_seqs(), 2);
      EXPECT_EQ(graph_shape(p), GraphShape{}) << "two sequences: not itself a graph shape";
      EXPECT_EQ(p.output_tokens, std::vector<int32_t>{n - 1});
      ASSERT_EQ(p.sampling.size(), 1u);
      EXPECT_EQ(p.sampling[0].top_k, 5);
      EXPECT_EQ(std::vector<int32_t>(p.kv_indices.begin(), p.kv_indices.begin() + b.kv_indptr.back()), b.kv_indices);
      for (int32_t i = 0; i < bucket - n; ++i) {
        EXPECT_EQ(p.positions[n + i], i);
        EXPECT_EQ(p.slot_mapping[n + i], static_cast<int64_t>(scratch) * 4 + i) << "each dummy its own scratch slot";
      }
      EXPECT_EQ(p.kv_indptr[2] - p.kv_indptr[1], (bucket - n + 3) / 4);
    }
  }
  ForwardBatch p;  // a full bucket: an empty dummy sequence
  pad_for_graph(prefill_step(0, 16), prefill_shape(16), 14, 4, p);
  EXPECT_NO_THROW(p.validate((14 + graph_scratch_blocks(4)) * 4, 4));
  EXPECT_EQ(p.num_seqs(), 2);
  EXPECT_EQ(p.q_indptr[2], p.q_indptr[1]);
  EXPECT_EQ(p.kv_indptr[2], p.kv_indptr[1]);
  EXPECT_EQ(graph_scratch_blocks(4), 64);
  EXPECT_EQ(graph_scratch_blocks(7), 37);
}

// An encoder's text (one whole sequence, every token a row of hidden states) replays the encode
// graph of its bucket; its padding is one dummy sequence whose rows come after the real ones.
TEST(HostGraphBatch, EncodeShapesAndPadding) {
  auto encode_step = [](int32_t n) {
    ForwardBatch b = prefill_step(0, n);
    b.output = ForwardBatch::Output::kHidden;
    b.output_tokens.clear();
    for (int32_t t = 0; t < n; ++t) b.output_tokens.push_back(t);
    return b;
  };
  const GraphShape encode16{GraphShape::Kind::kEncode, 16}, encode48{GraphShape::Kind::kEncode, 48};
  EXPECT_EQ(graph_shape(encode_step(2)), encode16);
  EXPECT_EQ(graph_shape(encode_step(33)), encode48);
  EXPECT_EQ(graph_shape(encode_step(1)), GraphShape{}) << "one token";
  EXPECT_EQ(graph_shape(encode_step(257)), GraphShape{}) << "past the largest bucket";
  EXPECT_EQ(graph_shape(encode_step(33), 13), GraphShape{}) << "the dummy's positions past the model's";
  EXPECT_EQ(graph_shape(encode_step(33), 14), encode48) << "dummy positions 0..14";
  ForwardBatch b = encode_step(10);
  b.output_tokens.pop_back();
  EXPECT_EQ(graph_shape(b), GraphShape{}) << "hidden states of some rows only";
  b = prefill_step(3, 10);
  b.output = ForwardBatch::Output::kHidden;
  b.output_tokens = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  EXPECT_EQ(graph_shape(b), GraphShape{}) << "not a whole sequence";
  b = decode_step({0, 0});
  b.output = ForwardBatch::Output::kHidden;
  EXPECT_EQ(graph_shape(b), GraphShape{}) << "two sequences";

  for (const int32_t n : {2, 11, 16}) {
    const ForwardBatch e = encode_step(n);
    ForwardBatch p;
    pad_for_graph(e, encode16, 30, 4, p);
    EXPECT_NO_THROW(p.validate((30 + graph_scratch_blocks(4)) * 4, 4));
    ASSERT_EQ(p.num_tokens(), 16);
    ASSERT_EQ(p.num_seqs(), 2);
    ASSERT_EQ(p.output_tokens.size(), 16u) << "the dummy's rows too, after the real ones";
    for (int32_t t = 0; t < 16; ++t) EXPECT_EQ(p.output_tokens[t], t);
    for (int32_t i = 0; i < 16 - n; ++i) EXPECT_EQ(p.positions[n + i], i);
    EXPECT_EQ(p.output, ForwardBatch::Output::kHidden);
  }
}

// A decode step whose sequences read facts in place replays a graph too: the padding keeps the
// real sequences' facts and gives the dummies none.
TEST(HostGraphBatch, PaddingKeepsFactsReadInPlace) {
  ForwardBatch b = decode_step({40, 9, 70});
  b.fact_indptr = {0, 20, 20, 30};
  b.fact_start = {8, 0, 50};
  for (int32_t i = 0; i < 30; ++i) b.fact_slots.push_back(100 + i);
  ASSERT_NO_THROW(b.validate(1000 * 4, 4));
  EXPECT_EQ(graph_shape(b), decode_shape(4));
  ForwardBatch p;
  pad_for_graph(b, decode_shape(8), static_cast<int32_t>(b.kv_indices.size()), 4, p);
  EXPECT_NO_THROW(p.validate((static_cast<int64_t>(b.kv_indices.size()) + graph_scratch_blocks(4)) * 4, 4));
  EXPECT_EQ(p.fact_slots, b.fact_slots);
  EXPECT_EQ(p.fact_indptr, (std::vector<int32_t>{0, 20, 20, 30, 30, 30, 30, 30, 30}));
  EXPECT_EQ(p.fact_start, (std::vector<int32_t>{8, 0, 50, 0, 0, 0, 0, 0}));
}

// Bidirectional attention is causal attention masked at each sequence's last position: every
// tile of a sequence plans its whole kv range.
TEST(HostStepAttention, BidirectionalMasksAtEachSequencesLastPosition) {
  const ForwardBatch b = planned_batch({{0, 5}, {0, 1}, {0, 130}});
  EXPECT_EQ(cuda::mask_positions(b, false), b.positions);
  const std::vector<int32_t> m = cuda::mask_positions(b, true);
  ASSERT_EQ(m.size(), b.positions.size());
  for (int32_t t = 0; t < 5; ++t) EXPECT_EQ(m[t], 4);
  EXPECT_EQ(m[5], 0);
  for (int32_t t = 6; t < 136; ++t) EXPECT_EQ(m[t], 129);
  const int32_t group = 1, nkv = 12;
  const cuda::StepAttention a = cuda::plan_step_attention(b, m.data(), group, nkv, 132, cuda::AttnKernel::kTiles, false);
  ASSERT_FALSE(a.plan.items.empty());
  for (const AttnWorkItem& it : a.plan.items) {
    const int32_t len = it.kv_seq == 0 ? 5 : it.kv_seq == 1 ? 1 : 130;
    if (it.partial < 0) {
      EXPECT_EQ(it.kv_begin, 0);
      EXPECT_EQ(it.kv_end, len) << "sequence " << it.kv_seq << " rows " << it.row_begin;
    }
    EXPECT_LE(it.kv_end, len);
  }
}

TEST(HostRopeTable, RowsEqualRopeAngles) {
  ModelConfig c;
  c.head_dim = 128;
  c.rope_theta = 500000.0;
  c.max_position_embeddings = 131072;
  c.rope_scaling.type = RopeType::kLlama3;
  c.rope_scaling.factor = 8.0;
  c.rope_scaling.low_freq_factor = 1.0;
  c.rope_scaling.high_freq_factor = 4.0;
  c.rope_scaling.original_max_position_embeddings = 8192;
  const Rope rope(c);
  const int64_t n = 20000, half = 64;
  std::vector<float> cs(static_cast<size_t>(n * half)), sn(cs.size()), c1(half), s1(half);
  RopeTable::build_host(rope, n, cs.data(), sn.data());
  for (int64_t p : {0l, 1l, 8191l, 8192l, 12345l, 19999l}) {
    rope.angles(p, c1.data(), s1.data());
    for (int64_t i = 0; i < half; ++i) {
      ASSERT_EQ(cs[static_cast<size_t>(p * half + i)], c1[static_cast<size_t>(i)]);
      ASSERT_EQ(sn[static_cast<size_t>(p * half + i)], s1[static_cast<size_t>(i)]);
    }
  }
}

}  // namespace
}  // namespace inferscale
