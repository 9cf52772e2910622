// The write path's model step: runs [window][fact] through the model and keeps, per layer, the
// fact tokens' keys before RoPE (after bias and k-norm) and values, written straight into their
// memory-pool slots by the backend (ForwardBatch capture). The window's KV is thrown away.
//
//   sequence:  [ w_1 ... w_w | fact ]      positions 0 .. len-1, no BOS
//   captured:                ^^^^^^        -> pool slots of the fact's entry
//
// Run here, synchronously (imports, idle-time background work), or as the engine's capture work
// inside its steps (EncodeJob::sequence / capture_slots: engine/memory_connector.h).
// Many sequences share one forward, up to a token budget; a sequence longer than the budget is
// split into chunks (its earlier chunks stay in temporary cache blocks): packed_prefill.h.
// Temporary blocks come from the engine's block manager, on the engine thread, and are released
// before returning.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "engine/block_manager.h"

namespace inferscale {

struct EncodeJob {
  std::vector<int32_t> window;       // rendered preceding turns, no BOS (empty when w = 0)
  std::vector<int32_t> fact;         // rendered fact, no BOS
  std::vector<int64_t> pool_slots;   // [fact.size()] destination of each fact token's K/V

  // The sequence the model runs: [window][fact], positions 0 .. len-1.
  std::vector<int32_t> sequence() const;
  // [sequence().size()] the pool slot keeping each position's K/V: -1 in the window.
  std::vector<int64_t> capture_slots() const;
};

class FactEncoder {
 public:
  FactEncoder(Backend& backend, BlockManager& cache_blocks, int32_t max_batch_tokens = 2048)
      : backend_(backend), blocks_(cache_blocks), max_batch_tokens_(max_batch_tokens) {}

  // Throws kResource when the cache has too few free blocks even for one sequence.
  void encode(std::span<const EncodeJob> jobs);
  int64_t tokens_processed() const { return tokens_processed_; }

 private:
  Backend& backend_;
  BlockManager& blocks_;
  int32_t max_batch_tokens_;
  int64_t tokens_processed_ = 0;
};

}  // namespace inferscale
