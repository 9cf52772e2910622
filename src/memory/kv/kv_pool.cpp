#include "memory/kv/kv_pool.h"

#include "util/check.h"

namespace inferscale {

MemoryKvPool::MemoryKvPool(int64_t num_blocks, int32_t block_size) : num_blocks_(num_blocks), block_size_(block_size) {
  IS_REQUIRE(num_blocks >= 0 && block_size > 0, kInvalidInput, "bad memory pool shape {} x {}", num_blocks, block_size);
  free_.reserve(static_cast<size_t>(num_blocks));
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

const MemoryKvPool::Entry* MemoryKvPool::find(const FactKvKey& key) {
  auto it = entries_.find(key);
  if (it == entries_.end() || it->second.doomed) return nullptr;
  lru_.splice(lru_.end(), lru_, it->second.lru);
  return &it->second.entry;
}

void MemoryKvPool::drop(const FactKvKey& key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  for (int32_t b : it->second.entry.blocks) free_.push_back(b);
  lru_.erase(it->second.lru);
  entries_.erase(it);
  auto f = by_fact_.find(key.fact_id);
  std::erase(f->second, key);
  if (f->second.empty()) by_fact_.erase(f);
}

const MemoryKvPool::Entry& MemoryKvPool::allocate(const FactKvKey& key, int32_t num_tokens) {
  IS_REQUIRE(num_tokens > 0, kInvalidInput, "fact {} has no tokens", key.fact_id);
  if (auto same = entries_.find(key); same != entries_.end()) {
    IS_REQUIRE(same->second.entry.pins == 0, kResource, "fact {} is in use and cannot be re-encoded now", key.fact_id);
    drop(key);
  }
  if (auto f = by_fact_.find(key.fact_id); f != by_fact_.end()) {
    const std::vector<FactKvKey> others = f->second;
    for (const FactKvKey& o : others)
      if (o.version != key.version || (o.window == key.window && o.window_hash != key.window_hash)) erase(o);
  }
  const int64_t need = blocks_for(num_tokens);
  IS_REQUIRE(need <= num_blocks_, kResource, "fact {} needs {} memory-pool blocks; the pool has {}", key.fact_id, need, num_blocks_);
  for (auto it = lru_.begin(); static_cast<int64_t>(free_.size()) < need && it != lru_.end();) {
    const FactKvKey victim = *it++;
    if (entries_.at(victim).entry.pins > 0) continue;
    drop(victim);
    ++evictions_;
  }
  IS_REQUIRE(static_cast<int64_t>(free_.size()) >= need, kResource,
             "memory pool full: {} blocks needed, {} free, the other {} of {} pinned by facts in use (this request's "
             "and running requests')",
             need, free_.size(), num_blocks_ - static_cast<int64_t>(free_.size()), num_blocks_);
  Node node;
  node.entry.key = key;
  node.entry.num_tokens = num_tokens;
  for (int64_t i = 0; i < need; ++i) {
    node.entry.blocks.push_back(free_.back());
    free_.pop_back();
  }
  node.lru = lru_.insert(lru_.end(), key);
  by_fact_[key.fact_id].push_back(key);
  return entries_.emplace(key, std::move(node)).first->second.entry;
}

void MemoryKvPool::set_pending(const FactKvKey& key, bool pending) {
  auto it = entries_.find(key);
  IS_CHECK(it != entries_.end(), "fact {} has no pool entry", key.fact_id);
  it->second.entry.pending = pending;
}

void MemoryKvPool::pin(const FactKvKey& key) {
  auto it = entries_.find(key);
  IS_CHECK(it != entries_.end() && !it->second.doomed, "pinning fact {} that is not resident", key.fact_id);
  ++it->second.entry.pins;
}

void MemoryKvPool::unpin(const FactKvKey& key) {
  auto it = entries_.find(key);
  IS_CHECK(it != entries_.end() && it->second.entry.pins > 0, "unpinning fact {} that is not pinned", key.fact_id);
  if (--it->second.entry.pins == 0 && it->second.doomed) drop(key);
}

void MemoryKvPool::erase(const FactKvKey& key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  if (it->second.entry.pins > 0) {
    it->second.doomed = true;
    return;
  }
  drop(key);
}

void MemoryKvPool::erase_fact(int64_t fact_id) {
  auto f = by_fact_.find(fact_id);
  if (f == by_fact_.end()) return;
  const std::vector<FactKvKey> keys = f->second;
  for (const FactKvKey& k : keys) erase(k);
}

void MemoryKvPool::clear() {
  std::vector<FactKvKey> keys;
  for (auto& [k, n] : entries_) keys.push_back(k);
  for (const FactKvKey& k : keys) erase(k);
}

std::vector<int64_t> MemoryKvPool::slots(const Entry& e) const {
  std::vector<int64_t> s(static_cast<size_t>(e.num_tokens));
  for (int32_t j = 0; j < e.num_tokens; ++j) s[static_cast<size_t>(j)] = slot(e, j);
  return s;
}

}  // namespace inferscale
