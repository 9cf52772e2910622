#include "model/weight_loader.h"

#include <spdlog/spdlog.h>

#include <set>

#include "model/gguf.h"
#include "model/safetensors.h"
#include "util/check.h"

namespace inferscale {

namespace {

using Shape = std::vector<int64_t>;

// One per-layer tensor role: where it goes, its name in each naming, its shape, whether this config has it.
struct LayerRole {
  HostTensor LayerWeights::*field;
  const char* hf;
  const char* gguf;
  Shape (*shape)(const ModelConfig&);
  bool (*present)(const ModelConfig&);
};

bool always(const ModelConfig&) { return true; }
bool with_bias(const ModelConfig& c) { return c.attention_bias; }
bool with_qk_norm(const ModelConfig& c) { return c.qk_norm; }

const LayerRole kLayerRoles[] = {
    {&LayerWeights::attn_norm, "input_layernorm.weight", "attn_norm.weight",
     [](const ModelConfig& c) { return Shape{c.hidden_size}; }, always},
    {&LayerWeights::wq, "self_attn.q_proj.weight", "attn_q.weight",
     [](const ModelConfig& c) { return Shape{c.q_size(), c.hidden_size}; }, always},
    {&LayerWeights::wk, "self_attn.k_proj.weight", "attn_k.weight",
     [](const ModelConfig& c) { return Shape{c.kv_size(), c.hidden_size}; }, always},
    {&LayerWeights::wv, "self_attn.v_proj.weight", "attn_v.weight",
     [](const ModelConfig& c) { return Shape{c.kv_size(), c.hidden_size}; }, always},
    {&LayerWeights::wo, "self_attn.o_proj.weight", "attn_output.weight",
     [](const ModelConfig& c) { return Shape{c.hidden_size, c.q_size()}; }, always},
    {&LayerWeights::bq, "self_attn.q_proj.bias", "attn_q.bias", [](const ModelConfig& c) { return Shape{c.q_size()}; },
     with_bias},
    {&LayerWeights::bk, "self_attn.k_proj.bias", "attn_k.bias", [](const ModelConfig& c) { return Shape{c.kv_size()}; },
     with_bias},
    {&LayerWeights::bv, "self_attn.v_proj.bias", "attn_v.bias", [](const ModelConfig& c) { return Shape{c.kv_size()}; },
     with_bias},
    {&LayerWeights::q_norm, "self_attn.q_norm.weight", "attn_q_norm.weight",
     [](const ModelConfig& c) { return Shape{c.head_dim}; }, with_qk_norm},
    {&LayerWeights::k_norm, "self_attn.k_norm.weight", "attn_k_norm.weight",
     [](const ModelConfig& c) { return Shape{c.head_dim}; }, with_qk_norm},
    {&LayerWeights::ffn_norm, "post_attention_layernorm.weight", "ffn_norm.weight",
     [](const ModelConfig& c) { return Shape{c.hidden_size}; }, always},
    {&LayerWeights::w_gate, "mlp.gate_proj.weight", "ffn_gate.weight",
     [](const ModelConfig& c) { return Shape{c.intermediate_size, c.hidden_size}; }, always},
    {&LayerWeights::w_up, "mlp.up_proj.weight", "ffn_up.weight",
     [](const ModelConfig& c) { return Shape{c.intermediate_size, c.hidden_size}; }, always},
    {&LayerWeights::w_down, "mlp.down_proj.weight", "ffn_down.weight",
     [](const ModelConfig& c) { return Shape{c.hidden_size, c.intermediate_size}; }, always},
};

// Names a checkpoint may carry that the forward never needs (non-persistent buffers saved by old
// transformers versions).
bool harmless(const std::string& name) {
  return name.ends_with("rotary_emb.inv_freq") || name.ends_with("embeddings.position_ids");
}

class Mapper {
 public:
  Mapper(const ModelConfig& cfg, const TensorSource& src) : cfg_(cfg), src_(src) {}

  HostTensor take(const std::string& name, const Shape& want) {
    std::optional<HostTensor> t = src_.find(name);
    IS_REQUIRE(t.has_value(), kNotFound, "tensor '{}' not found in {}", name, src_.where);
    IS_REQUIRE(t->shape == want, kInvalidInput, "tensor '{}' in {} has shape {}, expected {} for this config", name,
               src_.where, t->shape_str(), HostTensor::view(t->dtype, want, nullptr).shape_str());
    used_.insert(name);
    return *t;
  }
  void mark_used(const std::string& name) { used_.insert(name); }

  void warn_unused() const {
    std::vector<std::string> unused;
    for (const std::string& n : src_.names)
      if (!used_.count(n) && !harmless(n)) unused.push_back(n);
    if (unused.empty()) return;
    std::string list;
    for (size_t i = 0; i < unused.size() && i < 5; ++i) list += (i ? ", " : "") + unused[i];
    spdlog::warn("{}: {} tensor(s) not used by the {} model: {}{}", src_.where, unused.size(), arch_name(cfg_.arch),
                 list, unused.size() > 5 ? ", ..." : "");
  }

