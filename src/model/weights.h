// The tensors of a Llama-family decoder, by role, in their stored dtype (f32/f16/bf16).
// HF layout: linear weights are [out_features, in_features] row-major.
#pragma once
#include <vector>

#include "tensor/host_tensor.h"

namespace inferscale {

struct LayerWeights {
  HostTensor attn_norm;         // [hidden]
  HostTensor wq;                // [num_heads * head_dim, hidden]
  HostTensor wk;                // [num_kv_heads * head_dim, hidden]
  HostTensor wv;                // [num_kv_heads * head_dim, hidden]
  HostTensor wo;                // [hidden, num_heads * head_dim]
  HostTensor bq, bk, bv;        // [q_size], [kv_size], [kv_size]; empty unless attention_bias
  HostTensor q_norm, k_norm;    // [head_dim]; empty unless qk_norm
  HostTensor ffn_norm;          // [hidden]
  HostTensor w_gate;            // [intermediate, hidden]
  HostTensor w_up;              // [intermediate, hidden]
  HostTensor w_down;            // [hidden, intermediate]
};

struct ModelWeights {
  HostTensor embed;             // [vocab, hidden]
  HostTensor final_norm;        // [hidden]
  HostTensor lm_head;           // [vocab, hidden]; shares embed's storage when tied; empty for a
                                // headless embedding backbone (no logits)
  std::vector<LayerWeights> layers;
};

}  // namespace inferscale
