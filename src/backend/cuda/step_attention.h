// The attention of one forward, planned on the host before its metadata goes to the device
// (FlashInfer's plan/run split; attention_plan.h plans one kernel's sequences). Pure host code,
// tested on the CPU (test_cuda_host).
//
//   decode step  every sequence one new token: the decode kernel the caller picked (the
//                tensor-core decode kernel, or the tiles: DecodeAttention) over every sequence
//   mixed batch  prefill chunks beside one-token sequences, eager: two plans over disjoint output
//                rows, the one-token sequences on the decode kernel and the rest on the tiles
//                (reading the decodes' KV at the tiles' speed cost more: bench_cuda_serving (d))
//   otherwise    the tiles over every sequence; a graph's batch is never split (graph_batch.h:
//                decode steps and one-sequence prefills), and its launches are sized for any plan
//                of its bucket (capacity), not for this plan
#pragma once
#include <cstdint>

#include "backend/cuda/attention_plan.h"
#include "model/forward_batch.h"

namespace inferscale::cuda {

// The prefill tiles: 64 packed rows, kv read in 64-entry chunks (attention_prefill.cu).
inline constexpr int32_t kPrefillRowsPerTile = 64;
inline constexpr int32_t kPrefillKvChunk = 64;
// The decode kernel takes GQA groups up to 8 (one token's group is one tile).
inline constexpr int32_t kDecodeMaxGroup = 8;

// The kernel that runs a plan: the tensor-core tiles (any batch), or the decode kernel (every
// sequence one new token, group <= kDecodeMaxGroup).
enum class AttnKernel { kTiles, kDecodeMma };

// Planner settings: prefill tiles of 64 packed rows split at 64-entry chunks into pieces >= 256
// entries (~2 CTAs per SM); the decode kernel's one-token tiles split into pieces >= 128 (~4 CTAs
// per SM). `single_token` (every sequence has one new token) with the tensor-core kernel uses the
// decode split rule too: its tiles are few and long.
inline AttnPlanOptions attention_plan_options(AttnKernel kernel, bool single_token, int32_t group,
                                              int32_t num_kv_heads, int32_t num_sms) {
  const bool decode_kernel = kernel != AttnKernel::kTiles;
  AttnPlanOptions o;
  o.num_kv_heads = num_kv_heads;
  o.num_sms = num_sms;
  o.rows_per_tile = decode_kernel ? group : kPrefillRowsPerTile;
  o.kv_granule = decode_kernel ? 32 : kPrefillKvChunk;
  o.min_split_len = single_token ? 128 : 256;
  o.ctas_per_sm = single_token ? 4 : 2;
  return o;
}

struct StepAttention {
  bool single_token = false;  // every sequence has one new token
  bool split = false;         // a mixed batch: decode_plan on decode_kernel beside plan on the tiles
  AttnKernel kernel = AttnKernel::kTiles;             // plan's
  AttnKernel decode_kernel = AttnKernel::kDecodeMma;  // decode_plan's (split only)
  AttnPlanOptions options;                            // plan's
  AttnPlan plan;         // every sequence, or (split) the prefill chunks
  AttnPlan decode_plan;  // (split) the one-token sequences
  // What plan's launches are sized for: its own counts, or a graph's bound for its bucket.
  AttnPlanCapacity capacity;
  int32_t merge_rows = 0;  // rows of a tile the merge launch covers
};

// `decode_kernel`: what one-token sequences run (kTiles for groups past kDecodeMaxGroup, or where
// the tiles were chosen); `graph`: the batch is a CUDA graph's. `mask_positions` [T]: the
// position each token's attention is masked at (mask_positions below).
StepAttention plan_step_attention(const ForwardBatch& b, const int32_t* mask_positions, int32_t group,
                                  int32_t num_kv_heads, int32_t num_sms, AttnKernel decode_kernel, bool graph);

// Token t attends to kv entries [kv_start, mask[t]] of its sequence. Under a causal mask mask[t]
// is its position (b.positions, returned as is); under a bidirectional one (encoders, whose
// sequences are whole in the batch: forward_batch.h) it is its sequence's last position in the
// batch, so the plans and kernels of causal attention run it unchanged:
//
//   positions   0 1 2 3 | 0 1 2        causal mask       0 1 2 3 | 0 1 2
//                                       bidirectional     3 3 3 3 | 2 2 2
std::vector<int32_t> mask_positions(const ForwardBatch& b, bool bidirectional);

}  // namespace inferscale::cuda
