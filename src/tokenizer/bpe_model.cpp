#include "tokenizer/bpe_model.h"

#include <queue>

#include "util/check.h"

namespace inferscale {

BpeModel::BpeModel(std::vector<std::string> vocab, const std::vector<std::pair<std::string, std::string>>& merges,
                   bool ignore_merges)
    : vocab_(std::move(vocab)), ignore_merges_(ignore_merges) {
  ids_.reserve(vocab_.size());
  for (size_t i = 0; i < vocab_.size(); ++i)
    if (!vocab_[i].empty()) ids_.emplace(vocab_[i], static_cast<int32_t>(i));
  for (int b = 0; b < 256; ++b) {
    const auto it = ids_.find(std::string(1, static_cast<char>(b)));
    byte_ids_[b] = it == ids_.end() ? -1 : it->second;
  }
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    const auto ia = ids_.find(a), ib = ids_.find(b), ir = ids_.find(a + b);
    IS_REQUIRE(ia != ids_.end() && ib != ids_.end() && ir != ids_.end(), kInvalidInput,
               "BPE merge #{} ('{}' + '{}') uses a token missing from the vocabulary", rank, a, b);
    // The first (lowest) rank of a pair wins when a merges list repeats it.
    merges_.emplace(pair_key(ia->second, ib->second), Merge{static_cast<int32_t>(rank), ir->second});
  }
}

std::optional<int32_t> BpeModel::id(std::string_view bytes) const {
  const auto it = ids_.find(std::string(bytes));
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    if (const auto whole = id(word)) {
      out.push_back(*whole);
      return;
    }
  }
  const std::string key(word);
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    const auto it = cache_.find(key);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  merge_word(word, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  std::lock_guard<std::mutex> lock(cache_mu_);
  if (cache_.size() >= kCacheLimit) cache_.clear();
  cache_.emplace(key, std::move(ids));
}

void BpeModel::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  // Symbols form a doubly linked list over positions; a merged-away symbol gets id -1.
  struct Symbol {
    int32_t id;
    int prev, next;
  };
  std::vector<Symbol> syms;
  syms.reserve(word.size());
  for (const char c : word) {
    const int32_t id = byte_ids_[static_cast<unsigned char>(c)];
    if (id < 0) continue;
    const int n = static_cast<int>(syms.size());
    syms.push_back({id, n - 1, n + 1});
  }
  if (syms.empty()) return;
  syms.back().next = -1;

  // Candidate merges ordered by (rank, left position); stale entries are skipped when popped.
  struct Candidate {
    int32_t rank;
    int left, right;
    int32_t left_id, right_id, result;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto consider = [&](int l) {
    if (l < 0) return;
    const int r = syms[l].next;
    if (r < 0) return;
    const auto it = merges_.find(pair_key(syms[l].id, syms[r].id));
    if (it != merges_.end()) queue.push({it->second.rank, l, r, syms[l].id, syms[r].id, it->second.result});
  };
  for (int i = 0; i + 1 < static_cast<int>(syms.size()); ++i) consider(i);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& l = syms[c.left];
    if (l.id != c.left_id || l.next != c.right || syms[c.right].id != c.right_id) continue;  // stale
    Symbol& r = syms[c.right];
    l.id = c.result;
    l.next = r.next;
    if (r.next >= 0) syms[r.next].prev = c.left;
    r.id = -1;
    consider(l.prev);
    consider(c.left);
  }
  for (int i = 0; i >= 0; i = syms[i].next) out.push_back(syms[i].id);
}

}  // namespace inferscale
