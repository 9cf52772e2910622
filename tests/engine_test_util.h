// Requests for engine tests: greedy sampling that runs to max_tokens, prompts of byte tokens, and
// hand-made forward batches.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "engine/request.h"
#include "model/forward_batch.h"

namespace inferscale::test {

// Greedy, ignoring EOS: exactly `max_tokens` tokens unless a stop ends them.
inline SamplingParams greedy(int32_t max_tokens) {
  SamplingParams s;
  s.temperature = 0;
  s.max_tokens = max_tokens;
  s.ignore_eos = true;
  return s;
}

// `n` byte tokens (0..255), the same for the same seed.
inline std::vector<int32_t> byte_prompt(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (auto& t : p) t = static_cast<int32_t>(rng() % 256);
  return p;
}

// One sequence a row of `ids`, its tokens from position first[s] on, in cache block s (block size
// 16); each sequence's last token is an output row.
inline ForwardBatch seqs_in_blocks(const std::vector<std::vector<int32_t>>& ids, const std::vector<int32_t>& first) {
  ForwardBatch b;
  b.q_indptr = {0};
  b.kv_indptr = {0};
  for (size_t s = 0; s < ids.size(); ++s) {
    for (size_t i = 0; i < ids[s].size(); ++i) {
      const int32_t pos = first[s] + static_cast<int32_t>(i);
      b.token_ids.push_back(ids[s][i]);
      b.positions.push_back(pos);
      b.slot_mapping.push_back(static_cast<int64_t>(s) * 16 + pos);
    }
    b.q_indptr.push_back(b.num_tokens());
    b.kv_indices.push_back(static_cast<int32_t>(s));
    b.kv_indptr.push_back(static_cast<int32_t>(s) + 1);
    b.output_tokens.push_back(b.num_tokens() - 1);
  }
  return b;
}

}  // namespace inferscale::test
