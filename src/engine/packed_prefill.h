// Prefill of many independent sequences through shared forwards, in temporary cache blocks: the
// common step of the write path (FactEncoder keeps the KV of some tokens) and of embedding
// (ModelEmbedder keeps final hidden states). Each sequence starts at position 0 with nothing
// before it, and its KV is thrown away once its last token has gone through.
//
//   max_batch_tokens = 12
//   forward 1:  | seq 0: pos 0..4 | seq 1: pos 0..2 | seq 2: pos 0..3 (first chunk) |
//   forward 2:  | seq 2: pos 4..9 | seq 3: pos 0..5 |
//
// A sequence is admitted whole (every block it needs is allocated up front) and released after
// its last chunk; one longer than the budget is split across forwards, its earlier chunks' KV
// staying in its blocks. Sequences are admitted in order while the budget and free blocks allow
// (always at least one per forward). Every block returns to `blocks`, on error too.
// whole_sequences (encoders, whose attention is bidirectional): a sequence is admitted only when
// all of it fits in this forward's budget, so none is ever split; one longer than the budget is
// kInvalidInput.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "engine/block_manager.h"

namespace inferscale {

// A token of a packed sequence: index of the sequence in the input and position in it.
struct PackedToken {
  int32_t seq = 0;
  int32_t pos = 0;
};

struct PackedPrefillHooks {
  // Memory-pool slot that keeps the token's pre-RoPE K and V (ForwardBatch capture), or -1. Optional.
  std::function<int64_t(PackedToken)> capture_slot;
  // Whether the token yields an output row. Optional: no output rows.
  std::function<bool(PackedToken)> wants_output;
  ForwardBatch::Output output = ForwardBatch::Output::kHidden;
  // Called after each forward that has output rows: rows[i] is the token of row i of `out`
  // ([rows.size(), width] row-major), rows in packing order.
  std::function<void(std::span<const PackedToken> rows, std::span<const float> out)> on_output;
  // What the caller does, for the error when the cache cannot hold one sequence ("encode a memory fact").
  std::string_view purpose = "prefill a sequence";
  bool whole_sequences = false;
};

// Runs every sequence (none may be empty) and returns the number of tokens forwarded. kResource
// when `blocks` has too few free blocks for a sequence while nothing else is running.
int64_t packed_prefill(Backend& backend, BlockManager& blocks, int32_t max_batch_tokens,
                       std::span<const std::vector<int32_t>> seqs, const PackedPrefillHooks& hooks);

}  // namespace inferscale
