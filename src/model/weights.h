// The tensors of a model, by role, in their stored dtype (f32/f16/bf16, or a GGUF block-quantized
// type that the backends dequantize when they take the weights): a Llama-family decoder's in
// embed / final_norm / lm_head / layers, a BERT encoder's in `bert` (model/bert_weights.h).
// HF layout: linear weights are [out_features, in_features] row-major.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "model/bert_weights.h"
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
  BertWeights bert;             // Arch::kBert only (the decoder fields above stay empty)
};

// Calls fn(role, tensor) for every non-empty tensor, once per storage: a tied lm_head (embed's
// storage) is skipped. Roles: "embed", "final_norm", "lm_head", "layers.{i}.wq", ...; BERT's
// "bert.word", ..., "bert.layers.{i}.wq", ...
void for_each_weight(const ModelWeights& w, const std::function<void(const std::string&, const HostTensor&)>& fn);

// What the weights hold as stored (quantized tensors count their block bytes).
struct WeightStats {
  struct PerDType {
    int64_t tensors = 0;
    int64_t bytes = 0;
  };
  int64_t bytes = 0;
  std::map<DType, PerDType> by_dtype;
  // "q4_1 x210 (63.3 MiB), q8_0 x1 (28.7 MiB), f32 x61 (137.2 KiB)": by bytes, largest first.
  std::string dtypes_summary() const;
};
WeightStats weight_stats(const ModelWeights& w);

}  // namespace inferscale
