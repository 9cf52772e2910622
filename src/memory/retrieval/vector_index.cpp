#include "memory/retrieval/vector_index.h"

#include "memory/retrieval/cpu_vector_index.h"
#include "util/check.h"

namespace inferscale {

void VectorIndex::upsert(std::span<const int64_t> ids, std::span<const float> vectors) {
  const auto d = static_cast<size_t>(dim());
  IS_REQUIRE(vectors.size() == ids.size() * d, kInvalidInput, "{} vectors of dim {} need {} floats, got {}",
             ids.size(), d, ids.size() * d, vectors.size());
  std::vector<int64_t> new_ids, old_ids;
  std::vector<float> new_vecs, old_vecs;
  for (size_t i = 0; i < ids.size(); ++i) {
    const bool present = contains(ids[i]);
    (present ? old_ids : new_ids).push_back(ids[i]);
    auto& dst = present ? old_vecs : new_vecs;
    dst.insert(dst.end(), vectors.begin() + static_cast<std::ptrdiff_t>(i * d),
               vectors.begin() + static_cast<std::ptrdiff_t>((i + 1) * d));
  }
  if (!old_ids.empty()) replace(old_ids, old_vecs);
  if (!new_ids.empty()) add(new_ids, new_vecs);
}

std::vector<std::vector<ScoredFact>> VectorIndex::search_batch(std::span<const float> queries, size_t k) const {
  const auto d = static_cast<size_t>(dim());
  IS_REQUIRE(queries.size() % d == 0, kInvalidInput, "{} floats is not a whole number of queries of dim {}",
             queries.size(), d);
  std::vector<std::vector<ScoredFact>> out;
  for (size_t q = 0; q < queries.size() / d; ++q) out.push_back(search(queries.subspan(q * d, d), k));
  return out;
}

std::unique_ptr<VectorIndex> make_cpu_vector_index(int32_t dim) { return std::make_unique<CpuVectorIndex>(dim); }

}  // namespace inferscale
