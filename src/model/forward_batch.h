// One forward's input: the tokens of several sequences, where their K and V go in the paged
// cache, which rows come out and what the write path keeps. What the backend does with it is the
// architecture's forward (model/architecture.h).
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "model/sampling.h"

namespace inferscale {

// One forward over the tokens of several sequences. Built once per step on the host and used by
// every layer (the plan/run split). Tokens of one sequence are contiguous and in position order.
//
//   tokens:     | seq 0: t0 t1 t2 | seq 1: t3 | seq 2: t4 t5 |
//   q_indptr:   [0, 3, 4, 6]
//   kv_indptr:  CSR over kv_indices, one block list per sequence
//
// Token t of sequence s attends to kv entries [kv_start[s], positions[t]] (causal: decoders) or to
// [kv_start[s], the sequence's last position in this batch] (bidirectional: encoders, whose
// sequences are whole in one batch); the architecture decides (forward_ops.h, AttnMask). Every
// entry there is already in the cache (computed earlier or injected) or written by this batch.
// Positions inside one sequence may jump (a chunk that skips an injected range).
// kv_start is 0 for served requests; a sequence that starts at position p > 0 with nothing
// before it (a fact encoded at its serving position, in exactness tests) sets it to p.
struct ForwardBatch {
  std::vector<int32_t> token_ids;     // [T]
  std::vector<int32_t> positions;     // [T] rotary position == index of the token in its sequence
  std::vector<int64_t> slot_mapping;  // [T] destination cache slot of the token's K and V
  std::vector<int32_t> q_indptr;      // [S + 1]
  std::vector<int32_t> kv_indptr;     // [S + 1]
  std::vector<int32_t> kv_indices;    // [kv_indptr[S]] block ids
  std::vector<int32_t> kv_start;      // [S] first attended entry; empty = all 0
  // Tokens the backend feeds: token t is row token_src[t] of the ids output (kArgmax, kSample) of
  // the forward launched just before this one on the same backend, whatever token_ids[t] holds;
  // -1 (or token_src empty): token_ids[t]. Lets a step launch before the host has read the ids of
  // the step before it (engine/step_ahead.cpp).
  std::vector<int32_t> token_src;     // [T] or empty

  // Which tokens produce output rows, in order.
  std::vector<int32_t> output_tokens;  // [R] indices into token_ids
  // kLogits: ForwardOutput::values [R, vocab]. kHidden: values [R, hidden], final-normed hidden
  // states. kArgmax: ForwardOutput::ids [R], each row's greedy token: the largest logit among ids
  // [0, argmax_vocab), the lowest id on ties, as sample_token's greedy; only R ids leave the device.
  // kSample: ids [R], each row's token drawn by sample_row (model/sampling.h) with sampling[r]
  // over the same ids; greedy rows take the argmax. Only R ids and R draws cross PCIe.
  enum class Output { kLogits, kHidden, kArgmax, kSample } output = Output::kLogits;
  int32_t argmax_vocab = 0;  // kArgmax, kSample: 0 = the whole vocabulary
  std::vector<RowSampling> sampling;  // kSample: [R]

  // Write path: keep the pre-RoPE K and the V of some tokens (every layer) in memory-pool slots.
  std::vector<int32_t> capture_tokens;  // [C] indices into token_ids
  std::vector<int64_t> capture_slots;   // [C] memory-pool slots

