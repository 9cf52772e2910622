// The CPU VectorIndex: a dense row-major matrix, scored with one OpenBLAS sgemv per query, then a
// partial sort for the top k.
//
//   ids_:    [N]          ids_[r] is the fact of row r
//   matrix_: [N, dim]     row r is its vector
//   rows_:   id -> r
// Removal moves the last row into the hole (O(dim)), so rows stay dense; row order is arbitrary
// and never observable (ranking ties break by id, not by row).
#pragma once
#include <unordered_map>

#include "memory/retrieval/vector_index.h"

namespace inferscale {

class CpuVectorIndex final : public VectorIndex {
 public:
  explicit CpuVectorIndex(int32_t dim);

  int32_t dim() const override { return dim_; }
  size_t size() const override { return ids_.size(); }
  bool contains(int64_t id) const override { return rows_.count(id) != 0; }
  void add(std::span<const int64_t> ids, std::span<const float> vectors) override;
  void replace(std::span<const int64_t> ids, std::span<const float> vectors) override;
  bool remove(int64_t id) override;
  void clear() override;
  std::vector<ScoredFact> search(std::span<const float> query, size_t k) const override;

  // The rows, for a device mirror (cuda_vector_index.h): row r is id_at(r) with vector
  // matrix() + r * dim. add() appends rows; replace() rewrites rows in place; remove() moves the
  // last row into the removed one's row.
  const float* matrix() const { return matrix_.data(); }
  int64_t id_at(size_t row) const { return ids_[row]; }
  // The row of an id; size() when absent.
  size_t row_of(int64_t id) const;
  // Throws kInvalidInput when the query's dim differs or it holds a non-finite value.
  void check_query(std::span<const float> query) const;

 private:
  void check_rows(std::span<const int64_t> ids, std::span<const float> vectors) const;

  int32_t dim_;
  std::vector<int64_t> ids_;
  std::vector<float> matrix_;
  std::unordered_map<int64_t, size_t> rows_;
};

}  // namespace inferscale
