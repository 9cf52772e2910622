#include "memory/retrieval/bm25_index.h"

#include <cmath>

namespace inferscale {

void Bm25Index::put(int64_t id, std::string_view text) {
  remove(id);
  const std::vector<std::string> tokens = bm25_terms(text);
  std::unordered_map<std::string, int32_t> tf;
  for (const std::string& t : tokens) ++tf[t];
  Doc doc;
  doc.length = static_cast<int32_t>(tokens.size());
  doc.terms.reserve(tf.size());
  for (auto& [term, n] : tf) {
    postings_[term][id] = n;
    doc.terms.push_back(term);
  }
  total_length_ += doc.length;
  docs_.emplace(id, std::move(doc));
}

bool Bm25Index::remove(int64_t id) {
  auto it = docs_.find(id);
  if (it == docs_.end()) return false;
  for (const std::string& term : it->second.terms) {
    auto p = postings_.find(term);
    p->second.erase(id);
    if (p->second.empty()) postings_.erase(p);
  }
  total_length_ -= it->second.length;
  docs_.erase(it);
  return true;
}

std::vector<ScoredFact> Bm25Index::search(std::string_view query, size_t k) const {
  if (k == 0 || docs_.empty()) return {};
  const double n = static_cast<double>(docs_.size());
  const double avgdl = static_cast<double>(total_length_) / n;
  const double k1 = params_.k1, b = params_.b;
  // Per document the terms are summed in query-token order, so scores are reproducible.
  std::unordered_map<int64_t, double> acc;
  for (const std::string& t : bm25_terms(query)) {
    auto p = postings_.find(t);
    if (p == postings_.end()) continue;
    const double df = static_cast<double>(p->second.size());
    const double idf = std::log(1.0 + (n - df + 0.5) / (df + 0.5));
    for (const auto& [id, tf_i] : p->second) {
      const double tf = tf_i;
      const double dl = docs_.at(id).length;
      acc[id] += idf * tf * (k1 + 1.0) / (tf + k1 * (1.0 - b + b * dl / avgdl));
    }
  }
  std::vector<ScoredFact> all;
  all.reserve(acc.size());
  for (const auto& [id, s] : acc) all.push_back(ScoredFact{id, s});
  keep_top_k(all, k);
  return all;
}

}  // namespace inferscale
