// ForwardOps on the GPU (sm_90), one stream, the host waiting once per forward (finish()):
//   weights      matrices bf16 (stacked parts stay one matrix: the fused QKV and gate/up GEMMs),
//                vectors f32 (DeviceWeightStore)
//   activations  kF32 f32; kCompute bf16 (GEMM inputs)
//   linear       cuBLASLt, bf16 x bf16 -> f32 accumulate; accumulate = beta 1 (the residual adds)
//   qkv          the fused bias / qk-norm / capture / RoPE / append kernel
//   attention    tensor-core tiles or the CUDA-core decode path, planned in begin(); causal only
// Not (yet) on the GPU: LayerNorm, GELU, position embeddings, linear biases, bidirectional
// attention (BERT encoders run on the CPU backend; cuda_unsupported_reason says so first).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "backend/cuda/attention_plan.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/device_weights.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/meta_upload.h"
#include "backend/cuda/rope_table.h"
#include "model/config.h"
#include "model/forward_ops.h"

namespace inferscale {

// The KV memory a forward writes (owned by the backend): per layer l, cache rows at
// k_cache + l * cache_layer_stride ([slots, NKV, D] bf16), pool the same with keys before RoPE.
struct CudaKv {
  __nv_bfloat16* k_cache = nullptr;
  __nv_bfloat16* v_cache = nullptr;
  __nv_bfloat16* k_pool = nullptr;  // null without a pool
  __nv_bfloat16* v_pool = nullptr;
  int64_t cache_layer_stride = 0, pool_layer_stride = 0;  // elements
  int64_t cache_slots = 0, pool_slots = 0;
};

// Where the forward's GPU time goes: events recorded around it on the stream.
struct CudaTiming {
  cudaEvent_t start = nullptr, stop = nullptr;
  float* last_ms = nullptr;
};

enum class DecodeAttention;

class CudaForwardOps final : public ForwardOps {
 public:
  CudaForwardOps(const ModelConfig& cfg, const CudaKv& kv, RopeTable& rope, int32_t block_size, cudaStream_t stream,
                 CudaTiming timing);

  void set_decode_attention(DecodeAttention kind) { decode_attention_ = kind; }
  size_t weight_bytes() const { return weights_.bytes(); }

  Weight matrix(std::initializer_list<const HostTensor*> parts) override;
  Weight vector(std::initializer_list<const HostTensor*> parts) override;
  Weight random_matrix(int64_t rows, int64_t cols, uint64_t seed, float std) override;
  Weight filled_vector(int64_t n, float value) override;

  void begin(const ForwardBatch& b, AttnMask mask) override;
  Act act(int slot, int64_t rows, int64_t cols, ActType type) override;
  void embed(const Weight& table, EmbedIndex index, Act x, bool accumulate) override;
  void rms_norm(Act x, const Weight& w, Act y, float eps, bool output_rows) override;
  void layer_norm(Act x, const Weight& w, const Weight& b, Act y, float eps) override;
  void linear(Act x, const Weight& w, const Weight& bias, Act y, bool accumulate) override;
  void qkv(Act qkv, const QkvStep& step, int32_t layer, Act q) override;
  void attention(Act q, int32_t layer, Act out) override;
  void silu_mul(Act gu, Act out) override;
  void gelu(Act x) override;
  void gather_output_rows(Act x, Act rows) override;
  void argmax(Act logits, int64_t n, Act ids) override;
  void sample(Act logits, int64_t n, Act ids) override;
  void finish(Act result, bool ids, std::vector<float>& out) override;

 private:
  ModelConfig cfg_;
  CudaKv kv_;
  RopeTable& rope_;
  int32_t block_size_;
  cudaStream_t stream_;
  CudaTiming timing_;
  int num_sms_ = 132;
  DecodeAttention decode_attention_;
  DeviceWeightStore weights_;
  Gemm gemm_;
  MetaUpload meta_;
  PinnedBuffer out_host_;  // staging of the output rows (pinned: a fast copy; then into the caller's vector)
  std::vector<DeviceBuffer> acts_;  // per slot, grown on demand
  DeviceBuffer part_o_, part_lse_;  // split-KV partials
  // Per forward (begin()).
  const ForwardBatch* batch_ = nullptr;
  bool decode_ = false;
  size_t o_ids_ = 0, o_pos_ = 0, o_slot_ = 0, o_cap_ = 0, o_out_ = 0, o_samp_ = 0;
  bool capture_ = false;
  cuda::AttentionArgs aa_{};
};

}  // namespace inferscale
