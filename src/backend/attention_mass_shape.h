// The shape of one probe's attention weights in one layer (ForwardBatch::Probe), as the CPU twin
// (cpu::attention_mass) and the CUDA kernel (cuda::attention_mass) take it; probe_mass_shape
// reads it off a batch. A plain struct: nvcc's translation units include it.
#pragma once
#include <cstdint>

namespace inferscale {

struct AttentionMassShape {
  int32_t kv_start = 0;  // the sequence's first attended entry
  int32_t rows = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0, block_size = 0;
  int32_t key_begin = 0, key_end = 0;  // the entries whose weights are kept
  float scale = 1.0f;                  // of q . k
  int32_t keys() const { return key_end - key_begin; }
};

}  // namespace inferscale
