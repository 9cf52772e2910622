// Host-side manager of the memory KV pool: which pool blocks hold which fact's KV.
//
// The pool has the paged cache's layout (backend.h) and keys stored before RoPE. A fact's tokens
// occupy whole blocks of their own (no sharing), token j at slot blocks[j / bs] * bs + j % bs, so
// any fact can be evicted alone. Entries are evicted least recently used first; pinned entries
// (facts of a request being injected) never are. An evicted fact is re-read from its KV file or
// re-encoded from its text on demand: the pool is a cache, never the source of truth.
#pragma once
#include <cstdint>
#include <list>
#include <optional>
#include <unordered_map>
#include <vector>

namespace inferscale {

// A fact's KV depends on its text (version) and on what it was encoded after: the window w and
// the tokens of the (at most w) turns in it, which change when one of those turns is deleted or
// edited. window_hash is XXH3 of those tokens (MemoryService::window_tokens).
struct FactKvKey {
  int64_t fact_id = 0;  // Fact::key, unique in the store (not the id clients see, unique per tenant)
  int64_t version = 0;
  int32_t window = 0;
  uint64_t window_hash = 0;
  bool operator==(const FactKvKey&) const = default;
};

class MemoryKvPool {
 public:
  MemoryKvPool(int64_t num_blocks, int32_t block_size);

  struct Entry {
    FactKvKey key;
    int32_t num_tokens = 0;
    std::vector<int32_t> blocks;
    int32_t pins = 0;
  };

  int32_t block_size() const { return block_size_; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t num_free_blocks() const { return static_cast<int64_t>(free_.size()); }
  int64_t num_entries() const { return static_cast<int64_t>(entries_.size()); }
  int64_t blocks_for(int32_t num_tokens) const { return (num_tokens + block_size_ - 1) / block_size_; }

  // The entry of this fact version, marked most recently used; nullptr when absent.
  const Entry* find(const FactKvKey& key);
  // Reserves blocks for a fact's KV, evicting unpinned entries (LRU first) as needed; an older
  // version of the same fact is dropped. Throws kResource when pinned entries leave too little.
  const Entry& allocate(const FactKvKey& key, int32_t num_tokens);
  void pin(const FactKvKey& key);
  void unpin(const FactKvKey& key);
  // Drops every version of a fact (deleted or updated); pinned entries are dropped when unpinned.
  void erase_fact(int64_t fact_id);
  void clear();

  // Slot of token j of an entry: the address the backend reads and writes.
  int64_t slot(const Entry& e, int32_t j) const {
    return static_cast<int64_t>(e.blocks[static_cast<size_t>(j / block_size_)]) * block_size_ + j % block_size_;
  }
  std::vector<int64_t> slots(const Entry& e) const;
  int64_t num_evictions() const { return evictions_; }

 private:
  struct Node {
    Entry entry;
    std::list<int64_t>::iterator lru;  // position in lru_ (front = least recently used)
    bool doomed = false;               // erased while pinned: freed at the last unpin
  };
  void drop(int64_t fact_id);

  int64_t num_blocks_;
  int32_t block_size_;
  std::vector<int32_t> free_;
  std::unordered_map<int64_t, Node> entries_;  // by fact id: one version resident at a time
  std::list<int64_t> lru_;
  int64_t evictions_ = 0;
};

}  // namespace inferscale
