#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "util/check.h"

namespace inferscale {

int32_t sample_token(std::span<const float> logits, const SamplingParams& p, std::mt19937_64& rng) {
  IS_CHECK(!logits.empty(), "empty logits");
  const int32_t V = static_cast<int32_t>(logits.size());
  if (is_greedy(p)) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  // Candidates sorted by logit, descending (stable: lower index first among equals).
  std::vector<int32_t> idx(static_cast<size_t>(V));
  std::iota(idx.begin(), idx.end(), 0);
  auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  int32_t keep = V;
  if (p.top_k > 0 && p.top_k < V) {
    keep = p.top_k;
    std::partial_sort(idx.begin(), idx.begin() + keep, idx.end(), by_logit);
  } else {
    std::sort(idx.begin(), idx.end(), by_logit);
  }
  std::vector<double> prob(static_cast<size_t>(keep));
  const double mx = logits[idx[0]];
  double sum = 0;
  for (int32_t i = 0; i < keep; ++i) {
    prob[static_cast<size_t>(i)] = std::exp((logits[idx[static_cast<size_t>(i)]] - mx) / p.temperature);
    sum += prob[static_cast<size_t>(i)];
  }
  if (p.top_p < 1.0f) {
    // Smallest prefix whose mass reaches top_p (at least one token).
    double cum = 0;
    int32_t n = 0;
    while (n < keep) {
      cum += prob[static_cast<size_t>(n)] / sum;
      ++n;
      if (cum >= p.top_p) break;
    }
    keep = n;
    sum = std::accumulate(prob.begin(), prob.begin() + keep, 0.0);
  }
  std::uniform_real_distribution<double> u(0.0, sum);
  double r = u(rng);
  for (int32_t i = 0; i < keep; ++i) {
    r -= prob[static_cast<size_t>(i)];
    if (r <= 0) return idx[static_cast<size_t>(i)];
  }
  return idx[static_cast<size_t>(keep - 1)];
}

}  // namespace inferscale