 private:
  const ModelConfig& cfg_;
  const TensorSource& src_;
  std::set<std::string> used_;
};


// BertModel: "embeddings.*", "encoder.layer.{i}.*", all under "bert." when saved from a BertFor*
// head; the pooler (BertModel's tanh dense over [CLS]) is not used by sentence encoders.
ModelWeights map_bert_weights(const ModelConfig& cfg, const TensorSource& src) {
  IS_REQUIRE(!src.names.empty(), kNotFound, "no tensors in {}", src.where);
  Mapper m(cfg, src);
  const std::string root = src.find("bert.embeddings.word_embeddings.weight") ? "bert." : "";
  ModelWeights w;
  for (const BertEmbeddingRole& r : bert_embedding_roles()) w.bert.*r.field = m.take(root + "embeddings." + r.hf, r.shape(cfg));
  w.bert.layers.resize(static_cast<size_t>(cfg.num_layers));
  for (int64_t i = 0; i < cfg.num_layers; ++i)
    for (const BertLayerRole& r : bert_layer_roles())
      w.bert.layers[static_cast<size_t>(i)].*r.field =
          m.take(root + "encoder.layer." + std::to_string(i) + "." + r.hf, r.shape(cfg));
  for (const std::string& n : src.names)
    if (n.starts_with(root + "pooler.")) m.mark_used(n);
  m.warn_unused();
  return w;
}

}  // namespace

ModelWeights map_weights(const ModelConfig& cfg, WeightNaming naming, const TensorSource& src) {
  const bool hf = naming == WeightNaming::kHF;
  if (cfg.arch == Arch::kBert) {
    IS_REQUIRE(hf, kUnsupported, "BERT encoders load from HF safetensors, not {}", src.where);
    return map_bert_weights(cfg, src);
  }
  Mapper m(cfg, src);
  ModelWeights w;
  const Shape vocab_by_hidden{cfg.vocab_size, cfg.hidden_size};
  // A bare backbone (embedding checkpoints such as Qwen3-Embedding, saved from Qwen3Model) names
  // its tensors without the "model." prefix and may have no LM head.
  const bool backbone = hf && !src.find("model.embed_tokens.weight") && src.find("embed_tokens.weight");
  const std::string root = !hf ? "" : backbone ? "" : "model.";
  w.embed = m.take(hf ? root + "embed_tokens.weight" : "token_embd.weight", vocab_by_hidden);  // [vocab, hidden]
  w.final_norm = m.take(hf ? root + "norm.weight" : "output_norm.weight", Shape{cfg.hidden_size});
  const std::string head = hf ? "lm_head.weight" : "output.weight";
  if (cfg.tie_word_embeddings) {
    w.lm_head = w.embed;  // the same storage; a head tensor in the file is ignored, as transformers does
    m.mark_used(head);
  } else if (backbone && !src.find(head)) {
    spdlog::info("{}: no {} (an embedding backbone): the model yields hidden states, not logits", src.where, head);
  } else {
    w.lm_head = m.take(head, vocab_by_hidden);
  }
  w.layers.resize(static_cast<size_t>(cfg.num_layers));
  for (int64_t i = 0; i < cfg.num_layers; ++i) {
    const std::string prefix = (hf ? root + "layers." : "blk.") + std::to_string(i) + ".";
    LayerWeights& lw = w.layers[static_cast<size_t>(i)];
    for (const LayerRole& r : kLayerRoles)
      if (r.present(cfg)) lw.*r.field = m.take(prefix + (hf ? r.hf : r.gguf), r.shape(cfg));
  }
  m.warn_unused();
  return w;
}

ModelWeights load_weights(const ModelConfig& cfg, const SafetensorsCheckpoint& ckpt) {
  TensorSource src;
  src.find = [&ckpt](const std::string& n) -> std::optional<HostTensor> {
    if (!ckpt.has(n)) return std::nullopt;
    return ckpt.get(n);
  };
  src.names = ckpt.names();
  src.where = ckpt.source();
  return map_weights(cfg, WeightNaming::kHF, src);
}

ModelWeights load_weights(const ModelConfig& cfg, const GgufFile& gguf) {
  TensorSource src;
  src.find = [&gguf](const std::string& n) -> std::optional<HostTensor> {
    if (!gguf.has_tensor(n)) return std::nullopt;
    return gguf.tensor(n);
  };
  for (const auto& [name, t] : gguf.tensors()) src.names.push_back(name);
  src.where = gguf.path();
  return map_weights(cfg, WeightNaming::kGGUF, src);
}

}  // namespace inferscale
