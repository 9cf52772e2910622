#include "model/sampling.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "util/check.h"

namespace inferscale {

void check_row_sampling(const RowSampling& s) {
  IS_CHECK(std::isfinite(s.temperature), "sampling temperature {} is not finite", s.temperature);
  IS_CHECK(s.top_p > 0.0f && s.top_p <= 1.0f, "sampling top_p {} outside (0, 1]", s.top_p);
  IS_CHECK(s.u >= 0.0f && s.u < 1.0f, "sampling draw {} outside [0, 1)", s.u);
  IS_CHECK(s.min_gap <= 0.0f, "sampling min_gap {} is not <= 0", s.min_gap);
}

float min_p_gap(float temperature, float min_p) {
  if (min_p <= 0.0f) return -INFINITY;
  return temperature * std::log(min_p);
}

int32_t sample_row(const float* logits, int64_t n, const RowSampling& s) {
  IS_CHECK(n >= 1, "sample_row needs at least one id");
  const float* end = logits + n;
  const float* top = std::max_element(logits, end);  // the first maximum: greedy's id on ties
  if (row_is_greedy(s)) return static_cast<int32_t>(top - logits);
  const float m = *top;
  // 1. The top-k threshold: the k-th largest logit; min-p's distance below m.
  float lo = -INFINITY;
  if (s.top_k > 0 && s.top_k < n) {
    std::vector<float> v(logits, end);
    std::nth_element(v.begin(), v.begin() + (s.top_k - 1), v.end(), std::greater<float>());
    lo = v[static_cast<size_t>(s.top_k - 1)];
  }
  const double inv_t = 1.0 / s.temperature;
  auto weight = [&](float l) { return std::exp((static_cast<double>(l) - m) * inv_t); };
  auto keeps = [&](float l) { return l >= lo && l - m >= s.min_gap; };  // lo moves in step 3
  // 3. The nucleus threshold: walk the kept logits from the largest until the mass reaches top_p.
  if (s.top_p < 1.0f) {
    std::vector<float> kept;
    double total = 0;
    for (const float* p = logits; p != end; ++p)
      if (keeps(*p)) {
        kept.push_back(*p);
        total += weight(*p);
      }
    std::sort(kept.begin(), kept.end(), std::greater<float>());
    const double target = static_cast<double>(s.top_p) * total;
    double cum = 0;
    for (float l : kept) {
      cum += weight(l);
      if (cum >= target) {
        lo = l;
        break;
      }
    }
  }
  // 4. The draw, in id order.
  double W = 0;
  int32_t last = -1;
  for (int64_t i = 0; i < n; ++i)
    if (keeps(logits[i])) {
      W += weight(logits[i]);
      last = static_cast<int32_t>(i);
    }
  const double r = static_cast<double>(s.u) * W;
  double cum = 0;
  for (int64_t i = 0; i < n; ++i)
    if (keeps(logits[i])) {
      cum += weight(logits[i]);
      if (cum > r) return static_cast<int32_t>(i);
    }
  return last;
}

}  // namespace inferscale
