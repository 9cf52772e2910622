// Lays sequences' tokens out as one ForwardBatch: the one way tokens are put through the model,
// for the engine's steps (step_batch.h) and for packed prefills (packed_prefill.h).
//
//   for each sequence: add_token(...) for each of its tokens this forward, in position order,
//                      [read_facts_in_place(...)], then end_sequence(its block table)
//
// Token t of the batch is row t of token_ids / positions / slot_mapping; sequence s owns rows
// [q_indptr[s], q_indptr[s+1]) and blocks kv_indices[kv_indptr[s] .. kv_indptr[s+1]).
#pragma once
#include <cstdint>
#include <span>

#include "backend/backend.h"

namespace inferscale {

// The cache slot of position `pos` in a sequence whose block table is `blocks`: position p lives
// in block blocks[p / block_size] at offset p % block_size.
inline int64_t cache_slot(std::span<const int32_t> blocks, int32_t block_size, int32_t pos) {
  return static_cast<int64_t>(blocks[static_cast<size_t>(pos / block_size)]) * block_size + pos % block_size;
}

class BatchBuilder {
 public:
  explicit BatchBuilder(int32_t block_size) : block_size_(block_size) {
    fb_.q_indptr.push_back(0);
    fb_.kv_indptr.push_back(0);
  }
  // Appends token `id` at position `pos` of the current sequence. capture_slot >= 0: the memory-
  // pool slot that keeps its pre-RoPE K and V; output: its row comes out of the forward.
  void add_token(int32_t id, int32_t pos, std::span<const int32_t> blocks, int64_t capture_slot = -1,
                 bool output = false) {
    const int32_t row = fb_.num_tokens();
    if (capture_slot >= 0) {
      fb_.capture_tokens.push_back(row);
      fb_.capture_slots.push_back(capture_slot);
    }
    if (output) fb_.output_tokens.push_back(row);
    fb_.token_ids.push_back(id);
    fb_.positions.push_back(pos);
    fb_.slot_mapping.push_back(cache_slot(blocks, block_size_, pos));
  }
  // The current sequence's last token yields an output row (after its add_token).
  void output_last() { fb_.output_tokens.push_back(fb_.num_tokens() - 1); }
  // The current sequence's last `rows` tokens are probed over its entries [key_begin, key_end) in
  // the layers from first_layer on (ForwardBatch::probes; after their add_token).
  void probe_last(int32_t rows, int32_t key_begin, int32_t key_end, int32_t first_layer) {
    fb_.probes.push_back({fb_.num_seqs(), fb_.num_tokens() - rows, key_begin, key_end, first_layer});
  }
  // The current sequence's entries [start, start + slots.size()) are facts read in place from
  // these memory-pool slots (ForwardBatch::fact_*). The fact arrays exist once a sequence has
  // some: earlier sequences get empty ranges.
  void read_facts_in_place(int32_t start, std::span<const int64_t> slots) {
    if (fb_.fact_indptr.empty()) {
      fb_.fact_indptr.assign(static_cast<size_t>(fb_.num_seqs()) + 1, 0);
      fb_.fact_start.assign(static_cast<size_t>(fb_.num_seqs()), 0);
    }
    fact_start_ = start;
    // Narrowed to int32 as they are: the engine checks a request's pool slots fit it once, at
    // admission (a decode step of 100 requests at k = 50 carries ~250,000 slots, every step).
    fb_.fact_slots.insert(fb_.fact_slots.end(), slots.begin(), slots.end());
  }
  // Room for `n` more fact slots (read_facts_in_place), so that the array grows once a step.
  void reserve_fact_slots(size_t n) { fb_.fact_slots.reserve(fb_.fact_slots.size() + n); }
  // Closes the current sequence: it attends over every entry of `blocks` up to its positions.
  void end_sequence(std::span<const int32_t> blocks) {
    fb_.q_indptr.push_back(fb_.num_tokens());
    fb_.kv_indices.insert(fb_.kv_indices.end(), blocks.begin(), blocks.end());
    fb_.kv_indptr.push_back(static_cast<int32_t>(fb_.kv_indices.size()));
    if (!fb_.fact_indptr.empty()) {
      fb_.fact_start.push_back(fact_start_);
      fb_.fact_indptr.push_back(static_cast<int32_t>(fb_.fact_slots.size()));
      fact_start_ = 0;
    }
  }
  int32_t block_size() const { return block_size_; }
  ForwardBatch& batch() { return fb_; }

 private:
  int32_t block_size_;
  int32_t fact_start_ = 0;  // the current sequence's (read_facts_in_place)
  ForwardBatch fb_;
};

}  // namespace inferscale
