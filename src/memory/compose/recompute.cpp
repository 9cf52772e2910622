#include "memory/compose/recompute.h"

#include <algorithm>
#include <cmath>

#include "util/check.h"

namespace inferscale {

std::vector<uint8_t> fact_recompute_mask(const std::vector<int32_t>& fact_offsets, int32_t first, int32_t last) {
  IS_CHECK(!fact_offsets.empty(), "a span's fact offsets start at 0 and end at its length");
  std::vector<uint8_t> mask(static_cast<size_t>(fact_offsets.back()), 0);
  const size_t n = fact_offsets.size() - 1;
  for (size_t f = 0; f < n; ++f) {
    const int32_t len = fact_offsets[f + 1] - fact_offsets[f];
    const int32_t upto = f + static_cast<size_t>(std::max(last, 0)) >= n ? len : std::min(len, std::max(first, 0));
    for (int32_t i = 0; i < upto; ++i) mask[static_cast<size_t>(fact_offsets[f] + i)] = 1;
  }
  return mask;
}

int32_t add_attention_choice(std::vector<uint8_t>& mask, const std::vector<float>& mass, double fraction) {
  IS_CHECK(mass.size() == mask.size(), "probe weights for {} tokens, a span of {}", mass.size(), mask.size());
  IS_CHECK(fraction >= 0.0 && fraction <= 1.0, "attention recompute fraction {} outside [0, 1]", fraction);
  std::vector<int32_t> free;
  for (size_t i = 0; i < mask.size(); ++i)
    if (mask[i] == 0) free.push_back(static_cast<int32_t>(i));
  const size_t budget = std::min(free.size(), static_cast<size_t>(std::floor(fraction * static_cast<double>(mask.size()) + 1e-9)));
  std::stable_sort(free.begin(), free.end(), [&](int32_t a, int32_t b) { return mass[static_cast<size_t>(a)] > mass[static_cast<size_t>(b)]; });
  for (size_t i = 0; i < budget; ++i) mask[static_cast<size_t>(free[i])] = 1;
  return static_cast<int32_t>(budget);
}

}  // namespace inferscale
