// Which forwards the CUDA backend replays from a CUDA graph, and the padded batch it replays:
// host code, tested on the CPU (test_cuda Host*).
//
// A graph fixes every launch's shape and every pointer, so a forward is replayed only when its
// shape is one of a few buckets, padded up to it:
//   decode   every sequence one new token, each its own output row, B <= 128 sequences: padded
//            with dummy sequences of one token (id 0, position 0) whose K/V land in slot 0 of the
//            scratch blocks, the only entry they attend to;
//   prefill  one sequence of 2..256 new tokens (a question after injected facts or a cached
//            prefix) with one output row, its last token: padded with one dummy sequence of
//            bucket - T tokens at positions 0.. in the scratch blocks.
//   encode   one whole sequence of 2..256 tokens whose every token is an output row of hidden
//            states (a query embedded by an encoder, mean-pooled): padded as a prefill, the
//            dummy's tokens output rows too (dropped). Bidirectional attention stays inside each
//            sequence, so the dummy never reaches the real one.
// The scratch blocks lie past the cache's blocks and no request owns them; dummies' rows are
// computed and dropped; they read no facts in place. Everything else (mixed batches, captures,
// kv_start, several output rows per sequence outside encode) runs eagerly.
//
//   decode, bucket 8:     seqs s0 s1 s2 d d d d d    tokens t0 t1 t2 0 0 0 0 0   outputs 0..7
//   prefill, bucket 16:   seqs s0 d                  tokens t0..t9 0 0 0 0 0 0   output  9
//   encode, bucket 16:    seqs s0 d                  tokens t0..t9 0 0 0 0 0 0   outputs 0..15
#pragma once
#include <array>
#include <cstdint>
#include <climits>

#include "model/forward_batch.h"

namespace inferscale {

inline constexpr std::array<int32_t, 11> kDecodeGraphBuckets = {1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128};
inline constexpr std::array<int32_t, 8> kPrefillGraphBuckets = {16, 32, 48, 64, 96, 128, 192, 256};

struct GraphShape {
  enum class Kind { kNone, kDecode, kPrefill, kEncode } kind = Kind::kNone;
  int32_t bucket = 0;  // tokens (and, for decode, sequences) of the padded batch
  bool operator==(const GraphShape&) const = default;
};

// The bucket a batch replays in; kind kNone when it runs eagerly. max_position: the model's last
// position (an encoder's learned table ends; the dummy's positions run to bucket - T - 1).
GraphShape graph_shape(const ForwardBatch& b, int32_t max_position = INT32_MAX);

// Scratch blocks the backend keeps past its cache for padding (enough for the largest prefill bucket).
int32_t graph_scratch_blocks(int32_t block_size);

// `out` = `b` padded to `shape` (graph_shape(b) == shape, or a larger bucket of the same kind),
// dummies in the blocks from scratch_block on. Sampling rows of dummies are greedy.
void pad_for_graph(const ForwardBatch& b, GraphShape shape, int32_t scratch_block, int32_t block_size, ForwardBatch& out);

}  // namespace inferscale
