// Maps a checkpoint's tensors to ModelWeights by role, checking every shape against the config.
// Tensors stay in their stored dtype and are views into the file's mapping (no copy).
//
//   role          HF name (model.layers.{i}.…)             GGUF name (blk.{i}.…)   shape
//   embed         model.embed_tokens.weight                token_embd.weight       [vocab, hidden]
//   attn_norm     input_layernorm.weight                   attn_norm.weight        [hidden]
//   wq / wk / wv  self_attn.{q,k,v}_proj.weight            attn_{q,k,v}.weight     [q_size | kv_size, hidden]
//   wo            self_attn.o_proj.weight                  attn_output.weight      [hidden, q_size]
//   bq / bk / bv  self_attn.{q,k,v}_proj.bias              attn_{q,k,v}.bias       [q_size | kv_size] (attention_bias)
//   q/k_norm      self_attn.{q,k}_norm.weight              attn_{q,k}_norm.weight  [head_dim] (qk_norm)
//   ffn_norm      post_attention_layernorm.weight          ffn_norm.weight         [hidden]
//   w_gate/w_up   mlp.{gate,up}_proj.weight                ffn_{gate,up}.weight    [intermediate, hidden]
//   w_down        mlp.down_proj.weight                     ffn_down.weight         [hidden, intermediate]
//   final_norm    model.norm.weight                        output_norm.weight      [hidden]
//   lm_head       lm_head.weight                           output.weight           [vocab, hidden]; = embed when tied
//
// HF embedding backbones (saved from Qwen3Model/Qwen2Model) name tensors without "model." and may
// lack lm_head.weight although untied: their lm_head stays empty (hidden states only, no logits).
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/weights.h"

namespace inferscale {

class SafetensorsCheckpoint;
class GgufFile;

enum class WeightNaming { kHF, kGGUF };

// Named tensors of some file: `find` returns nullopt when the name is absent (and may throw for a
// tensor it cannot serve, e.g. an unsupported dtype); `names` lists all; `where` names the source.
struct TensorSource {
  std::function<std::optional<HostTensor>(const std::string&)> find;
  std::vector<std::string> names;
  std::string where;
};

// Throws kNotFound naming a missing tensor and kInvalidInput naming a tensor and both shapes.
// Tensors the mapping does not use are reported in one warning (they may mean an unsupported feature).
ModelWeights map_weights(const ModelConfig& cfg, WeightNaming naming, const TensorSource& src);

ModelWeights load_weights(const ModelConfig& cfg, const SafetensorsCheckpoint& ckpt);  // HF names
ModelWeights load_weights(const ModelConfig& cfg, const GgufFile& gguf);               // GGUF names

}  // namespace inferscale
