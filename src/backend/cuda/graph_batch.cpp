#include "backend/cuda/graph_batch.h"

#include <algorithm>

#include "util/check.h"

namespace inferscale {
namespace {

template <size_t N>
int32_t bucket_for(const std::array<int32_t, N>& buckets, int32_t n) {
  return n > buckets.back() ? 0 : *std::lower_bound(buckets.begin(), buckets.end(), n);
}

}  // namespace

GraphShape graph_shape(const ForwardBatch& b, int32_t max_position) {
  const int32_t T = b.num_tokens(), S = b.num_seqs();
  if (T == 0 || !b.capture_tokens.empty() || !b.probes.empty()) return {};
  for (int32_t s = 0; s < S; ++s)
    if (!b.kv_start.empty() && b.kv_start[s] != 0) return {};
  if (b.output == ForwardBatch::Output::kHidden) {  // encode: one whole sequence, every row out
    if (S != 1 || T < 2 || static_cast<int32_t>(b.output_tokens.size()) != T) return {};
    for (int32_t t = 0; t < T; ++t)
      if (b.output_tokens[t] != t || b.positions[t] != t) return {};
    const int32_t bucket = bucket_for(kPrefillGraphBuckets, T);
    if (bucket == 0 || bucket - T - 1 > max_position) return {};
    return GraphShape{GraphShape::Kind::kEncode, bucket};
  }
  if (S == T) {  // one token per sequence, each an output row in order
    if (static_cast<int32_t>(b.output_tokens.size()) != T) return {};
    for (int32_t t = 0; t < T; ++t)
      if (b.q_indptr[t + 1] != t + 1 || b.output_tokens[t] != t) return {};
    const int32_t bucket = bucket_for(kDecodeGraphBuckets, T);
    return bucket == 0 ? GraphShape{} : GraphShape{GraphShape::Kind::kDecode, bucket};
  }
  if (S != 1 || b.output_tokens.size() != 1 || b.output_tokens[0] != T - 1) return {};
  const int32_t bucket = bucket_for(kPrefillGraphBuckets, T);
  return bucket == 0 ? GraphShape{} : GraphShape{GraphShape::Kind::kPrefill, bucket};
}

int32_t graph_scratch_blocks(int32_t block_size) {
  return (kPrefillGraphBuckets.back() + block_size - 1) / block_size;
}

void pad_for_graph(const ForwardBatch& b, GraphShape shape, int32_t scratch_block, int32_t block_size,
                   ForwardBatch& out) {
  const int32_t T = b.num_tokens();
  const GraphShape own = graph_shape(b);
  IS_CHECK(own.kind != GraphShape::Kind::kNone && own.kind == shape.kind && shape.bucket >= own.bucket,
           "pad_for_graph: a batch of {} tokens does not fit bucket {}", T, shape.bucket);
  const bool decode = shape.kind == GraphShape::Kind::kDecode;
  const int32_t n = shape.bucket - T;  // dummy tokens
  auto copy = [](auto& dst, const auto& src) { dst.assign(src.begin(), src.end()); };
  copy(out.token_ids, b.token_ids);
  copy(out.positions, b.positions);
  copy(out.slot_mapping, b.slot_mapping);
  copy(out.q_indptr, b.q_indptr);
  copy(out.kv_indptr, b.kv_indptr);
  copy(out.kv_indices, b.kv_indices);
  copy(out.output_tokens, b.output_tokens);
  out.token_ids.insert(out.token_ids.end(), static_cast<size_t>(n), 0);
  copy(out.token_src, b.token_src);  // the dummies' ids are their own
  if (!b.token_src.empty()) out.token_src.insert(out.token_src.end(), static_cast<size_t>(n), -1);
  for (int32_t i = 0; i < n; ++i) {
    const int32_t pos = decode ? 0 : i;
    out.positions.push_back(pos);
    out.slot_mapping.push_back(static_cast<int64_t>(scratch_block + pos / block_size) * block_size + pos % block_size);
  }
  if (decode) {  // n sequences of one token, each an output row
    for (int32_t i = 0; i < n; ++i) {
      out.q_indptr.push_back(T + i + 1);
      out.kv_indices.push_back(scratch_block);
      out.kv_indptr.push_back(out.kv_indptr.back() + 1);
      out.output_tokens.push_back(T + i);
    }
  } else {  // one sequence of n tokens (maybe none); encode: each an output row
    out.q_indptr.push_back(T + n);
    if (shape.kind == GraphShape::Kind::kEncode)
      for (int32_t i = 0; i < n; ++i) out.output_tokens.push_back(T + i);
    const int32_t blocks = (n + block_size - 1) / block_size;
    for (int32_t i = 0; i < blocks; ++i) out.kv_indices.push_back(scratch_block + i);
    out.kv_indptr.push_back(out.kv_indptr.back() + blocks);
  }
  out.kv_start.clear();
  // Facts read in place stay the real sequences'; dummies have none.
  copy(out.fact_indptr, b.fact_indptr);
  copy(out.fact_start, b.fact_start);
  copy(out.fact_slots, b.fact_slots);
  if (!b.fact_indptr.empty())
    while (out.fact_start.size() + 1 < out.q_indptr.size()) {
      out.fact_start.push_back(0);
      out.fact_indptr.push_back(out.fact_indptr.back());
    }
  out.output = b.output;
  out.argmax_vocab = b.argmax_vocab;
  copy(out.sampling, b.sampling);
  if (b.output == ForwardBatch::Output::kSample)
    out.sampling.resize(out.output_tokens.size(), RowSampling{});
  out.capture_tokens.clear();
  out.capture_slots.clear();
}

}  // namespace inferscale
