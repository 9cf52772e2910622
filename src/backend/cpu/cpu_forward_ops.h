// ForwardOps on the CPU: f32 weights (views of f32 tensors, converted copies of the rest), f32
// activations (kCompute is f32 too), OpenBLAS GEMMs, the blocking thread pool elsewhere. Stacked
// matrices stay separate parts, each its own GEMM into its columns of the output, so a fused
// projection computes exactly what separate ones do.
#pragma once
#include <cstdint>
#include <deque>
#include <vector>

#include "backend/cpu/cpu_kv_store.h"
#include "backend/cpu/rank_reduce.h"
#include "model/config.h"
#include "model/forward_ops.h"
#include "model/rope.h"
#include "tensor/host_tensor.h"
#include "util/thread_pool.h"

namespace inferscale {

// The KV memory the forward writes: per layer, the paged cache [num_blocks * bs, NKV, D] and the
// memory pool [num_pool_blocks * bs, NKV, D] (keys before RoPE), each f32 or FP8 (cpu_kv_store.h).
struct CpuKv {
  CpuKvStore cache;
  CpuKvStore pool;
  int64_t cache_slots = 0;
};

class CpuForwardOps final : public ForwardOps {
 public:
  // linear_rows: linears of 2 to cpu::kLinearRowsMax rows stream each weight row once on the
  // pool (cpu_linear_rows.h) where the CPU can; false: OpenBLAS for every linear.
  // quant_linears: linears of at most cpu::kQuantRowsMax rows over a matrix whose every part is
  // stored in a block type with a kernel (Q4_1, Q8_0) read those blocks instead of the f32 copy.
  // e4m3_projections (--quantization fp8): the projections' numbers as the GPU's FP8 path makes
  // them (backend/fp8_projections.h), computed in f32: each matrix rounded to E4M3 with one scale,
  // and x rounded the same way (the GPU runs W8A8). For measuring quality; no faster.
  // rank: this ops' place among tensor-parallel ranks (cfg then one rank's shard_config): its
  // all_reduce sums over the ranks through rank.reduce.
  CpuForwardOps(const ModelConfig& cfg, CpuKv& kv, int32_t block_size, int32_t num_threads, bool linear_rows = true,
                bool quant_linears = true, bool e4m3_projections = false, CpuRank rank = {});

  Weight matrix(std::initializer_list<const HostTensor*> parts) override;
  Weight vector(std::initializer_list<const HostTensor*> parts) override;
  Weight random_matrix(int64_t rows, int64_t cols, uint64_t seed, float std) override;
  Weight filled_vector(int64_t n, float value) override;
  Weight projection(std::initializer_list<const HostTensor*> parts) override;
  Weight random_projection(int64_t rows, int64_t cols, uint64_t seed, float std) override;

  void begin(const ForwardBatch& b, AttnMask mask) override;
  Act act(int slot, int64_t rows, int64_t cols, ActType type) override;
  void embed(const Weight& table, EmbedIndex index, Act x, bool accumulate) override;
  void rms_norm(Act x, const Weight& w, Act y, float eps, bool output_rows) override;
  void layer_norm(Act x, const Weight& w, const Weight& b, Act y, float eps) override;
  void linear(Act x, const Weight& w, const Weight& bias, Act y, bool accumulate) override;
  int32_t tensor_rank() const override { return rank_.rank; }
  void all_reduce(Act y) override;
  void qkv(Act qkv, const QkvStep& step, int32_t layer, Act q) override;
  void attention(Act q, int32_t layer, Act out) override;
  void silu_mul(Act gu, Act out) override;
  void gelu(Act x) override;
  void gather_output_rows(Act x, Act rows) override;
  void argmax(Act logits, int64_t n, Act ids) override;
  void sample(Act logits, int64_t n, Act ids) override;
  void finish(Act result, bool ids, ForwardOutput& out) override;

  const Rope& rope() const { return rope_; }
  ThreadPool& threads() { return threads_; }

 private:
  // A matrix: its parts' f32 rows, stacked (each part [rows[i], cols]).
  struct Matrix {
    std::vector<HostTensor> parts;
    // The parts as the model stores them (views), when every one is in a block type
    // cpu::linear_rows_quant reads; else empty.
    std::vector<HostTensor> blocks;
    bool e4m3 = false;  // an emulated FP8 projection: one part, values rounded to E4M3
  };
  // The last matrix made ([rows, cols]) as an emulated FP8 projection, in place (its Weight stays
  // valid): its parts stacked into one, rounded with one scale.
  void round_back_e4m3(int64_t rows, int64_t cols);
  Weight keep_vector(HostTensor t);
  // Each part j's rows [n0, n1) through rows(j, n0, n1, y + the part's first column), all parts
  // in one parallel_for.
  template <typename RowsFn>
  void linear_parts(const Matrix& m, int64_t K, float* y, const RowsFn& rows);

  ModelConfig cfg_;
  CpuKv& kv_;
  Rope rope_;
  int32_t block_size_;
  ThreadPool threads_;  // attention, norms, activations, linears of a few rows; other GEMMs use OpenBLAS's threads
  bool linear_rows_, quant_linears_, e4m3_projections_;
  CpuRank rank_;
  std::vector<float> x_e4m3_;  // a linear's x rounded to E4M3 (emulated W8A8)
  std::deque<Matrix> matrices_;     // Weight::impl of matrices points here (stable addresses)
  std::deque<HostTensor> vectors_;  // ... of vectors here
  std::vector<std::vector<float>> acts_;  // per slot
  std::vector<float> scratch_;      // a linear's product before it is added (accumulate)
  std::vector<float> block_sums_;   // [T, K / 32] a few-rows linear's x by block (cpu::block_sums)
  const ForwardBatch* batch_ = nullptr;
  AttnMask mask_ = AttnMask::kCausal;
  std::vector<float> cos_, sin_;    // [T, D / 2] RoPE angles of the batch's positions
  // [P, D / 2] RoPE angles of positions 0 .. P - 1 (Rope::angles), grown to cover every in-place
  // fact entry a forward reads: their keys are rotated as attention reads them.
  std::vector<float> table_cos_, table_sin_;
  void ensure_rope_table(int64_t positions);
  void probe_attention(Act q, int32_t layer);
  std::vector<float> capture_;      // [C, NKV D] staging of captured rows
  std::vector<float> probe_mass_;   // [ForwardBatch::probe_mass_size()] summed over the layers so far
};

}  // namespace inferscale
