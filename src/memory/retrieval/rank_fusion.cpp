#include "memory/retrieval/rank_fusion.h"

#include <unordered_map>
#include <unordered_set>

#include "util/check.h"

namespace inferscale {

std::vector<ScoredFact> rrf_fuse(std::span<const std::vector<ScoredFact>> rankings, size_t k, double k_rrf) {
  IS_REQUIRE(k_rrf >= 0.0, kInvalidInput, "the RRF constant must be >= 0, got {}", k_rrf);
  std::unordered_map<int64_t, double> fused;
  for (const std::vector<ScoredFact>& ranking : rankings) {
    std::unordered_set<int64_t> seen;
    for (size_t i = 0; i < ranking.size(); ++i) {
      IS_REQUIRE(seen.insert(ranking[i].id).second, kInvalidInput, "fact {} appears twice in one ranking", ranking[i].id);
      fused[ranking[i].id] += 1.0 / (k_rrf + static_cast<double>(i + 1));
    }
  }
  std::vector<ScoredFact> out;
  out.reserve(fused.size());
  for (const auto& [id, score] : fused) out.push_back(ScoredFact{id, score});
  keep_top_k(out, k);
  return out;
}

}  // namespace inferscale
