#include "memory/retrieval/retriever.h"

#include <algorithm>

#include "memory/store/fact_store.h"
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

std::vector<FactHit> fetch_hits(const FactStore& store, std::string_view tenant, std::string_view user,
                                std::span<const ScoredFact> hits) {
  std::vector<int64_t> ids;
  for (const ScoredFact& h : hits) ids.push_back(h.id);
  std::vector<FactHit> out;
  size_t h = 0;  // the facts keep the hits' order: walk both
  for (Fact& f : store.get_existing(tenant, user, ids)) {
    while (hits[h].id != f.id) ++h;
    out.push_back(FactHit{std::move(f), hits[h++].score});
  }
  return out;
}

std::vector<ScoredFact> Retriever::search_vector(std::string_view, std::string_view, std::span<const float>,
                                                 size_t) const {
  IS_THROW(kUnsupported, "retriever '{}' takes text queries, not query vectors", name());
}

}  // namespace inferscale
