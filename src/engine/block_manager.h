// Host-side bookkeeping of paged-KV blocks: ids only, never pointers.
//
//   ref_count > 0            in use by one or more requests (shared prefix blocks count each)
//   ref_count == 0           on the free list, in LRU order (least recently released first);
//                            a free block may still hold a cached prefix (hash kept) until reused
//
// Prefix caching: a full block whose content is final is published under a hash chained from
// its parent block (prefix_hash.h). A lookup confirms token equality on a hit, so a hash
// collision can never serve the wrong KV.
#pragma once
#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace inferscale {

class BlockManager {
 public:
  BlockManager(int64_t num_blocks, int32_t block_size);

  int32_t block_size() const { return block_size_; }
  int64_t num_blocks() const { return static_cast<int64_t>(blocks_.size()); }
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }
  bool can_allocate(int64_t n) const { return n <= num_free(); }

  // Takes the least recently released free block (dropping any prefix it cached); ref_count 1.
  int32_t allocate();
  void incref(int32_t block);
  // At ref_count 0 the block joins the tail of the free list, keeping its cached prefix.
  void release(int32_t block);
  int32_t ref_count(int32_t block) const { return blocks_.at(static_cast<size_t>(block)).ref; }

  // A cached block with this hash and exactly these tokens, with a reference taken; else nullopt.
  std::optional<int32_t> lookup(uint64_t hash, std::span<const int32_t> tokens);
  // Publishes a full, final block. A hash already published keeps its first block.
  void publish(int32_t block, uint64_t hash, std::span<const int32_t> tokens);
  int64_t num_cached() const { return static_cast<int64_t>(by_hash_.size()); }

 private:
  struct Block {
    int32_t ref = 0;
    bool cached = false;
    uint64_t hash = 0;
    std::vector<int32_t> tokens;              // content of a published block
    std::list<int32_t>::iterator free_pos;    // valid while ref == 0
  };
  void uncache(Block& b);

  int32_t block_size_;
  std::vector<Block> blocks_;
  std::list<int32_t> free_;                   // LRU order: front is evicted first
  std::unordered_map<uint64_t, int32_t> by_hash_;
};

}  // namespace inferscale
