// Megatron-style tensor parallelism: how a Llama-family model splits over `size` ranks.
//
// Rank r of tp holds, per layer,
//   wq rows  [r QS/tp, (r+1) QS/tp)     its NH/tp query heads        (column-parallel)
//   wk, wv rows [r KS/tp, (r+1) KS/tp)  its NKV/tp kv heads          (column-parallel)
//   wo columns [r QS/tp, (r+1) QS/tp)   the same query heads          (row-parallel)
//   w_gate, w_up rows [r I/tp, (r+1) I/tp)                            (column-parallel)
//   w_down columns [r I/tp, (r+1) I/tp)                               (row-parallel)
// and the q/k/v biases of its heads. The embedding, the norms (q/k norms are per head, shared by
// every head) and the LM head are whole on every rank. Query head h of rank r is global head
// r NH/tp + h, and its kv head (h / group) is global r NKV/tp + h / group: a rank's query heads
// read only its own kv heads, so RoPE, attention, the KV cache and the memory pool are local,
// each rank holding kv heads [r NKV/tp, (r+1) NKV/tp) of every token.
//
// A rank's forward is the model's with NH/tp, NKV/tp and I/tp (shard_config): each row-parallel
// product (o_proj, down) is a partial sum, and ForwardOps::linear_reduce adds the ranks' partials
// into the residual stream (one all-reduce each: two per layer).
#pragma once
#include <cstdint>

#include "model/config.h"
#include "model/weights.h"

namespace inferscale {

struct TensorShard {
  int32_t rank = 0;
  int32_t size = 1;
};

// kInvalidInput unless `tp` is at least 1 and splits the model: the query heads, kv heads and the
// MLP's intermediate size each a multiple of tp (a decoder; an encoder is kUnsupported).
void check_tensor_parallel(const ModelConfig& cfg, int32_t tp);

// One rank's model: NH/tp query heads, NKV/tp kv heads, I/tp intermediate; the rest unchanged
// (head_dim, hidden size, vocabulary, RoPE).
ModelConfig shard_config(const ModelConfig& cfg, int32_t tp);

// Rank `s.rank`'s weights (the layout above). Row slices are views of `w`'s storage (which they
// keep alive); column slices are copies, in the stored dtype where the cut falls on whole blocks
// of a block-quantized type, else in f32.
ModelWeights shard_weights(const ModelWeights& w, const ModelConfig& cfg, TensorShard s);

// Columns [first, first + count) of each row of `t` (a matrix [rows, cols]): the slice a rank
// holds of a row-parallel matrix, as shard_weights makes it.
HostTensor column_slice(const HostTensor& t, int64_t first, int64_t count);

}  // namespace inferscale
