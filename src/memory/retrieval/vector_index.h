// A flat vector index: ids and a row-major [N, dim] float32 matrix, searched by brute-force inner
// product (cosine when the vectors are L2-normalized). One index per user and embedder.
//
// The interface is what a GPU implementation fills later (matrix in device memory, GEMV/GEMM +
// top-k kernel); the CPU one (OpenBLAS sgemv + partial sort) is the reference it must match.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "memory/retrieval/retriever.h"

namespace inferscale {

class VectorIndex {
 public:
  virtual ~VectorIndex() = default;

  virtual int32_t dim() const = 0;
  virtual size_t size() const = 0;
  virtual bool contains(int64_t id) const = 0;

  // vectors: [ids.size(), dim] row-major. add: kInvalidInput when an id is already present;
  // replace: kNotFound when an id is absent. Both check the size and that values are finite.
  virtual void add(std::span<const int64_t> ids, std::span<const float> vectors) = 0;
  virtual void replace(std::span<const int64_t> ids, std::span<const float> vectors) = 0;
  // Adds the new ids and replaces the present ones.
  void upsert(std::span<const int64_t> ids, std::span<const float> vectors);
  // False when the id was not present.
  virtual bool remove(int64_t id) = 0;
  virtual void clear() = 0;

  // The (at most) k ids with the largest inner product with `query` ([dim]), in ranking order
  // (score descending, id ascending).
  virtual std::vector<ScoredFact> search(std::span<const float> query, size_t k) const = 0;
  // queries: [num_queries, dim] row-major; one result list per query. The default loops over
  // search(); a GPU index does the batch in one GEMM.
  virtual std::vector<std::vector<ScoredFact>> search_batch(std::span<const float> queries, size_t k) const;
};

using VectorIndexFactory = std::function<std::unique_ptr<VectorIndex>(int32_t dim)>;

// The CPU index (cpu_vector_index.h).
std::unique_ptr<VectorIndex> make_cpu_vector_index(int32_t dim);

}  // namespace inferscale
