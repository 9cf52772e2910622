// Runs one sequence through a backend's paged cache the way the engine does, for the forward
// golden tests: a first chunk, then the rest in chunks of `chunk` (1 = decode steps).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/backend.h"

namespace inferscale::testing {

// ||got - ref||_2 / ||ref||_2 in double (the sizes must match).
inline double rel_l2(const std::vector<float>& got, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = static_cast<double>(got[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return std::sqrt(num / den);
}

// Feeds `tokens` as one sequence: [0, first) in one forward, then chunks of `chunk`; returns the
// logits rows ([vocab] each) at the token indices `want` (ascending).
inline std::vector<std::vector<float>> run_sequence(Backend& be, const std::vector<int32_t>& tokens, int32_t first,
                                                    int32_t chunk, const std::vector<int32_t>& want) {
  const int32_t bs = be.block_size();
  const int32_t n = static_cast<int32_t>(tokens.size());
  std::vector<int32_t> blocks;
  for (int32_t b = 0; b * bs < n; ++b) blocks.push_back(b);
  std::vector<std::vector<float>> rows;
  size_t w = 0;
  const int64_t V = be.config().vocab_size;
  for (int32_t s = 0; s < n;) {
    ForwardBatch fb;
    const int32_t e = std::min(n, s + (s == 0 ? first : chunk));
    for (int32_t i = s; i < e; ++i) {
      fb.token_ids.push_back(tokens[static_cast<size_t>(i)]);
      fb.positions.push_back(i);
      fb.slot_mapping.push_back(static_cast<int64_t>(blocks[static_cast<size_t>(i / bs)]) * bs + i % bs);
      if (w < want.size() && want[w] == i) {
        fb.output_tokens.push_back(i - s);
        ++w;
      }
    }
    fb.q_indptr = {0, e - s};
    fb.kv_indices = blocks;
    fb.kv_indptr = {0, static_cast<int32_t>(blocks.size())};
    std::vector<float> out;
    be.forward(fb, out);
    for (size_t r = 0; r < fb.output_tokens.size(); ++r)
      rows.emplace_back(out.begin() + static_cast<int64_t>(r) * V, out.begin() + static_cast<int64_t>(r + 1) * V);
    s = e;
  }
  EXPECT_EQ(w, want.size());
  return rows;
}

}  // namespace inferscale::testing
