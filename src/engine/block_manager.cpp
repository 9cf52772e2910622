#include "engine/block_manager.h"

#include <algorithm>

#include "util/check.h"

namespace inferscale {

BlockManager::BlockManager(int64_t num_blocks, int32_t block_size) : block_size_(block_size) {
  IS_REQUIRE(num_blocks > 0 && block_size > 0, kInvalidInput, "need positive block count and size, got {} x {}",
             num_blocks, block_size);
  blocks_.resize(static_cast<size_t>(num_blocks));
  for (int32_t i = 0; i < num_blocks; ++i) blocks_[static_cast<size_t>(i)].free_pos = free_.insert(free_.end(), i);
}

void BlockManager::uncache(Block& b) {
  if (!b.cached) return;
  auto it = by_hash_.find(b.hash);
  if (it != by_hash_.end() && &blocks_[static_cast<size_t>(it->second)] == &b) by_hash_.erase(it);
  b.cached = false;
  b.tokens.clear();
}

int32_t BlockManager::allocate() {
  IS_REQUIRE(!free_.empty(), kResource, "out of KV cache blocks ({} in all)", blocks_.size());
  const int32_t id = free_.front();
  free_.pop_front();
  Block& b = blocks_[static_cast<size_t>(id)];
  uncache(b);
  b.ref = 1;
  return id;
}

void BlockManager::incref(int32_t block) {
  Block& b = blocks_.at(static_cast<size_t>(block));
  if (b.ref == 0) free_.erase(b.free_pos);
  ++b.ref;
}

void BlockManager::release(int32_t block) {
  Block& b = blocks_.at(static_cast<size_t>(block));
  IS_CHECK(b.ref > 0, "double release of block {}", block);
  if (--b.ref == 0) b.free_pos = free_.insert(free_.end(), block);
}

std::optional<int32_t> BlockManager::lookup(uint64_t hash, std::span<const int32_t> tokens) {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return std::nullopt;
  const Block& b = blocks_[static_cast<size_t>(it->second)];
  if (!std::equal(b.tokens.begin(), b.tokens.end(), tokens.begin(), tokens.end())) return std::nullopt;
  incref(it->second);
  return it->second;
}

void BlockManager::publish(int32_t block, uint64_t hash, std::span<const int32_t> tokens) {
  IS_CHECK(static_cast<int32_t>(tokens.size()) == block_size_, "only full blocks are published");
  Block& b = blocks_.at(static_cast<size_t>(block));
  IS_CHECK(b.ref > 0, "publishing free block {}", block);
  if (b.cached || by_hash_.count(hash)) return;
  b.cached = true;
  b.hash = hash;
  b.tokens.assign(tokens.begin(), tokens.end());
  by_hash_.emplace(hash, block);
}

}  // namespace inferscale
