// Launchers of the CUDA kernels. Each has a CPU twin (backend/cpu/cpu_ops.h, cpu_twins.h) and a
// parity test in tests/cuda. All pointers are device pointers; every launch runs on `stream` and
// is checked (CUDA_CHECK_LAUNCH, or launch.cuh's launch() for the forward's kernels, which use
// Programmatic Dependent Launch). Matrices are bf16, vectors (norm weights, biases) f32,
// the residual stream f32 (see cuda_backend.h).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/attention_mass_shape.h"
#include "backend/cuda/attention_plan.h"
#include "backend/cuda/step_attention.h"
#include "model/sampling.h"

namespace inferscale::cuda {

using bf16 = __nv_bfloat16;

// The paged KV cache, and the memory pool, as the kernels see them: bf16 rows, or FP8 E4M3 codes
// with one f32 scale per (slot, kv head) (BackendOptions::cache_fp8, pool_fp8), rounded as tensor/fp8.h's quantize_e4m3_row does
// (scale = amax / 448 over the head's D values, code = e4m3(x * (1 / scale)) to nearest even,
// saturating; a zero row has scale 0 and zero codes; fp8_utils.cuh is the device side):
//   bf16:  k, v [slots, NKV, D] bf16
//   fp8:   k, v [slots, NKV, D] uint8 codes;   k_scale, v_scale [slots, NKV] f32
// One layer's, or every layer's with a layer stride (layer()).
struct KvCache {
  void* k = nullptr;
  void* v = nullptr;
  float* k_scale = nullptr;  // fp8 only
  float* v_scale = nullptr;
  bool fp8 = false;
  // Layer l of a cache whose layers are `stride` elements apart (stride / D scales).
  __host__ __device__ KvCache layer(int64_t l, int64_t stride, int64_t head_dim) const {
    KvCache c = *this;
    const int64_t bytes = l * stride * (fp8 ? 1 : 2);
    c.k = static_cast<unsigned char*>(k) + bytes;
    c.v = static_cast<unsigned char*>(v) + bytes;
    if (fp8) {
      c.k_scale = k_scale + l * (stride / head_dim);
      c.v_scale = v_scale + l * (stride / head_dim);
    }
    return c;
  }
};

// Programmatic Dependent Launch of the forward's kernels (launch.cuh), process-wide, default on.
bool programmatic_launch();
void set_programmatic_launch(bool on);

// x[t, :] = embed[token_ids[t], :] as f32.       embed: [vocab, H] bf16; x: [T, H] f32
void embedding(const bf16* embed, const int32_t* token_ids, float* x, int64_t T, int64_t H, cudaStream_t stream);

// RMSNorm of rows of the f32 residual stream, optionally gathering rows first:
//   y[r, :] = x[src, :] / sqrt(mean(x[src, :]^2) + eps) * w,   src = rows ? rows[r] : r
// x: [*, H] f32; w: [H] f32; y: [R, H] bf16 (GEMM input) or f32 (hidden-state output).
// row_amax (bf16 output; null: none): [R] max_h |y[r, h]| of the rounded outputs, the row maxima
// quantize_e4m3_tensor takes (an FP8 projection's input, --quantization fp8).
void rmsnorm(const float* x, const int32_t* rows, const float* w, bf16* y, int64_t R, int64_t H, float eps,
             cudaStream_t stream, float* row_amax = nullptr);
void rmsnorm(const float* x, const int32_t* rows, const float* w, float* y, int64_t R, int64_t H, float eps,
             cudaStream_t stream);

// out[t, i] = silu(gate_up[t, i]) * gate_up[t, I + i].   gate_up: [T, 2I] bf16; out: [T, I] bf16
// Encoders' ops (encoder_ops.cu): x[t] (+)= table[index[t]] (index null: row 0), [T, H] f32;
// LayerNorm per row (in place allowed); the exact GELU in place; y[m, n] += bias[n]; out[r] =
// x[rows[r]] ([R, H] f32).
void embedding_rows(const bf16* table, const int32_t* index, bool accumulate, float* x, int64_t T, int64_t H,
                    cudaStream_t stream);
void layer_norm(const float* x, const float* w, const float* b, float* y, int64_t rows, int64_t H, float eps,
                cudaStream_t stream);
void layer_norm(const float* x, const float* w, const float* b, bf16* y, int64_t rows, int64_t H, float eps,
                cudaStream_t stream);
void gelu(float* x, int64_t n, cudaStream_t stream);
void gelu(bf16* x, int64_t n, cudaStream_t stream);
void add_bias(float* y, const float* bias, int64_t M, int64_t N, cudaStream_t stream);
void add_bias(bf16* y, const float* bias, int64_t M, int64_t N, cudaStream_t stream);
void gather_rows(const float* x, const int32_t* rows, float* out, int64_t R, int64_t H, cudaStream_t stream);

// row_amax (null: none): [T] max_i |out[t, i]| of the rounded outputs, as rmsnorm's (the down
// projection's input under --quantization fp8); one block a row then.
void silu_mul(const bf16* gate_up, bf16* out, int64_t T, int64_t I, cudaStream_t stream, float* row_amax = nullptr);

// Skinny linear layers: y[m, n] (+)= sum_k x[m, k] w[n, k] for M <= kGemvMaxRows (decode steps of
// a few sequences), one warp per column.   x: [M, K] bf16; w: [N, K] bf16; y: [M, N] f32 (accumulate
// allowed) or bf16. Needs K % 8 == 0 and 16-byte aligned x and w (gemv_supports).
inline constexpr int64_t kGemvMaxRows = 4;
bool gemv_supports(int64_t M, int64_t K, const void* x, const void* w);
void gemv(const bf16* x, const bf16* w, void* y, bool y_f32, bool accumulate, int64_t M, int64_t N, int64_t K,
          cudaStream_t stream);
// The gated MLP's input projection and its SiLU * up in one pass (gate and up never leave registers):
//   out[m, i] = silu(x[m] . w[i]) * (x[m] . w[I + i])     x: [M, K]; w: [2 I, K]; out: [M, I] bf16
void gemv_silu_mul(const bf16* x, const bf16* w, bf16* out, int64_t M, int64_t I, int64_t K, cudaStream_t stream);
// A bf16 tensor into FP8 E4M3 with one scale for all of it (the FP8 projections' operands):
//   s = max |x| / 448 (0 for an all-zero tensor), codes[m, k] = e4m3(x[m, k] * (1 / s))
// as tensor/fp8.h's quantize_e4m3_row over the M * K values (the CPU twin, bit for bit).
//   x: [M, K] bf16; row_amax: [M] f32 scratch; codes: [M, K]; scale: [1] f32 (device)
// Needs K % 8 == 0, x 16-byte and codes 8-byte aligned (quantize_e4m3_supports). row_amax_ready:
// row_amax already holds max_k |x[m, k]| (rmsnorm wrote it), so only the codes' kernel runs;
// else two kernels (row maxima, codes), or for M * K <= kQuantizeOneBlockElems one block of one
// kernel (row_amax is not written then).
inline constexpr int64_t kQuantizeOneBlockElems = 16384;
// Whether x of [M, K] without its row maxima is quantized by that one block (else two kernels, so
// a kernel before that writes the maxima saves one).
inline bool quantize_e4m3_in_one_block(int64_t M, int64_t K) { return M * K <= kQuantizeOneBlockElems; }
bool quantize_e4m3_supports(int64_t K, const void* x, const void* codes);
void quantize_e4m3_tensor(const bf16* x, int64_t M, int64_t K, float* row_amax, uint8_t* codes, float* scale,
                          cudaStream_t stream, bool row_amax_ready = false);

// Fed tokens (ForwardBatch::token_src; CPU twin feed_tokens): ids[t] = prev_ids[src[t]] where
// src[t] >= 0, unchanged where -1. src rows are checked on the host against prev_ids' length.
//   ids, src: [T] (device); prev_ids: the ids output of the forward before
void feed_tokens(int32_t* ids, const int32_t* src, const int32_t* prev_ids, int64_t T, cudaStream_t stream);

// Greedy sampling: out[r] = the index of the largest of logits[r * ld + 0 .. n), the lowest on ties.
//   logits: [R, ld] f32; out: [R]
void argmax_rows(const float* logits, int64_t R, int64_t ld, int64_t n, int32_t* out, cudaStream_t stream);

// Sampling (model/sampling.h's rule, CPU twin sample_row): out[r] = the id drawn from
// logits[r * ld + 0 .. n) with params[r]; greedy rows get argmax_rows' id.
//   logits: [R, ld] f32; params: [R] (device); out: [R]
void sample_rows(const float* logits, int64_t R, int64_t ld, int64_t n, const RowSampling* params, int32_t* out,
                 cudaStream_t stream);

// The fused attention prologue, one warp per (token, head) of the fused QKV projection output:
//   + bias -> per-head RMSNorm of q and k heads (Qwen3) -> capture pre-RoPE k and v into the
//   memory pool -> RoPE of q and k (angles from the host-built table, by position) -> q to
//   q_out, k and v into the paged cache at slot_mapping[t].
struct QkvRopeAppendArgs {
  const float* qkv;            // [T, NH + 2 * NKV, D] f32: q heads, then k heads, then v heads
  const float* bias;           // [(NH + 2 * NKV) * D] or null
  const float* q_norm;         // [D] or null (both null or both set)
  const float* k_norm;         // [D] or null
  const float* cos_table;      // [P, D / 2] f32, row p = Rope::angles(p); null: no rotation (encoders)
  const float* sin_table;      // [P, D / 2]
  const int32_t* positions;    // [T], each < P
  const int64_t* slot_mapping; // [T] cache slot
  const int64_t* capture_slot; // [T] pool slot or -1; null = no capture
  bf16* q_out;                 // [T, NH, D]
  KvCache cache;               // this layer's
  KvCache pool;                // this layer's memory pool rows [num_pool_slots, NKV, D], keys BEFORE
                               // RoPE (k, v null without a pool)
  int64_t T = 0;
  int32_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  float eps = 1e-6f;
  bool interleaved = false;    // rotate pairs (2i, 2i+1) instead of (i, i + D/2)
};
void qkv_rope_append(const QkvRopeAppendArgs& a, cudaStream_t stream);

// Memory injection, every layer in one launch: for token i and layer l
//   k_cache[l][dst[i]] = rope(k_pool[l][src[i]], positions[i]),   v_cache[l][dst[i]] = v_pool[l][src[i]]
// (an FP8 pool is read as its codes times their scales; an FP8 cache gets each written (slot, kv
// head) row quantized with its own scale)
struct InjectArgs {
  KvCache pool;                // every layer's, layer stride pool_layer_stride elements
  KvCache cache;               // every layer's, layer stride cache_layer_stride elements
  int64_t pool_layer_stride = 0, cache_layer_stride = 0;
  const int64_t* src_slots;    // [N] pool slots
  const int64_t* dst_slots;    // [N] cache slots
  const int32_t* positions;    // [N] serving positions
  const float* cos_table;      // [P, D / 2]
  const float* sin_table;
  int64_t N = 0;
  int32_t num_layers = 0, num_kv_heads = 0, head_dim = 0;
  bool interleaved = false;
};
void inject(const InjectArgs& a, cudaStream_t stream);

// Row copies across layers (read_cache/read_pool/write_pool):
//   gather:  dst[l][i] = src[l][slots[i]]        scatter: dst[l][slots[i]] = src[l][i]
// Rows of `row_bytes` bytes (a multiple of 4: bf16 rows, FP8 codes, a slot's f32 scales); src/dst
// layer strides in bytes (the packed side has stride n * row_bytes).
void copy_rows(const void* src, void* dst, const int64_t* slots, int64_t n, int64_t row_bytes, int32_t num_layers,
               int64_t src_layer_stride, int64_t dst_layer_stride, bool scatter, cudaStream_t stream);

// Paged attention over a plan (attention_plan.h), masked by position:
//   out[t, h] = softmax_j(q[t, h] . K[j, h / group] * scale) V[j, h / group],  j in [kv_start, positions[t]]
// `positions` are the mask's (step_attention.h mask_positions: the tokens' own for a causal mask,
// their sequence's last for a bidirectional one).
struct AttentionArgs {
  const bf16* q;               // [T, NH, D]
  KvCache cache;               // this layer's (FP8: the tensor-core kernel only)
  bf16* out;                   // [T, NH, D]
  const int32_t* positions;    // [T] mask positions
  const int32_t* kv_indptr;    // [S + 1]
  const int32_t* kv_indices;   // block ids
  const AttnWorkItem* items;   // [num_items]
  const AttnMergeItem* merges; // [num_merges]
  float* partial_o;            // [num_partials, NKV, rows_per_tile, D]
  float* partial_lse;          // [num_partials, NKV, rows_per_tile]
  // Launched CTAs. With `counts` (a CUDA graph: the plan changes between replays, the launch does
  // not) these are capacities (plan_capacity) and counts = device {items, merges} of this plan:
  // CTAs past them return at once.
  int32_t num_items = 0, num_merges = 0, rows_per_tile = 0;
  const int32_t* counts = nullptr;  // [2] or null
  int32_t merge_rows = 0;      // AttnPlan::max_merge_rows (a bound of it with counts)
  int32_t num_heads = 0, num_kv_heads = 0, head_dim = 0, block_size = 0;
  float scale = 1.0f;
  // Facts read in place (ForwardBatch::fact_*; the prefill tiles, bf16 cache and pool only): entry
  // j of sequence s in [fact_start[s], fact_start[s] + n) is pool slot fact_slots[fact_indptr[s] +
  // j - fact_start[s]] of `pool`, its key rotated at position j as it is read (the table's angles,
  // rope_pair: what injection would have stored). fact_indptr null: none.
  const int32_t* fact_indptr = nullptr;  // [S + 1]
  const int32_t* fact_start = nullptr;   // [S]
  const int32_t* fact_slots = nullptr;
  KvCache pool;                          // this layer's
  const float* cos_table = nullptr;      // [P, D / 2]
  const float* sin_table = nullptr;
  bool interleaved = false;
};
// One layer's attention weights of a probe (ForwardBatch::Probe; attention_probe.cu): row r is
// q[r] at positions[r]; for each head, the softmax weights over entries [kv_start, positions[r]]
// on the entries [key_begin, key_end), summed over the heads, are added into mass [rows, keys].
// Entry i is slot blocks[i / block_size] * block_size + i % block_size of `cache`, bf16 or FP8.
// head_dim a multiple of 8. The CPU twin is cpu::attention_mass.
struct AttentionMassArgs {
  const bf16* q = nullptr;            // [rows, NH, D]
  KvCache cache;                      // this layer's
  const int32_t* positions = nullptr; // [rows], device
  const int32_t* blocks = nullptr;    // the sequence's block table, device
  AttentionMassShape s;
};
void attention_mass(const AttentionMassArgs& a, float* mass, cudaStream_t stream);

// Tensor-core (mma.sync bf16, f32 accumulate) tiles of 64 packed rows x 64 kv entries; plan with
// kPrefillRowsPerTile / kPrefillKvChunk. Head dims 32 (bf16 caches), 64 and 128.
void attention_prefill(const AttentionArgs& a, cudaStream_t stream);
// The decode path, one token per tile (rows_per_tile == group <= 8), split-KV, head dims 64 and
// 128, on tensor cores with the kv entries as the MMA's rows (bf16 or FP8 caches;
// attention_decode_mma.cu).
void attention_decode_mma(const AttentionArgs& a, cudaStream_t stream);
// Combines split pieces (no-op when the plan has none; attention_merge.cu).
void attention_merge(const AttentionArgs& a, cudaStream_t stream);
// The kernel, then the merge.
inline void attention(const AttentionArgs& a, AttnKernel kernel, cudaStream_t stream) {
  switch (kernel) {
    case AttnKernel::kDecodeMma: attention_decode_mma(a, stream); break;
    case AttnKernel::kTiles: attention_prefill(a, stream); break;
  }
  attention_merge(a, stream);
}
// head_dim the attention runs: the tiles take 32, 64 and 128; the decode kernel and an FP8 cache
// only 64 and 128 (one-token sequences at 32 run on the tiles).
bool attention_supports_head_dim(int32_t head_dim);
bool decode_kernel_supports_head_dim(int32_t head_dim);
bool fp8_cache_supports_head_dim(int32_t head_dim);
// Retrieval: score[i] = matrix[i, :] . query (f32 accumulate), then the k best (score descending,
// ties to the lower id).  matrix: [N, D] f32 or bf16; query: [D] f32; ids/scores: [k] (k <= 1024, k <= N).
size_t similarity_topk_workspace_bytes(int64_t N, int32_t k);
void similarity_topk(const void* matrix, bool matrix_bf16, const float* query, int64_t N, int64_t D, int32_t k,
                     int32_t* out_ids, float* out_scores, void* workspace, size_t workspace_bytes, cudaStream_t stream);

// Seeded fill for benchmarks: normal(mean, std) rounded to bf16 (counter-based hash, deterministic).
void fill_random_bf16(bf16* p, int64_t n, uint64_t seed, float mean, float std, cudaStream_t stream);
void fill_f32(float* p, int64_t n, float value, cudaStream_t stream);
void fill_bf16(bf16* p, int64_t n, float value, cudaStream_t stream);

}  // namespace inferscale::cuda
