// CPU reference kernels (fp32). Each CUDA kernel has its twin here; parity tests compare them.
#pragma once
#include <cstdint>

#include "backend/attention_mass_shape.h"
#include "model/rope.h"
#include "util/thread_pool.h"

namespace inferscale::cpu {

// y[T, out] = x[T, in] @ w[out, in]^T (+ bias[out] when non-null). OpenBLAS sgemm.
void linear(const float* x, const float* w, const float* bias, float* y, int64_t T, int64_t in, int64_t out);
// The same into rows of `ldy` floats (a column slice of a wider output: y[t * ldy + o]).
void linear(const float* x, const float* w, const float* bias, float* y, int64_t T, int64_t in, int64_t out, int64_t ldy);

// Row-wise RMSNorm: y[r, :] = x[r, :] / sqrt(mean(x^2) + eps) * w. In place allowed (y == x).
void rmsnorm(const float* x, const float* w, float* y, int64_t rows, int64_t dim, float eps, ThreadPool* pool = nullptr);

// Row-wise LayerNorm: y[r, :] = (x[r, :] - mean) / sqrt(var + eps) * w + b, statistics in
// double. In place allowed.
void layer_norm(const float* x, const float* w, const float* b, float* y, int64_t rows, int64_t dim, float eps,
                ThreadPool* pool = nullptr);

// x = gelu(x) = x / 2 (1 + erf(x / sqrt 2)) in place (BERT's "gelu", not the tanh form).
void gelu(float* x, int64_t n, ThreadPool* pool = nullptr);

// out[T, inter] = silu(gate[T, inter]) * up[T, inter]
void silu_mul(const float* gate, const float* up, float* out, int64_t n, ThreadPool* pool = nullptr);

// Paged attention. For token t of sequence s (q_indptr), head h:
//   out[t, h] = softmax_j(q[t, h] . K[s, j, h / group] * scale) V[s, j, h / group],
//   j in [kv_start[s], positions[t]]   (causal; kv_start null = all 0), or
//   j in [kv_start[s], the last position of s in this batch]   (!causal: encoders)
// where entry j of sequence s lives in slot kv_indices[kv_indptr[s] + j / bs] * bs + j % bs.
// or, for entries inside the sequence's in-place facts (`facts`), in memory-pool slots, the key
// rotated at position j as it is read (forward_batch.h fact_indptr).
//   q:   [T, num_heads, head_dim]
//   k/v_cache: [num_blocks, block_size, num_kv_heads, head_dim]
//   out: [T, num_heads, head_dim]
// One layer of a KV store as readers gather it: f32 rows [slots, NKV, D], or (f32 null) FP8 codes
// [slots, NKV, D] with scales [slots, NKV], read as codes times scales (tensor/fp8.h).
struct KvLayerRows {
  const float* k = nullptr;
  const float* v = nullptr;
  const uint8_t* k_codes = nullptr;
  const uint8_t* v_codes = nullptr;
  const float* k_scales = nullptr;
  const float* v_scales = nullptr;
};

// Facts read in place (ForwardBatch::fact_*): the pool's layer, its slots per sequence, and RoPE
// angles of every entry's position (cos/sin [positions, head_dim / 2], Rope::angles' floats, so a
// key rotated here equals one rotated by injection bit for bit).
struct FactsInPlace {
  const int32_t* indptr = nullptr;  // [S + 1]; null: no sequence reads facts in place
  const int32_t* start = nullptr;   // [S]
  const int32_t* slots = nullptr;
  KvLayerRows pool;
  const float* cos = nullptr;
  const float* sin = nullptr;
  const Rope* rope = nullptr;
};

struct PagedAttentionArgs {
  const float* q;
  const float* k_cache;
  const float* v_cache;
  float* out;
  const int32_t* positions;   // [T]
  const int32_t* q_indptr;    // [S + 1]
  const int32_t* kv_indptr;   // [S + 1]
  const int32_t* kv_indices;  // block ids
  const int32_t* kv_start;    // [S] or null
  int32_t num_seqs;
  int32_t num_heads;
  int32_t num_kv_heads;
  int32_t head_dim;
  int32_t block_size;
  float scale;
  bool causal = true;
  // An FP8 cache (k_cache and v_cache null): codes [slots, NKV, D] and scales [slots, NKV]; rows
  // are read as codes times scales (tensor/fp8.h).
  const uint8_t* k_codes = nullptr;
  const uint8_t* v_codes = nullptr;
  const float* k_scales = nullptr;
  const float* v_scales = nullptr;
  FactsInPlace facts;
};
// Parallel over (token, head) pairs on `pool` (serial when null).
void paged_attention(const PagedAttentionArgs& a, ThreadPool* pool = nullptr);

// One layer's attention weights of a sequence's query rows on a range of its entries
// (ForwardBatch::Probe), added into mass [rows, key_end - key_begin]. Row r is the query q[r]
// [num_heads, head_dim] at position positions[r]; for each head h,
//   w_j = softmax_i(q[r, h] . K[i, h / group] * scale)_j,   i in [kv_start, positions[r]]
//   mass[r, j - key_begin] += w_j                            j in [key_begin, key_end)
// with entry i in slot blocks[i / block_size] * block_size + i % block_size of `cache` (f32 or
// FP8 rows, as paged_attention reads them). The CUDA twin is cuda::attention_mass.
struct AttentionMassArgs {
  const float* q = nullptr;  // [rows, num_heads, head_dim]
  KvLayerRows cache;
  const int32_t* positions = nullptr;  // [rows]
  const int32_t* blocks = nullptr;     // the sequence's block table
  AttentionMassShape s;
};
void attention_mass(const AttentionMassArgs& a, float* mass);

}  // namespace inferscale::cpu
