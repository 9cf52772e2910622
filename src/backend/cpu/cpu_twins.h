// CPU twins (f32/double) of the CUDA kernels that fuse several CPU-backend steps, written with
// the same building blocks the CPU backend uses (cpu::rmsnorm, Rope::rotate_with), so a parity
// test against them is a parity test against the CPU backend's arithmetic.
#pragma once
#include <cstdint>

#include "model/sampling.h"
#include "model/rope.h"

namespace inferscale::cpu {

// x[t, :] = embed[ids[t], :].   embed: [vocab, H]; x: [T, H]
void embedding(const float* embed, const int32_t* ids, float* x, int64_t T, int64_t H);

// Twin of cuda::qkv_rope_append: + bias -> per-head RMSNorm (q_norm/k_norm non-null) -> capture
// pre-RoPE k and v at capture_slot[t] >= 0 -> RoPE(positions[t]) of q and k -> q_out and the
// cache rows at slot_mapping[t].
//   qkv: [T, NH + 2 NKV, D]; bias: [(NH + 2 NKV) D] or null; q_out: [T, NH, D];
//   caches and pools: [slots, NKV, D]
struct QkvRopeAppendRef {
  const float* qkv = nullptr;
  const float* bias = nullptr;
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  const int32_t* positions = nullptr;
  const int64_t* slot_mapping = nullptr;
  const int64_t* capture_slot = nullptr;  // null: no capture
  float* q_out = nullptr;
  float* k_cache = nullptr;
  float* v_cache = nullptr;
  float* k_pool = nullptr;
  float* v_pool = nullptr;
  int64_t T = 0;
  int32_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  float eps = 1e-6f;
};
void qkv_rope_append(const QkvRopeAppendRef& a, const Rope& rope);

// Twin of cuda::inject: for every layer l and token i
//   k_cache[l][dst[i]] = rope(k_pool[l][src[i]], positions[i]);  v_cache[l][dst[i]] = v_pool[l][src[i]]
// Layer strides in elements; rows of NKV * D.
void inject(const float* k_pool, const float* v_pool, float* k_cache, float* v_cache, int64_t pool_layer_stride,
            int64_t cache_layer_stride, const int64_t* src, const int64_t* dst, const int32_t* positions, int64_t N,
            int32_t num_layers, int32_t num_kv_heads, const Rope& rope);

// Twin of cuda::similarity_topk: scores in double, best k by (score desc, id asc).
//   matrix: [N, D]; query: [D]; ids, scores: [k]
void similarity_topk(const float* matrix, const float* query, int64_t N, int64_t D, int32_t k, int32_t* ids,
                     float* scores);

// Twin of cuda::argmax_rows, and the CPU backend's kArgmax: out[r] = the index of the largest of
// logits[r * ld + 0 .. n), the lowest on ties.
void argmax_rows(const float* logits, int64_t R, int64_t ld, int64_t n, int32_t* out);

// Twin of cuda::sample_rows, and the CPU backend's kSample: out[r] = sample_row(logits[r * ld ..],
// n, params[r]) (model/sampling.h).   logits: [R, ld]; params, out: [R]
void sample_rows(const float* logits, int64_t R, int64_t ld, int64_t n, const RowSampling* params, int32_t* out);

}  // namespace inferscale::cpu
