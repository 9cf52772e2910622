// The Llama family (LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, MistralForCausalLM):
//
//   x = embed[ids]
//   per layer:  h = rmsnorm(x) ; qkv = h Wqkv^T ; q, K, V = (+ bias, q/k RMSNorm, RoPE) ;
//               x += attention(q, K, V) Wo^T ;
//               h = rmsnorm(x) ; x += (silu(h Wgate^T) * h Wup^T) Wdown^T
//   out = rmsnorm(x[output rows]) [-> LM head -> logits | argmax]
//
// Both residual adds of a layer are row-parallel projections (ForwardOps::linear_reduce): under
// tensor parallelism each rank runs this forward over its heads and its part of the MLP
// (model/tensor_parallel.h), and the two adds are the layer's all-reduces.
//
// The differences inside the family are flags of ModelConfig: attention_bias (Qwen2: q/k/v
// biases), qk_norm (Qwen3), the RoPE scaling type, tied embeddings.
#include <memory>

#include "model/architecture.h"
#include "util/check.h"

namespace inferscale {
namespace {

// Activation slots (ForwardOps::act).
enum Slot : int { kX, kH, kQkv, kQ, kAttn, kGateUp, kFfn, kRows, kLogits, kIds };

struct Layer {
  Weight attn_norm;  // [H]
  Weight wqkv;       // [(NH + 2 NKV) D, H]  rows: wq, wk, wv
  Weight wo;         // [H, NH D]
  Weight ffn_norm;   // [H]
  Weight w_gate_up;  // [2 I, H]             rows: w_gate, w_up
  Weight w_down;     // [H, I]
  QkvStep qkv;       // biases (attention_bias), q/k norms (qk_norm), RoPE
};

class Llama final : public Architecture {
 public:
  explicit Llama(const ModelConfig& cfg) : cfg_(cfg) {}

  AttnMask mask() const override { return AttnMask::kCausal; }

  void load(ForwardOps& ops, const ModelWeights& w) override {
    IS_REQUIRE(static_cast<int64_t>(w.layers.size()) == cfg_.num_layers, kInvalidInput,
               "weights have {} layers, config {}", w.layers.size(), cfg_.num_layers);
    const int64_t H = cfg_.hidden_size, I = cfg_.intermediate_size, V = cfg_.vocab_size;
    const int64_t QS = cfg_.q_size(), KS = cfg_.kv_size();
    embed_ = ops.matrix({&expect_weight(w.embed, {V, H}, "embed")});
    final_norm_ = ops.vector({&expect_weight(w.final_norm, {H}, "final_norm")});
    // A tied head is the embedding itself; none (and untied): an embedding backbone, hidden states only.
    if (!w.lm_head.empty()) lm_head_ = w.lm_head.data == w.embed.data ? embed_ : ops.matrix({&expect_weight(w.lm_head, {V, H}, "lm_head")});
    for (const LayerWeights& l : w.layers) {
      Layer L;
      L.attn_norm = ops.vector({&expect_weight(l.attn_norm, {H}, "attn_norm")});
      L.wqkv = ops.projection({&expect_weight(l.wq, {QS, H}, "wq"), &expect_weight(l.wk, {KS, H}, "wk"), &expect_weight(l.wv, {KS, H}, "wv")});
      L.wo = ops.projection({&expect_weight(l.wo, {H, QS}, "wo")});
      L.ffn_norm = ops.vector({&expect_weight(l.ffn_norm, {H}, "ffn_norm")});
      L.w_gate_up = ops.projection({&expect_weight(l.w_gate, {I, H}, "w_gate"), &expect_weight(l.w_up, {I, H}, "w_up")});
      L.w_down = ops.projection({&expect_weight(l.w_down, {H, I}, "w_down")});
      if (cfg_.attention_bias) L.qkv.bias = ops.vector({&l.bq, &l.bk, &l.bv});
      if (cfg_.qk_norm) {
        L.qkv.q_norm = ops.vector({&expect_weight(l.q_norm, {cfg_.head_dim}, "q_norm")});
        L.qkv.k_norm = ops.vector({&expect_weight(l.k_norm, {cfg_.head_dim}, "k_norm")});
      }
      layers_.push_back(finish_layer(L));
    }
  }

