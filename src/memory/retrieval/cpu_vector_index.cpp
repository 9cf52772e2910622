#include "memory/retrieval/cpu_vector_index.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_set>

#include "util/check.h"

namespace inferscale {

CpuVectorIndex::CpuVectorIndex(int32_t dim) : dim_(dim) {
  IS_REQUIRE(dim > 0, kInvalidInput, "vector index dim must be positive, got {}", dim);
}

void CpuVectorIndex::check_rows(std::span<const int64_t> ids, std::span<const float> vectors) const {
  IS_REQUIRE(vectors.size() == ids.size() * static_cast<size_t>(dim_), kInvalidInput,
             "{} vectors of dim {} need {} floats, got {}", ids.size(), dim_, ids.size() * static_cast<size_t>(dim_),
             vectors.size());
  for (float x : vectors) IS_REQUIRE(std::isfinite(x), kInvalidInput, "vector holds a non-finite value");
}

void CpuVectorIndex::add(std::span<const int64_t> ids, std::span<const float> vectors) {
  check_rows(ids, vectors);
  std::unordered_set<int64_t> seen;
  for (int64_t id : ids)
    IS_REQUIRE(!contains(id) && seen.insert(id).second, kInvalidInput, "vector index already holds id {}", id);
  for (size_t i = 0; i < ids.size(); ++i) {
    rows_.emplace(ids[i], ids_.size());
    ids_.push_back(ids[i]);
  }
  matrix_.insert(matrix_.end(), vectors.begin(), vectors.end());
}

void CpuVectorIndex::replace(std::span<const int64_t> ids, std::span<const float> vectors) {
  check_rows(ids, vectors);
  for (int64_t id : ids) IS_REQUIRE(contains(id), kNotFound, "vector index holds no id {}", id);
  const auto d = static_cast<size_t>(dim_);
  for (size_t i = 0; i < ids.size(); ++i)
    std::memcpy(matrix_.data() + rows_.at(ids[i]) * d, vectors.data() + i * d, d * sizeof(float));
}

bool CpuVectorIndex::remove(int64_t id) {
  auto it = rows_.find(id);
  if (it == rows_.end()) return false;
  const size_t row = it->second, last = ids_.size() - 1;
  const auto d = static_cast<size_t>(dim_);
  rows_.erase(it);
  if (row != last) {  // move the last row into the hole
    std::memcpy(matrix_.data() + row * d, matrix_.data() + last * d, d * sizeof(float));
    ids_[row] = ids_[last];
    rows_[ids_[row]] = row;
  }
  ids_.pop_back();
  matrix_.resize(last * d);
  return true;
}

void CpuVectorIndex::clear() {
  ids_.clear();
  matrix_.clear();
  rows_.clear();
}

size_t CpuVectorIndex::row_of(int64_t id) const {
  auto it = rows_.find(id);
  return it == rows_.end() ? ids_.size() : it->second;
}

void CpuVectorIndex::check_query(std::span<const float> query) const {
  IS_REQUIRE(query.size() == static_cast<size_t>(dim_), kInvalidInput, "query vector has dim {}, the index {}",
             query.size(), dim_);
  for (float x : query) IS_REQUIRE(std::isfinite(x), kInvalidInput, "query vector holds a non-finite value");
}

std::vector<ScoredFact> CpuVectorIndex::search(std::span<const float> query, size_t k) const {
  check_query(query);
  const size_t n = ids_.size();
  if (n == 0 || k == 0) return {};
  std::vector<float> scores(n);  // [N] = matrix_ [N, dim] x query [dim]
  cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(n), dim_, 1.0f, matrix_.data(), dim_, query.data(), 1,
              0.0f, scores.data(), 1);
  std::vector<ScoredFact> all(n);
  for (size_t r = 0; r < n; ++r) all[r] = ScoredFact{ids_[r], static_cast<double>(scores[r])};
  keep_top_k(all, k);
  return all;
}

}  // namespace inferscale
