#include <algorithm>

#include "model/forward_batch.h"
#include "util/check.h"

namespace inferscale {

void ForwardBatch::validate(int64_t num_cache_slots, int32_t block_size) const {
  const size_t T = token_ids.size();
  IS_CHECK(positions.size() == T && slot_mapping.size() == T, "per-token arrays differ in size");
  IS_CHECK(q_indptr.size() >= 2 && kv_indptr.size() == q_indptr.size(), "need q/kv indptr of S+1 entries");
  IS_CHECK(kv_start.empty() || kv_start.size() + 1 == q_indptr.size(), "kv_start needs one entry per sequence");
  IS_CHECK(token_src.empty() || token_src.size() == T, "token_src needs one entry per token");
  for (const int32_t r : token_src) IS_CHECK(r >= -1, "token_src row {} is negative", r);
  IS_CHECK(q_indptr.front() == 0 && static_cast<size_t>(q_indptr.back()) == T, "q_indptr must span all tokens");
  IS_CHECK(kv_indptr.front() == 0 && static_cast<size_t>(kv_indptr.back()) == kv_indices.size(), "kv_indptr mismatch");
  const bool facts = !fact_indptr.empty();
  IS_CHECK(!facts || (fact_indptr.size() == q_indptr.size() && fact_start.size() + 1 == q_indptr.size() &&
                      fact_indptr.front() == 0 && static_cast<size_t>(fact_indptr.back()) == fact_slots.size()),
           "in-place fact arrays do not match the sequences");
  for (int32_t s = 0; s < num_seqs(); ++s) {
    IS_CHECK(q_indptr[s] <= q_indptr[s + 1] && kv_indptr[s] <= kv_indptr[s + 1], "indptr not monotone at seq {}", s);
    const int64_t cap = static_cast<int64_t>(kv_indptr[s + 1] - kv_indptr[s]) * block_size;
    const int32_t start = kv_start.empty() ? 0 : kv_start[static_cast<size_t>(s)];
    const auto [fa, fb] = fact_range(s);
    IS_CHECK(fa <= fb && (fa == fb || (fa >= start && fb <= cap)), "seq {}: in-place facts [{}, {}) outside its entries", s, fa, fb);
    for (int32_t i = kv_indptr[s]; i < kv_indptr[s + 1]; ++i) {
      if (kv_indices[i] != kNoBlock) continue;
      const int64_t first = static_cast<int64_t>(i - kv_indptr[s]) * block_size;
      IS_CHECK(first >= fa && first + block_size <= fb, "seq {}: block {} has no cache block but holds entries outside its facts", s,
               i - kv_indptr[s]);
    }
    for (int32_t t = q_indptr[s]; t < q_indptr[s + 1]; ++t) {
      IS_CHECK(positions[t] >= start && positions[t] < cap, "token {} position {} outside its {} cache entries", t,
               positions[t], cap);
      IS_CHECK(positions[t] < fa || positions[t] >= fb, "token {} at position {} inside its in-place facts", t, positions[t]);
      IS_CHECK(t == q_indptr[s] || positions[t] > positions[t - 1], "positions of seq {} not increasing", s);
      // The token's own slot is the block-table entry at its position.
      const int64_t want = static_cast<int64_t>(kv_indices[kv_indptr[s] + positions[t] / block_size]) * block_size +
                           positions[t] % block_size;
      IS_CHECK(slot_mapping[t] == want, "token {} slot {} != block table slot {}", t, slot_mapping[t], want);
    }
  }
  for (int32_t b : kv_indices)
    IS_CHECK(b == kNoBlock || (b >= 0 && static_cast<int64_t>(b) * block_size < num_cache_slots), "block {} out of range", b);
  for (int32_t o : output_tokens) IS_CHECK(o >= 0 && static_cast<size_t>(o) < T, "output token {} out of range", o);
  IS_CHECK(capture_tokens.size() == capture_slots.size(), "capture arrays differ in size");
  IS_CHECK(output != Output::kSample || sampling.size() == output_tokens.size(), "kSample needs one RowSampling per output row");
  for (const RowSampling& r : sampling) check_row_sampling(r);
  for (int32_t c : capture_tokens) IS_CHECK(c >= 0 && static_cast<size_t>(c) < T, "capture token {} out of range", c);
  for (const Probe& p : probes) {
    IS_CHECK(p.seq >= 0 && p.seq < num_seqs(), "probe of sequence {} out of range", p.seq);
    IS_CHECK(p.first_layer >= 0, "probe's first layer {}", p.first_layer);
    IS_CHECK(p.first_token >= q_indptr[p.seq] && p.first_token < q_indptr[p.seq + 1], "probe's first token {} outside seq {}",
             p.first_token, p.seq);
    const int32_t start = kv_start.empty() ? 0 : kv_start[static_cast<size_t>(p.seq)];
    IS_CHECK(p.key_begin >= start && p.key_begin <= p.key_end && p.key_end <= positions[p.first_token],
             "probe keys [{}, {}) of seq {} not before its rows", p.key_begin, p.key_end, p.seq);
    const auto [fa, fb] = fact_range(p.seq);
    IS_CHECK(fa == fb, "probe of seq {}, which reads facts in place", p.seq);
  }
}

void check_forward_batch(const ForwardBatch& b, int64_t num_cache_slots, int32_t block_size, int64_t num_pool_slots,
                         int64_t vocab_size) {
  b.validate(num_cache_slots, block_size);
  for (int64_t s : b.capture_slots) IS_CHECK(s >= 0 && s < num_pool_slots, "pool slot {} out of range", s);
  // The fact slots' bounds in one pass without a branch an element (~250,000 slots a decode step
  // at 100 requests, k = 50).
  int32_t lo = 0, hi = 0;
  for (const int32_t s : b.fact_slots) {
    lo = std::min(lo, s);
    hi = std::max(hi, s);
  }
  IS_CHECK(b.fact_slots.empty() || (lo >= 0 && hi < num_pool_slots), "in-place fact slots [{}, {}] out of the pool's {}", lo,
           hi, num_pool_slots);
  for (int32_t id : b.token_ids)
    IS_REQUIRE(id >= 0 && id < vocab_size, kInvalidInput, "token id {} outside the vocabulary of {}", id, vocab_size);
}

void feed_tokens(ForwardBatch& b, const std::vector<int32_t>& prev_ids) {
  for (size_t t = 0; t < b.token_src.size(); ++t) {
    const int32_t r = b.token_src[t];
    if (r < 0) continue;
    IS_CHECK(static_cast<size_t>(r) < prev_ids.size(), "token {} is fed row {} of a forward with {} ids", t, r,
             prev_ids.size());
    b.token_ids[t] = prev_ids[static_cast<size_t>(r)];
  }
  b.token_src.clear();
}

int64_t argmax_span(const ForwardBatch& b, int64_t vocab) {
  IS_CHECK(b.argmax_vocab >= 0 && b.argmax_vocab <= vocab, "argmax_vocab {} outside [0, {}]", b.argmax_vocab, vocab);
  return b.argmax_vocab == 0 ? vocab : b.argmax_vocab;
}

}  // namespace inferscale
