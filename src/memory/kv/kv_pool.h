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

struct FactKvKeyHash {
  size_t operator()(const FactKvKey& k) const {
    uint64_t h = static_cast<uint64_t>(k.fact_id) * 0x9E3779B97F4A7C15ull;
    h ^= static_cast<uint64_t>(k.version) + 0x632BE59BD9B4E019ull + (h << 6) + (h >> 2);
    h ^= static_cast<uint64_t>(k.window) + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h ^= k.window_hash + 0x632BE59BD9B4E019ull + (h << 6) + (h >> 2);
    return static_cast<size_t>(h);
  }
};

// Several entries of one fact may be resident at once: one per window (a request with w = 0 and
// one with w = 2 both find theirs). An entry another one makes stale (an older version of the
// fact, or the same window over other turns) is dropped when the new one is allocated.
class MemoryKvPool {
 public:
  MemoryKvPool(int64_t num_blocks, int32_t block_size);

  struct Entry {
    FactKvKey key;
    int32_t num_tokens = 0;
    std::vector<int32_t> blocks;
    int32_t pins = 0;
    // Allocated for an encoding still in flight (a capture in the engine's steps): its slots do
    // not hold the KV yet, so it is pinned and must not be injected until set_ready().
    bool pending = false;
  };

  int32_t block_size() const { return block_size_; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t num_free_blocks() const { return static_cast<int64_t>(free_.size()); }
  int64_t num_entries() const { return static_cast<int64_t>(entries_.size()); }
  int64_t blocks_for(int32_t num_tokens) const { return (num_tokens + block_size_ - 1) / block_size_; }

  // The entry of exactly this key, marked most recently used; nullptr when absent.
  const Entry* find(const FactKvKey& key);
  // Reserves blocks for a fact's KV under `key`, evicting unpinned entries (LRU first) as needed;
  // the fact's entries that `key` makes stale (another version; the same window over other turns)
  // are dropped (or, pinned, when unpinned). Throws kResource when pinned entries leave too little,
  // or when this very key is resident and pinned.
  const Entry& allocate(const FactKvKey& key, int32_t num_tokens);
  void set_pending(const FactKvKey& key, bool pending);
  void pin(const FactKvKey& key);
  void unpin(const FactKvKey& key);
  // Drops one entry / every entry of a fact (deleted or updated); pinned entries are dropped when
  // unpinned, and are not found meanwhile.
  void erase(const FactKvKey& key);
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
    std::list<FactKvKey>::iterator lru;  // position in lru_ (front = least recently used)
    bool doomed = false;                 // erased while pinned: freed at the last unpin
  };
  void drop(const FactKvKey& key);

  int64_t num_blocks_;
  int32_t block_size_;
  std::vector<int32_t> free_;
  std::unordered_map<FactKvKey, Node, FactKvKeyHash> entries_;
  std::unordered_map<int64_t, std::vector<FactKvKey>> by_fact_;  // fact id -> its resident keys
  std::list<FactKvKey> lru_;
  int64_t evictions_ = 0;
};

}  // namespace inferscale
