#include "memory/retrieval/neighbour_retriever.h"

#include <algorithm>
#include <mutex>
#include <unordered_map>

#include "util/check.h"

namespace inferscale {

NeighbourRetriever::NeighbourRetriever(FactStore& store, std::unique_ptr<Retriever> base, double weight)
    : store_(store), base_(std::move(base)), weight_(weight) {
  IS_CHECK(base_ != nullptr, "null base retriever");
  IS_REQUIRE(weight >= 0.0 && weight <= 1.0, kInvalidInput, "the neighbour weight must be in [0, 1], got {}", weight);
  store_.attach(this);
}

NeighbourRetriever::~NeighbourRetriever() { store_.detach(this); }

std::vector<ScoredFact> NeighbourRetriever::search(std::string_view tenant, std::string_view user,
                                                   std::string_view query, size_t k) const {
  return search_with(tenant, user, query, k, SearchOptions{});
}

std::vector<ScoredFact> NeighbourRetriever::search_with(std::string_view tenant, std::string_view user,
                                                        std::string_view query, size_t k,
                                                        const SearchOptions& opts) const {
  const double w = opts.neighbours < 0 ? weight_ : opts.neighbours;
  if (w == 0.0 || k == 0) return base_->search(tenant, user, query, k);
  return expand(tenant, user, base_->search(tenant, user, query, std::max(k, kCandidates)), w, k);
}

std::vector<ScoredFact> NeighbourRetriever::expand(std::string_view tenant, std::string_view user,
                                                   std::vector<ScoredFact> candidates, double weight, size_t k) const {
  std::shared_lock lock(mu_);
  const auto it = users_.find(user_map_key(tenant, user));
  if (it == users_.end()) {  // no turns: nothing has neighbours
    keep_top_k(candidates, k);
    return candidates;
  }
  const UserTurns& turns = it->second;
  std::unordered_map<int64_t, double> own, lent;  // own: the candidates' scores; lent: max neighbour score
  for (const ScoredFact& c : candidates) own[c.id] = c.score;
  for (const ScoredFact& c : candidates) {
    const auto t = turns.by_id.find(c.id);
    if (t == turns.by_id.end()) continue;
    for (const int64_t index : {t->second.index - 1, t->second.index + 1}) {
      const auto n = turns.by_index.find({t->second.conversation, index});
      if (n == turns.by_index.end() || turns.by_id.at(n->second).session != t->second.session) continue;
      double& l = lent[n->second];
      l = std::max(l, c.score);
    }
  }
  std::vector<ScoredFact> out;
  out.reserve(own.size() + lent.size());
  for (const auto& [id, s] : own) {
    const auto l = lent.find(id);
    out.push_back({id, s + (l == lent.end() ? 0.0 : weight * l->second)});
  }
  for (const auto& [id, l] : lent)
    if (!own.count(id)) out.push_back({id, weight * l});
  keep_top_k(out, k);
  return out;
}

void NeighbourRetriever::on_facts_added(std::span<const Fact> facts) {
  std::unique_lock lock(mu_);
  for (const Fact& f : facts) {
    if (!f.turn_index) continue;
    UserTurns& u = users_[user_map_key(f.tenant, f.user)];
    u.by_id[f.id] = Turn{f.source.conversation, f.source.session, *f.turn_index};  // idempotent on replays
    u.by_index[{f.source.conversation, *f.turn_index}] = f.id;
  }
}

void NeighbourRetriever::on_facts_deleted(std::string_view tenant, std::string_view user, std::span<const int64_t> ids,
                                          std::span<const int64_t>) {
  std::unique_lock lock(mu_);
  const auto it = users_.find(user_map_key(tenant, user));
  if (it == users_.end()) return;
  for (const int64_t id : ids) {
    const auto t = it->second.by_id.find(id);
    if (t == it->second.by_id.end()) continue;
    it->second.by_index.erase({t->second.conversation, t->second.index});
    it->second.by_id.erase(t);
  }
  if (it->second.by_id.empty()) users_.erase(it);
}

void NeighbourRetriever::on_reset() {
  std::unique_lock lock(mu_);
  users_.clear();
}

}  // namespace inferscale
