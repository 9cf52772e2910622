#include "backend/cuda/step_attention.h"

#include <algorithm>
#include <vector>

#include "util/check.h"

namespace inferscale::cuda {

std::vector<int32_t> mask_positions(const ForwardBatch& b, bool bidirectional) {
  if (!bidirectional) return b.positions;
  std::vector<int32_t> m(b.positions.size());
  for (int32_t s = 0; s < b.num_seqs(); ++s) {
    const int32_t first = b.q_indptr[s], last = b.q_indptr[s + 1] - 1;
    for (int32_t t = first; t <= last; ++t) m[static_cast<size_t>(t)] = b.positions[static_cast<size_t>(last)];
  }
  return m;
}

StepAttention plan_step_attention(const ForwardBatch& b, const int32_t* mask_positions, int32_t group,
                                  int32_t num_kv_heads, int32_t num_sms, AttnKernel decode_kernel, bool graph) {
  const int32_t S = b.num_seqs();
  const int64_t T = b.num_tokens();
  std::vector<int32_t> decode_seqs, tile_seqs;
  for (int32_t s = 0; s < S; ++s) (b.q_indptr[s + 1] - b.q_indptr[s] == 1 ? decode_seqs : tile_seqs).push_back(s);
  StepAttention a;
  a.single_token = tile_seqs.empty();
  a.split = !a.single_token && !graph && !decode_seqs.empty() && decode_kernel != AttnKernel::kTiles;
  a.kernel = a.single_token ? decode_kernel : AttnKernel::kTiles;
  // A split's tiles keep the prefill split rule: the decode rule's finer pieces cost a mixed step
  // 0.3 ms at 1-4 questions beside 96-99 decodes and gained ~0.2-0.4 only at 16 (bench_cuda_serving (d)).
  a.options = attention_plan_options(a.kernel, a.single_token, group, num_kv_heads, num_sms);
  const int32_t* kv_start = b.kv_start.empty() ? nullptr : b.kv_start.data();
  a.plan = plan_attention(b.q_indptr.data(), S, mask_positions, kv_start, group, a.options, a.split ? &tile_seqs : nullptr);
  if (a.split) {
    a.decode_kernel = decode_kernel;
    const AttnPlanOptions dpo = attention_plan_options(decode_kernel, true, group, num_kv_heads, num_sms);
    a.decode_plan = plan_attention(b.q_indptr.data(), S, mask_positions, kv_start, group, dpo, &decode_seqs);
  }
  a.capacity = {static_cast<int32_t>(a.plan.items.size()), a.plan.num_partials, static_cast<int32_t>(a.plan.merges.size())};
  a.merge_rows = a.plan.max_merge_rows;
  if (graph) {
    // T tokens in S sequences make at most T * group / rows_per_tile + S tiles; a one-token tile
    // merges `group` rows. The plan's own counts go to the device with it.
    a.capacity = plan_capacity(static_cast<int32_t>(T * group / a.options.rows_per_tile) + S, a.options);
    IS_CHECK(static_cast<int32_t>(a.plan.items.size()) <= a.capacity.items && a.plan.num_partials <= a.capacity.partials &&
                 static_cast<int32_t>(a.plan.merges.size()) <= a.capacity.merges,
             "attention plan of {} items over its capacity {}", a.plan.items.size(), a.capacity.items);
    a.merge_rows = a.single_token ? std::min(group, a.options.rows_per_tile) : a.options.rows_per_tile;
  }
  return a;
}

}  // namespace inferscale::cuda
