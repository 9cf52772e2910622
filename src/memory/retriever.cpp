#include "memory/retriever.h"

#include <algorithm>

namespace inferscale {

void keep_top_k(std::vector<ScoredFact>& all, size_t k) {
  if (k < all.size()) {
    std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(k), all.end(), ranks_before);
    all.resize(k);
  } else {
    std::sort(all.begin(), all.end(), ranks_before);
  }
}

}  // namespace inferscale
