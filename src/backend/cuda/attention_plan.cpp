#include "backend/cuda/attention_plan.h"

#include <algorithm>

#include "util/check.h"

namespace inferscale {

AttnPlan plan_attention(const int32_t* q_indptr, int32_t num_seqs, const int32_t* positions, const int32_t* kv_start,
                        int32_t group, const AttnPlanOptions& o, const std::vector<int32_t>* only) {
  IS_CHECK(group >= 1 && o.rows_per_tile >= 1 && o.kv_granule >= 1 && o.num_kv_heads >= 1, "bad plan options");
  AttnPlan plan;
  plan.rows_per_tile = o.rows_per_tile;

  // Pass 1: tiles and their kv lengths.
  struct Tile {
    int32_t seq, q_start, row_begin, row_end, kv_begin, kv_len;  // kv entries [kv_begin, kv_len)
  };
  std::vector<Tile> tiles;
  int64_t total_kv = 0;
  const int32_t planned = only != nullptr ? static_cast<int32_t>(only->size()) : num_seqs;
  for (int32_t i = 0; i < planned; ++i) {
    const int32_t s = only != nullptr ? (*only)[static_cast<size_t>(i)] : i;
    IS_CHECK(s >= 0 && s < num_seqs, "plan_attention: sequence {} of {}", s, num_seqs);
    const int32_t q0 = q_indptr[s];
    const int32_t rows = (q_indptr[s + 1] - q0) * group;
    const int32_t kv0 = kv_start != nullptr ? kv_start[s] : 0;
    for (int32_t r = 0; r < rows; r += o.rows_per_tile) {
      const int32_t r_end = std::min(rows, r + o.rows_per_tile);
      const int32_t last_tok = q0 + (r_end - 1) / group;
      const int32_t kv_len = positions[last_tok] + 1;
      tiles.push_back({s, q0, r, r_end, kv0, kv_len});
      total_kv += kv_len - kv0;
    }
  }

  // Split length: only when the tiles leave the GPU under-filled. Aim at num_sms * ctas_per_sm
  // CTAs over all kv heads; pieces are multiples of kv_granule and at least min_split_len.
  int64_t split_len = INT64_MAX;
  const int64_t target = static_cast<int64_t>(o.num_sms) * o.ctas_per_sm;
  if (static_cast<int64_t>(tiles.size()) * o.num_kv_heads < target && total_kv > 0) {
    const int64_t per_cta = (total_kv * o.num_kv_heads + target - 1) / target;
    split_len = std::max<int64_t>(per_cta, o.min_split_len);
    split_len = (split_len + o.kv_granule - 1) / o.kv_granule * o.kv_granule;
  }

  for (const Tile& t : tiles) {
    const int64_t span = t.kv_len - t.kv_begin;
    int64_t len = split_len;
    int64_t n = (span + len - 1) / len;
    if (n > o.max_splits) {  // too many pieces: lengthen them
      len = (span + o.max_splits - 1) / o.max_splits;
      len = (len + o.kv_granule - 1) / o.kv_granule * o.kv_granule;
      n = (span + len - 1) / len;
    }
    if (n <= 1) {
      plan.items.push_back({t.q_start, t.seq, t.row_begin, t.row_end, t.kv_begin, t.kv_len, -1});
      continue;
    }
    plan.merges.push_back({t.q_start, t.row_begin, t.row_end, plan.num_partials, static_cast<int32_t>(n)});
    plan.max_merge_rows = std::max(plan.max_merge_rows, t.row_end - t.row_begin);
    for (int64_t i = 0; i < n; ++i) {
      const int32_t b = static_cast<int32_t>(t.kv_begin + i * len);
      const int32_t e = static_cast<int32_t>(std::min<int64_t>(t.kv_len, t.kv_begin + (i + 1) * len));
      plan.items.push_back({t.q_start, t.seq, t.row_begin, t.row_end, b, e, plan.num_partials++});
    }
  }
  // Longest items first: the long tail of a causal prefill starts early (a cheap LPT schedule).
  // (Run 22 tried lengths in steps of 256, keeping a sequence's tiles adjacent for L2: no gain in a
  // burst's prefill, and a mixed step's question tiles then started after the decodes' and ran late.)
  std::stable_sort(plan.items.begin(), plan.items.end(), [](const AttnWorkItem& a, const AttnWorkItem& b) {
    return (a.kv_end - a.kv_begin) > (b.kv_end - b.kv_begin);
  });
  return plan;
}

AttnPlanCapacity plan_capacity(int32_t num_tiles, const AttnPlanOptions& o) {
  const int32_t pieces = num_tiles + o.num_sms * o.ctas_per_sm / o.num_kv_heads;
  return AttnPlanCapacity{pieces, pieces, num_tiles};
}

}  // namespace inferscale