  // Facts read in place (zero-copy memory): entries [fact_start[s], fact_start[s] + n) of sequence
  // s, n = fact_indptr[s + 1] - fact_indptr[s], are not in its cache blocks but in memory-pool
  // slots: entry j is fact_slots[fact_indptr[s] + j - fact_start[s]]. The pool holds keys before
  // RoPE; attention rotates each one at its entry's position j as it reads it, and reads values as
  // stored. A block of the sequence wholly inside that range is kNoBlock (no cache block holds
  // it); no token of the batch lies inside it. fact_indptr empty: no sequence reads facts in place.
  //
  //   entries   0 ..... 13 | 14 ............. 61 | 62 ...        (block size 16, facts at 14..61)
  //   blocks    [ b0       ][ kNoBlock ][ kNoBlock ][ b3 ...      block 0 and 3 hold own entries
  //   pool                  slots of the facts' tokens
  std::vector<int32_t> fact_indptr;  // [S + 1] or empty
  std::vector<int32_t> fact_start;   // [S]
  std::vector<int32_t> fact_slots;   // [fact_indptr[S]] memory-pool slots (int32, as kernels read them)
  static constexpr int32_t kNoBlock = -1;
  bool reads_facts_in_place() const { return !fact_indptr.empty() && fact_indptr.back() > 0; }
  // Sequence s's in-place range [first, end) (empty when it has none).
  std::pair<int32_t, int32_t> fact_range(int32_t s) const {
    if (fact_indptr.empty()) return {0, 0};
    const int32_t a = fact_start[static_cast<size_t>(s)];
    return {a, a + fact_indptr[s + 1] - fact_indptr[s]};
  }

  // Attention probes (a question-aware choice of the injected tokens to recompute): probe p
  // measures how much the tokens [first_token, the end of sequence seq's tokens in this batch)
  // attend to the sequence's entries [key_begin, key_end). ForwardOutput::probe_mass gets, probe
  // after probe, [rows][key_end - key_begin]: each row's attention weights (the softmax over all
  // the entries it attends to) on those entries, summed over the layers [first_layer, num_layers)
  // and every query head. The probed sequence's entries are in its cache blocks (none read in
  // place).
  struct Probe {
    int32_t seq = 0;
    int32_t first_token = 0;  // index into token_ids, inside the sequence's rows
    int32_t key_begin = 0;
    int32_t key_end = 0;
    int32_t first_layer = 0;
    int32_t rows(const ForwardBatch& b) const { return b.q_indptr[seq + 1] - first_token; }
    int32_t keys() const { return key_end - key_begin; }
  };
  std::vector<Probe> probes;
  // Floats of ForwardOutput::probe_mass: sum over probes of rows x keys.
  int64_t probe_mass_size() const {
    int64_t n = 0;
    for (const Probe& p : probes) n += static_cast<int64_t>(p.rows(*this)) * p.keys();
    return n;
  }

  int32_t num_tokens() const { return static_cast<int32_t>(token_ids.size()); }
  int32_t num_seqs() const { return q_indptr.empty() ? 0 : static_cast<int32_t>(q_indptr.size()) - 1; }
  // Throws kInternal when sizes, ranges or ordering are inconsistent.
  void validate(int64_t num_cache_slots, int32_t block_size) const;
};

// token_src resolved on the host against the ids of the forward before (`prev_ids`): each fed
// token_ids[t] becomes prev_ids[token_src[t]], and token_src is cleared (the CPU backend's feed;
// the GPU's is cuda::feed_tokens). kInternal for a row outside prev_ids.
void feed_tokens(ForwardBatch& b, const std::vector<int32_t>& prev_ids);

// kArgmax: how many leading ids compete (argmax_vocab, the whole vocabulary when 0); kInternal
// when argmax_vocab is outside [0, vocab].
int64_t argmax_span(const ForwardBatch& b, int64_t vocab);

// What a forward returns (ForwardBatch::output says which): values (kLogits, kHidden), row-major
// f32, or token ids (kArgmax, kSample) as int32; the other one is empty.
struct ForwardOutput {
  std::vector<float> values;  // [R, vocab] or [R, hidden]
  std::vector<int32_t> ids;   // [R]
  std::vector<float> probe_mass;  // ForwardBatch::probes' attention weights (probe_mass_size())
};

// validate(), plus what every backend checks before it runs a forward: capture slots inside its
// memory pool of `num_pool_slots` (kInternal) and token ids inside the vocabulary (kInvalidInput).
void check_forward_batch(const ForwardBatch& b, int64_t num_cache_slots, int32_t block_size, int64_t num_pool_slots,
                         int64_t vocab_size);

}  // namespace inferscale
