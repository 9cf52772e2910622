// The operations an architecture's forward is written in (model/llama.cpp, model/bert.cpp), and
// that every backend implements with its own kernels: the architecture decides the order of a
// model's layers and names each intermediate; the backend decides precision, memory and fusion
// (cuBLASLt GEMMs, the fused bias/qk-norm/RoPE/append kernel, ...). No op knows which model it
// serves.
//
// Weights are prepared once, when the backend is made (load), and referred to by handle. A matrix
// may stack several checkpoint tensors by rows (wq; wk; wv), so that a backend can run it as one
// GEMM; a linear over it writes the parts side by side in its output columns.
//
// Activations are buffers the backend keeps across forwards (grown on demand), one per slot
// number the architecture picks; their element type is the backend's for the role:
//   kF32      f32 everywhere (the residual stream, projections that feed f32 kernels, outputs)
//   kCompute  the backend's GEMM-input precision (f32 on the CPU, bf16 on the GPU)
#pragma once
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "model/forward_batch.h"
#include "tensor/host_tensor.h"

namespace inferscale {

// A prepared weight: rows x cols (a vector has rows == 1). `impl` belongs to the backend, and so
// does `scale`: non-null for a quantized matrix (projection()), whose impl then holds its codes.
struct Weight {
  const void* impl = nullptr;
  int64_t rows = 0, cols = 0;
  const void* scale = nullptr;
  bool empty() const { return impl == nullptr; }
  bool quantized() const { return scale != nullptr; }
};

enum class ActType { kF32, kCompute };

struct Act {
  void* data = nullptr;
  int64_t rows = 0, cols = 0;
  ActType type = ActType::kF32;
};

// What a forward leaves for the host (ForwardOps::finish): `rows` of values, or (ids) of int32
// ids; empty (no data) when the batch had no tokens.
struct ForwardResult {
  Act rows;
  bool ids = false;
  bool empty() const { return rows.data == nullptr; }
};

// Which keys a token attends to (ForwardBatch): kCausal: entries [kv_start, its position] of its
// sequence (decoders); kBidirectional: entries [kv_start, the sequence's last position in this
// batch] (encoders: every sequence is whole in one batch, so a padding mask is implicit: no
// token sees another sequence).
enum class AttnMask { kCausal, kBidirectional };

// Rows an embedding lookup takes for token t: its id, its position, or row 0 (BERT's token type
// of a single-segment input).
enum class EmbedIndex { kTokenIds, kPositions, kFirstRow };

// The per-head steps between the QKV projection and attention.
//   qkv: [T, NH + 2 NKV, D] (f32)  ->  q: [T, NH, D], K and V rows into layer `layer`'s cache at
//   the batch's slot_mapping; the batch's capture tokens keep K (before RoPE) and V in the pool.
struct QkvStep {
  Weight bias;            // [(NH + 2 NKV) D] added first, or empty
  Weight q_norm, k_norm;  // [D] per-head RMSNorm of q and k (qk_norm), or empty
  float eps = 1e-6f;      // of q_norm / k_norm
  bool rope = true;       // rotate q and k at their positions
};

class ForwardOps {
 public:
  virtual ~ForwardOps() = default;

  // ---- weights, at load time
  // Rows of `parts` stacked, in order; all parts have the same number of columns.
  virtual Weight matrix(std::initializer_list<const HostTensor*> parts) = 0;
  // f32 values of `parts` concatenated; empty when every part is empty.
  virtual Weight vector(std::initializer_list<const HostTensor*> parts) = 0;
  // Benchmarks: seeded normal(0, std) matrix / a vector of one value, made by the backend itself.
  virtual Weight random_matrix(int64_t rows, int64_t cols, uint64_t seed, float std) = 0;
  virtual Weight filled_vector(int64_t n, float value) = 0;
  // A transformer block's projection matrix (QKV, output, MLP; not the embedding or LM head): the
  // weights a backend may store quantized when asked to (--quantization fp8 on the GPU). These
  // defaults keep them as every other matrix.
  virtual Weight projection(std::initializer_list<const HostTensor*> parts) { return matrix(parts); }
  virtual Weight random_projection(int64_t rows, int64_t cols, uint64_t seed, float std) {
    return random_matrix(rows, cols, seed, std);
  }

