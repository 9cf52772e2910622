// An independent statement of model/sampling.h's rule for tests: the probability of every id,
// computed by sorting (not by the thresholds and the id-order walk the implementations use).
#pragma once
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "model/sampling.h"

namespace inferscale::test {

inline std::vector<double> sampling_probabilities(const std::vector<float>& logits, const RowSampling& s) {
  const size_t n = logits.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return logits[a] > logits[b]; });
  std::vector<double> p(n, 0.0);
  if (row_is_greedy(s)) {
    p[order[0]] = 1.0;
    return p;
  }
  // top-k: the first k by logit, plus every id tied with the k-th.
  size_t keep = n;
  if (s.top_k > 0 && static_cast<size_t>(s.top_k) < n) {
    keep = static_cast<size_t>(s.top_k);
    while (keep < n && logits[order[keep]] == logits[order[keep - 1]]) ++keep;
  }
  // min-p: the ids at most min_gap below the largest logit (a prefix of the order).
  const float mf = logits[order[0]];
  while (keep > 1 && logits[order[keep - 1]] - mf < s.min_gap) --keep;
  const double m = mf;
  std::vector<double> w(keep);
  for (size_t i = 0; i < keep; ++i) w[i] = std::exp((logits[order[i]] - m) / s.temperature);
  const double total = std::accumulate(w.begin(), w.end(), 0.0);
  if (s.top_p < 1.0f) {  // the smallest prefix reaching top_p, extended over ties
    double cum = 0;
    size_t j = 0;
    while (j < keep) {
      cum += w[j++];
      if (cum >= s.top_p * total) break;
    }
    while (j < keep && logits[order[j]] == logits[order[j - 1]]) ++j;
    keep = j;
  }
  const double kept = std::accumulate(w.begin(), w.begin() + static_cast<std::ptrdiff_t>(keep), 0.0);
  for (size_t i = 0; i < keep; ++i) p[order[i]] = w[i] / kept;
  return p;
}

}  // namespace inferscale::test
