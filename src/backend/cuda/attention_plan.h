// Host-side planning of paged attention (FlashInfer's plan/run split): built once per forward,
// used by every layer. Pure host code, tested on the CPU.
//
// Query rows are packed per sequence and kv head: the `group` query heads that share one kv head
// are rows of one tile, so K/V are read once per group (GQA).
//
//   packed row r of sequence s  ->  token q_indptr[s] + r / group,  query head kvh * group + r % group
//
//   seq s, group 4, 3 tokens:  rows  t0g0 t0g1 t0g2 t0g3 t1g0 ... t2g3   (12 rows)
//
// A tile is `rows_per_tile` consecutive packed rows of one sequence. Its kv range is
// [kv_start[s], positions[last token of the tile]] (positions increase inside a sequence;
// kv_start is ForwardBatch::kv_start, null = all 0). When the tiles
// alone cannot fill the GPU, a tile's kv range is split into pieces that run as separate work
// items writing partial results (output normalised by its own softmax sum, plus log2-sum-exp);
// a merge pass combines them (flash-decoding).
#pragma once
#include <cstdint>
#include <vector>

namespace inferscale {

// One CTA of the attention kernels (for each kv head: work_item_grid).
struct AttnWorkItem {
  int32_t q_start;    // first token (index into the batch) of the item's sequence
  int32_t kv_seq;     // sequence index: block table at kv_indptr[kv_seq]
  int32_t row_begin;  // packed rows [row_begin, row_end) of that sequence
  int32_t row_end;
  int32_t kv_begin;   // kv entries [kv_begin, kv_end) of this piece (the first starts at kv_start)
  int32_t kv_end;
  int32_t partial;    // -1: write the final output; else partial slot (see AttnPlan)
  int32_t pad = 0;
};

// Combines the partial slots [first_partial, first_partial + num_splits) of one tile.
struct AttnMergeItem {
  int32_t q_start;
  int32_t row_begin;
  int32_t row_end;
  int32_t first_partial;
  int32_t num_splits;
  int32_t pad[3] = {0, 0, 0};
};

struct AttnPlanOptions {
  int32_t rows_per_tile = 64;   // packed rows of one CTA
  int32_t kv_granule = 64;      // split boundaries are multiples of this (the kernel's kv chunk)
  int32_t min_split_len = 256;  // never split a tile into pieces shorter than this
  int32_t max_splits = 32;
  int32_t num_kv_heads = 1;
  int32_t num_sms = 132;
  int32_t ctas_per_sm = 2;      // split only while tiles * kv_heads < num_sms * ctas_per_sm
};

struct AttnPlan {
  std::vector<AttnWorkItem> items;
  std::vector<AttnMergeItem> merges;
  int32_t num_partials = 0;  // partial slots: o [num_partials, num_kv_heads, rows_per_tile, head_dim] f32,
                             //                lse [num_partials, num_kv_heads, rows_per_tile] f32
  int32_t rows_per_tile = 0;
  int32_t max_merge_rows = 0;  // most rows of any merged tile (sizes the merge grid)
};

// q_indptr: [S + 1]; positions: [T] (increasing inside each sequence); kv_start: [S] or null.
// `only`: the sequences (indices into q_indptr, increasing) to plan, null = all of them; items
// keep the batch's sequence and token indices, so plans of disjoint sets write disjoint output
// rows (a mixed batch's decode sequences on a decode kernel, the others on the tiles).
AttnPlan plan_attention(const int32_t* q_indptr, int32_t num_seqs, const int32_t* positions, const int32_t* kv_start,
                        int32_t group, const AttnPlanOptions& opts, const std::vector<int32_t>* only = nullptr);

// Upper bounds of a plan over `num_tiles` tiles, whatever the kv lengths (CUDA graphs size their
// launches and buffers with them): a split piece is at least total_kv * num_kv_heads / target
// entries long (target = num_sms * ctas_per_sm), so the pieces number at most
// num_tiles + target / num_kv_heads.
struct AttnPlanCapacity {
  int32_t items = 0, partials = 0, merges = 0;
};
AttnPlanCapacity plan_capacity(int32_t num_tiles, const AttnPlanOptions& opts);

}  // namespace inferscale