  void load_random(ForwardOps& ops, uint64_t seed) override {
    const int64_t H = cfg_.hidden_size, I = cfg_.intermediate_size, V = cfg_.vocab_size, D = cfg_.head_dim;
    const int64_t QS = cfg_.q_size(), QKV = QS + 2 * cfg_.kv_size();
    uint64_t k = seed * 1000003ull;
    embed_ = ops.random_matrix(V, H, ++k, 0.02f);
    lm_head_ = cfg_.tie_word_embeddings ? embed_ : ops.random_matrix(V, H, ++k, 0.02f);
    final_norm_ = ops.filled_vector(H, 1.0f);
    for (int64_t l = 0; l < cfg_.num_layers; ++l) {
      Layer L;
      L.wqkv = ops.random_projection(QKV, H, ++k, 0.02f);
      L.wo = ops.random_projection(H, QS, ++k, 0.02f);
      L.w_gate_up = ops.random_projection(2 * I, H, ++k, 0.02f);
      L.w_down = ops.random_projection(H, I, ++k, 0.02f);
      L.attn_norm = ops.filled_vector(H, 1.0f);
      L.ffn_norm = ops.filled_vector(H, 1.0f);
      if (cfg_.attention_bias) L.qkv.bias = ops.filled_vector(QKV, 0.0f);
      if (cfg_.qk_norm) {
        L.qkv.q_norm = ops.filled_vector(D, 1.0f);
        L.qkv.k_norm = ops.filled_vector(D, 1.0f);
      }
      layers_.push_back(finish_layer(L));
    }
  }

  ForwardResult forward(ForwardOps& ops, const ForwardBatch& b) override {
    const bool hidden_out = b.output == ForwardBatch::Output::kHidden;
    IS_REQUIRE(hidden_out || b.output_tokens.empty() || !lm_head_.empty(), kUnsupported,
               "this model has no LM head (an embedding backbone): it yields hidden states, not logits");
    const int64_t T = b.num_tokens(), R = static_cast<int64_t>(b.output_tokens.size());
    const int64_t H = cfg_.hidden_size, I = cfg_.intermediate_size, V = cfg_.vocab_size;
    const int64_t QS = cfg_.q_size(), QKV = QS + 2 * cfg_.kv_size();
    const float eps = static_cast<float>(cfg_.rms_norm_eps);
    if (T == 0) return {};
    Act x = ops.act(kX, T, H, ActType::kF32);               // [T, H] residual stream
    Act h = ops.act(kH, T, H, ActType::kCompute);           // [T, H] normed
    Act qkv = ops.act(kQkv, T, QKV, ActType::kF32);         // [T, NH + 2 NKV, D]
    Act q = ops.act(kQ, T, QS, ActType::kCompute);          // [T, NH, D] rotated
    Act attn = ops.act(kAttn, T, QS, ActType::kCompute);    // [T, NH, D]
    Act gate_up = ops.act(kGateUp, T, 2 * I, ActType::kCompute);  // [T, 2 I]
    Act ffn = ops.act(kFfn, T, I, ActType::kCompute);       // [T, I]

    ops.embed(embed_, EmbedIndex::kTokenIds, x, /*accumulate=*/false);
    for (size_t l = 0; l < layers_.size(); ++l) {
      const Layer& L = layers_[l];
      ops.rms_norm(x, L.attn_norm, h, eps, false);
      ops.linear(h, L.wqkv, {}, qkv, false);
      ops.qkv(qkv, L.qkv, static_cast<int32_t>(l), q);
      ops.attention(q, static_cast<int32_t>(l), attn);
      ops.linear_reduce(attn, L.wo, x);
      ops.rms_norm(x, L.ffn_norm, h, eps, false);
      ops.linear_silu_mul(h, L.w_gate_up, gate_up, ffn);
      ops.linear_reduce(ffn, L.w_down, x);
    }

    // Output rows: the final norm of the rows asked for, then the LM head unless hidden states were.
    if (hidden_out) {
      Act rows = ops.act(kRows, R, H, ActType::kF32);  // [R, H]
      ops.rms_norm(x, final_norm_, rows, eps, /*output_rows=*/true);
      return {rows, false};
    }
    Act rows = ops.act(kRows, R, H, ActType::kCompute);   // [R, H]
    Act logits = ops.act(kLogits, R, V, ActType::kF32);   // [R, V]
    ops.rms_norm(x, final_norm_, rows, eps, /*output_rows=*/true);
    ops.linear(rows, lm_head_, {}, logits, false);
    if (b.output == ForwardBatch::Output::kArgmax || b.output == ForwardBatch::Output::kSample) {  // only R ids leave the device
      Act ids = ops.act(kIds, R, 1, ActType::kF32);
      if (b.output == ForwardBatch::Output::kArgmax)
        ops.argmax(logits, argmax_span(b, V), ids);
      else
        ops.sample(logits, argmax_span(b, V), ids);
      return {ids, true};
    }
    return {logits, false};
  }

 private:
  Layer finish_layer(Layer L) const {
    L.qkv.eps = static_cast<float>(cfg_.rms_norm_eps);
    L.qkv.rope = true;
    return L;
  }

  ModelConfig cfg_;
  Weight embed_, lm_head_, final_norm_;
  std::vector<Layer> layers_;
};

}  // namespace

std::unique_ptr<Architecture> make_llama_architecture(const ModelConfig& cfg) { return std::make_unique<Llama>(cfg); }

}  // namespace inferscale
