// Host logic of the CUDA backend that needs no GPU: the attention planner and the RoPE table.
// Named Host* so a GPU-less machine can run them: test_cuda --gtest_filter='Host*'.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <vector>

#include "backend/cuda/attention_plan.h"
#include "backend/cuda/rope_table.h"
#include "model/config.h"

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
  AttnPlan plan(int32_t group, const AttnPlanOptions& o) const {
    return plan_attention(q_indptr.data(), seqs(), positions.data(), kv_start.data(), group, o);
  }
};

// Every (sequence, packed row, kv entry <= its position) is covered exactly once across the
// items of each tile, items of a split tile are referenced by exactly one merge, and no item
// reaches past its tile's last position.
void check_plan(const Batch& b, int32_t group, const AttnPlanOptions& o, const AttnPlan& p) {
  ASSERT_EQ(p.rows_per_tile, o.rows_per_tile);
  std::map<std::pair<int32_t, int32_t>, std::vector<std::pair<int32_t, int32_t>>> tiles;  // (seq,row_begin) -> kv ranges
  std::vector<int32_t> partial_used(static_cast<size_t>(p.num_partials), 0);
  for (const AttnWorkItem& it : p.items) {
    ASSERT_GE(it.kv_seq, 0);
    ASSERT_LT(it.kv_seq, b.seqs());
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
