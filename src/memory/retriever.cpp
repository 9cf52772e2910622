#include "memory/retriever.h"

#include <algorithm>

#include "util/check.h"

namespace inferscale {

void keep_top_k(std::vector<ScoredFact>& all, size_t k) {
  if (k < all.size()) {
    std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(k), all.end(), ranks_before);
    all.resize(k);
  } else {
    std::sort(all.begin(), all.end(), ranks_before);
  }
}

std::vector<ScoredFact> Retriever::search_vector(std::string_view, std::string_view, std::span<const float>,
                                                 size_t) const {
  IS_THROW(kUnsupported, "retriever '{}' takes text queries, not query vectors", name());
}

}  // namespace inferscale
