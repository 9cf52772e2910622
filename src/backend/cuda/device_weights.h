// The model's weights on the GPU: matrices bf16 (fused where one GEMM serves several
// projections), vectors (norm weights, biases) f32. One allocation holds everything.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "backend/cuda/device_buffer.h"
#include "model/config.h"

namespace inferscale {

struct ModelWeights;

struct DeviceLayer {
  const __nv_bfloat16* wqkv = nullptr;       // [(NH + 2 * NKV) * D, H]  rows: wq, then wk, then wv
  const __nv_bfloat16* wo = nullptr;         // [H, NH * D]
  const __nv_bfloat16* w_gate_up = nullptr;  // [2 * I, H]               rows: w_gate, then w_up
  const __nv_bfloat16* w_down = nullptr;     // [H, I]
  const float* attn_norm = nullptr;          // [H]
  const float* ffn_norm = nullptr;           // [H]
  const float* bqkv = nullptr;               // [(NH + 2 * NKV) * D] or null (attention_bias)
  const float* q_norm = nullptr;             // [D] or null (qk_norm)
  const float* k_norm = nullptr;             // [D] or null
};

class DeviceWeights {
 public:
  // Converts (f32/f16/bf16 -> bf16 matrices, f32 vectors) and uploads `w`.
  static DeviceWeights upload(const ModelConfig& cfg, const ModelWeights& w);
  // Seeded random weights made on the GPU (benchmarks): matrices normal(0, 0.02), norms 1, biases 0.
  static DeviceWeights random(const ModelConfig& cfg, uint64_t seed);

  const __nv_bfloat16* embed = nullptr;    // [vocab, H]
  const __nv_bfloat16* lm_head = nullptr;  // [vocab, H]; == embed when tied; null: no head (embedding backbone)
  const float* final_norm = nullptr;       // [H]
  std::vector<DeviceLayer> layers;
  size_t bytes() const { return arena_.bytes(); }

 private:
  DeviceBuffer arena_;
};

}  // namespace inferscale
