// An in-memory BM25 index over one user's facts (Okapi BM25, the rank_bm25 "BM25Okapi" sums):
//
//   score(q, d) = sum over query tokens t (with repeats) of
//                 idf(t) * tf(t,d) * (k1 + 1) / (tf(t,d) + k1 * (1 - b + b * |d| / avgdl))
//   idf(t)      = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))        (always > 0)
//
// N = documents, df = documents holding t, |d| = tokens in d, avgdl = mean |d|. Only documents
// that share at least one token with the query are returned (their score is > 0). Tokens are the
// terms of text_terms.h: stop words dropped, the rest stemmed, for documents and queries alike.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "memory/retrieval/retriever.h"
#include "memory/retrieval/text_terms.h"

namespace inferscale {

struct Bm25Params {
  double k1 = 1.2;
  double b = 0.75;
};

class Bm25Index {
 public:
  explicit Bm25Index(Bm25Params params = {}) : params_(params) {}

  // Adds a document, replacing the one with this id if any.
  void put(int64_t id, std::string_view text);
  // False when the id is not indexed.
  bool remove(int64_t id);
  bool contains(int64_t id) const { return docs_.count(id) != 0; }
  size_t size() const { return docs_.size(); }
  // Distinct terms in the index.
  size_t num_terms() const { return postings_.size(); }

  // The (at most) k best documents for `query`, in ranking order (retriever.h).
  std::vector<ScoredFact> search(std::string_view query, size_t k) const;
  const Bm25Params& params() const { return params_; }

 private:
  struct Doc {
    int32_t length = 0;               // tokens
    std::vector<std::string> terms;   // distinct terms, to undo the postings on removal
  };
  Bm25Params params_;
  std::unordered_map<int64_t, Doc> docs_;
  // term -> (doc id -> term frequency). A term with no documents is erased, so df = map size.
  std::unordered_map<std::string, std::unordered_map<int64_t, int32_t>> postings_;
  int64_t total_length_ = 0;  // sum of |d|: avgdl = total_length_ / N, exact
};

}  // namespace inferscale
