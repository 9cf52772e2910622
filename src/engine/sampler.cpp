#include "engine/sampler.h"

#include "util/check.h"

namespace inferscale {

RowSampling row_sampling(const SamplingParams& p, std::mt19937_64& rng) {
  RowSampling s;
  if (is_greedy(p)) return s;
  s.temperature = p.temperature;
  s.top_k = p.top_k;
  s.top_p = p.top_p;
  s.min_gap = min_p_gap(p.temperature, p.min_p);
  s.u = draw_uniform(rng);
  return s;
}

int32_t sample_token(std::span<const float> logits, const SamplingParams& p, std::mt19937_64& rng) {
  IS_CHECK(!logits.empty(), "empty logits");
  return sample_row(logits.data(), static_cast<int64_t>(logits.size()), row_sampling(p, rng));
}

}  // namespace inferscale
