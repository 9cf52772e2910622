// Reciprocal rank fusion (Cormack, Clarke & Büttcher, SIGIR 2009): one ranking out of several.
//
//   score(d) = sum over the rankings r that hold d of  1 / (k_rrf + rank_r(d))      rank from 1
//
// A document missing from a ranking gets nothing from it. Only ranks count, never the scores, so
// BM25's unbounded scores and cosines in [-1, 1] need no calibration. k_rrf = 60 is the paper's
// constant (and Elasticsearch's, OpenSearch's and Weaviate's default): it flattens the head, so a
// document ranked 1st by one retriever and absent from the other (1/61 = 0.0164) loses to one
// ranked 5th by one and 6th by the other (1/65 + 1/66 = 0.0305). Ties break by fact id (retriever.h).
#pragma once
#include <cstddef>
#include <span>
#include <vector>

#include "memory/retrieval/retriever.h"

namespace inferscale {

inline constexpr double kRrfK = 60.0;

// The k best documents of the fused rankings (each in ranking order, no id twice within one),
// scored by RRF. kInvalidInput when k_rrf < 0 or a ranking holds an id twice.
std::vector<ScoredFact> rrf_fuse(std::span<const std::vector<ScoredFact>> rankings, size_t k, double k_rrf = kRrfK);

}  // namespace inferscale