  // ---- one forward
  // Checks the batch against the backend (cache and pool slots, token ids) and prepares what
  // every layer shares (metadata uploads, RoPE angles, the attention plan for `mask`).
  virtual void begin(const ForwardBatch& b, AttnMask mask) = 0;
  virtual Act act(int slot, int64_t rows, int64_t cols, ActType type) = 0;

  // x[t] (+)= table[index(t)]                  table: [rows, H]; x: [T, H] f32
  virtual void embed(const Weight& table, EmbedIndex index, Act x, bool accumulate) = 0;
  // y = rmsnorm(x) * w per row; output_rows: y holds only the batch's output_tokens rows ([R, H]).
  virtual void rms_norm(Act x, const Weight& w, Act y, float eps, bool output_rows) = 0;
  // y = (x - mean) / sqrt(var + eps) * w + b per row (in place allowed); x f32, y f32 or kCompute.
  virtual void layer_norm(Act x, const Weight& w, const Weight& b, Act y, float eps) = 0;
  // y (+)= x w^T (+ bias)                      x: [M, K]; w: [N, K]; y: [M, N]
  virtual void linear(Act x, const Weight& w, const Weight& bias, Act y, bool accumulate) = 0;
  // A row-parallel projection into the residual stream: y += x w^T, where under tensor
  // parallelism (model/tensor_parallel.h) x and w hold this rank's columns only, so each rank's
  // product is a partial sum. Rank 0 adds its partial to y (the residual stream every rank holds),
  // the others overwrite y with theirs, and the all-reduce leaves y + every partial on every rank.
  // One rank: the linear itself.
  void linear_reduce(Act x, const Weight& w, Act y) {
    linear(x, w, {}, y, /*accumulate=*/tensor_rank() == 0);
    all_reduce(y);
  }
  // This ops' tensor-parallel rank, and the sum of `y` over the ranks, in place and the same on
  // every rank (f32). One rank (these defaults): rank 0, nothing to sum.
  virtual int32_t tensor_rank() const { return 0; }
  virtual void all_reduce(Act y) {}
  virtual void qkv(Act qkv, const QkvStep& step, int32_t layer, Act q) = 0;
  // out[t, h] = softmax(q[t, h] . K / sqrt(D)) V over layer `layer`'s cache, masked as begin() said.
  virtual void attention(Act q, int32_t layer, Act out) = 0;
  // out = silu(gu[:, :I]) * gu[:, I:]          gu: [T, 2 I]; out: [T, I]
  virtual void silu_mul(Act gu, Act out) = 0;
  // The gated MLP's input projection: out = silu_mul(x w^T)   x: [T, K]; w: [2 I, K]; gu: [T, 2 I]
  // scratch; out: [T, I]. This default is linear into gu, then silu_mul; a backend may fuse the
  // two (gu's contents are then unspecified).
  virtual void linear_silu_mul(Act x, const Weight& w, Act gu, Act out) {
    linear(x, w, {}, gu, false);
    silu_mul(gu, out);
  }
  // x = gelu(x), the exact (erf) form, in place.
  virtual void gelu(Act x) = 0;
  // rows = x[output_tokens]                    [R, H]
  virtual void gather_output_rows(Act x, Act rows) = 0;
  // ids[r] = argmax of logits[r, 0 .. n), the lowest id on ties.
  virtual void argmax(Act logits, int64_t n, Act ids) = 0;
  // ids[r] = sample_row(logits[r, 0 .. n), batch.sampling[r]) (model/sampling.h).
  virtual void sample(Act logits, int64_t n, Act ids) = 0;
  // The forward's result to the host: `result`'s values into out.values, or (ids) its int32 ids
  // into out.ids; the other is cleared.
  virtual void finish(Act result, bool ids, ForwardOutput& out) = 0;
};

}  // namespace inferscale
