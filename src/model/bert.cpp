// BertModel encoders (all-MiniLM-L6-v2, bge-small, e5-small, gte-small share this layout):
//
//   x = LayerNorm(word[ids] + token_type[0] + position[positions])
//   per layer (post-LayerNorm):
//     qkv = x Wqkv^T + bqkv ;  q, K, V = split heads (no RoPE)
//     x = LayerNorm(x + attention(q, K, V) Wo^T + bo)         bidirectional within a sequence
//     x = LayerNorm(x + gelu(x Win^T + bin) Wout^T + bout)     gelu: the exact (erf) form
//   out = x[output rows]   (BertModel's last_hidden_state; pooling is the embedder's)
//
// Every sequence of a batch is whole (positions 0 .. n-1): attention sees exactly its own tokens,
// which is what transformers computes for a padded batch with an attention mask. Inputs are a
// single segment (token type 0), as sentence-transformers feeds them.
#include <memory>

#include "model/architecture.h"
#include "util/check.h"

namespace inferscale {
namespace {

enum Slot : int { kX, kXc, kQkv, kQ, kCtx, kInter, kRows };

struct Layer {
  Weight wqkv, bqkv;          // [3 H, H], [3 H]   rows: query, key, value
  Weight wo, bo;              // [H, H], [H]
  Weight attn_ln_w, attn_ln_b;
  Weight w_in, b_in;          // [I, H], [I]
  Weight w_out, b_out;        // [H, I], [H]
  Weight ffn_ln_w, ffn_ln_b;
};

class Bert final : public Architecture {
 public:
  explicit Bert(const ModelConfig& cfg) : cfg_(cfg) {}

  AttnMask mask() const override { return AttnMask::kBidirectional; }

  void load(ForwardOps& ops, const ModelWeights& mw) override {
    const BertWeights& w = mw.bert;
    IS_REQUIRE(!w.empty() && static_cast<int64_t>(w.layers.size()) == cfg_.num_layers, kInvalidInput,
               "BERT weights have {} layers, config {}", w.layers.size(), cfg_.num_layers);
    const int64_t H = cfg_.hidden_size, I = cfg_.intermediate_size;
    word_ = ops.matrix({&expect_weight(w.word, {cfg_.vocab_size, H}, "word_embeddings")});
    position_ = ops.matrix({&expect_weight(w.position, {cfg_.max_position_embeddings, H}, "position_embeddings")});
    token_type_ = ops.matrix({&expect_weight(w.token_type, {cfg_.type_vocab_size, H}, "token_type_embeddings")});
    emb_ln_w_ = ops.vector({&expect_weight(w.emb_ln_w, {H}, "embeddings.LayerNorm.weight")});
    emb_ln_b_ = ops.vector({&expect_weight(w.emb_ln_b, {H}, "embeddings.LayerNorm.bias")});
    for (const BertLayerWeights& l : w.layers) {
      Layer L;
      L.wqkv = ops.matrix({&expect_weight(l.wq, {H, H}, "query"), &expect_weight(l.wk, {H, H}, "key"),
                           &expect_weight(l.wv, {H, H}, "value")});
      L.bqkv = ops.vector({&expect_weight(l.bq, {H}, "query.bias"), &expect_weight(l.bk, {H}, "key.bias"),
                           &expect_weight(l.bv, {H}, "value.bias")});
      L.wo = ops.matrix({&expect_weight(l.wo, {H, H}, "attention.output.dense")});
      L.bo = ops.vector({&expect_weight(l.bo, {H}, "attention.output.dense.bias")});
      L.attn_ln_w = ops.vector({&expect_weight(l.attn_ln_w, {H}, "attention.output.LayerNorm.weight")});
      L.attn_ln_b = ops.vector({&expect_weight(l.attn_ln_b, {H}, "attention.output.LayerNorm.bias")});
      L.w_in = ops.matrix({&expect_weight(l.w_in, {I, H}, "intermediate.dense")});
      L.b_in = ops.vector({&expect_weight(l.b_in, {I}, "intermediate.dense.bias")});
      L.w_out = ops.matrix({&expect_weight(l.w_out, {H, I}, "output.dense")});
      L.b_out = ops.vector({&expect_weight(l.b_out, {H}, "output.dense.bias")});
      L.ffn_ln_w = ops.vector({&expect_weight(l.ffn_ln_w, {H}, "output.LayerNorm.weight")});
      L.ffn_ln_b = ops.vector({&expect_weight(l.ffn_ln_b, {H}, "output.LayerNorm.bias")});
      layers_.push_back(L);
    }
  }

  void load_random(ForwardOps& ops, uint64_t seed) override {
    const int64_t H = cfg_.hidden_size, I = cfg_.intermediate_size;
    uint64_t k = seed * 1000003ull;
    word_ = ops.random_matrix(cfg_.vocab_size, H, ++k, 0.02f);
    position_ = ops.random_matrix(cfg_.max_position_embeddings, H, ++k, 0.02f);
    token_type_ = ops.random_matrix(cfg_.type_vocab_size, H, ++k, 0.02f);
    emb_ln_w_ = ops.filled_vector(H, 1.0f);
    emb_ln_b_ = ops.filled_vector(H, 0.0f);
    for (int64_t l = 0; l < cfg_.num_layers; ++l) {
      Layer L;
      L.wqkv = ops.random_matrix(3 * H, H, ++k, 0.02f);
      L.bqkv = ops.filled_vector(3 * H, 0.0f);
      L.wo = ops.random_matrix(H, H, ++k, 0.02f);
      L.bo = ops.filled_vector(H, 0.0f);
      L.w_in = ops.random_matrix(I, H, ++k, 0.02f);
      L.b_in = ops.filled_vector(I, 0.0f);
      L.w_out = ops.random_matrix(H, I, ++k, 0.02f);
      L.b_out = ops.filled_vector(H, 0.0f);
      L.attn_ln_w = L.ffn_ln_w = ops.filled_vector(H, 1.0f);
      L.attn_ln_b = L.ffn_ln_b = ops.filled_vector(H, 0.0f);
      layers_.push_back(L);
    }
  }

  ForwardResult forward(ForwardOps& ops, const ForwardBatch& b) override {
    IS_REQUIRE(b.output == ForwardBatch::Output::kHidden, kUnsupported,
               "a BERT encoder yields hidden states, not logits (it has no LM head)");
    IS_REQUIRE(b.capture_tokens.empty(), kUnsupported, "a BERT encoder keeps no KV for memory facts");
    check_whole_sequences(b);
    const int64_t T = b.num_tokens(), R = static_cast<int64_t>(b.output_tokens.size());
    const int64_t H = cfg_.hidden_size, I = cfg_.intermediate_size;
    const float eps = static_cast<float>(cfg_.layer_norm_eps);
    if (T == 0) return {};
    Act x = ops.act(kX, T, H, ActType::kF32);                // [T, H] hidden states (the residual)
    Act xc = ops.act(kXc, T, H, ActType::kCompute);          // [T, H] x as the linears read it
    Act qkv = ops.act(kQkv, T, 3 * H, ActType::kF32);        // [T, 3, NH, D]
    Act q = ops.act(kQ, T, H, ActType::kCompute);            // [T, NH, D]
    Act ctx = ops.act(kCtx, T, H, ActType::kCompute);        // [T, NH, D] attention output
    Act inter = ops.act(kInter, T, I, ActType::kCompute);    // [T, I]

    // Embeddings, in transformers' order: word + token type, then + position; then LayerNorm.
    ops.embed(word_, EmbedIndex::kTokenIds, x, /*accumulate=*/false);
    ops.embed(token_type_, EmbedIndex::kFirstRow, x, /*accumulate=*/true);
    ops.embed(position_, EmbedIndex::kPositions, x, /*accumulate=*/true);
    // Post-LayerNorm: the normed x is both the next residual (f32) and the next linear's input
    // (compute precision); each LayerNorm writes both, the copy first (in place last).
    auto norm = [&](const Weight& w, const Weight& b) {
      ops.layer_norm(x, w, b, xc, eps);
      ops.layer_norm(x, w, b, x, eps);
    };
    norm(emb_ln_w_, emb_ln_b_);
    QkvStep split;  // biases are in the projection; no q/k norm
    split.rope = false;
    for (size_t l = 0; l < layers_.size(); ++l) {
      const Layer& L = layers_[l];
      ops.linear(xc, L.wqkv, L.bqkv, qkv, false);
      ops.qkv(qkv, split, static_cast<int32_t>(l), q);
      ops.attention(q, static_cast<int32_t>(l), ctx);
      ops.linear(ctx, L.wo, L.bo, x, /*accumulate=*/true);  // x += ctx Wo^T + bo
      norm(L.attn_ln_w, L.attn_ln_b);
      ops.linear(xc, L.w_in, L.b_in, inter, false);
      ops.gelu(inter);
      ops.linear(inter, L.w_out, L.b_out, x, /*accumulate=*/true);
      norm(L.ffn_ln_w, L.ffn_ln_b);
    }
    Act rows = ops.act(kRows, R, H, ActType::kF32);  // [R, H]
    ops.gather_output_rows(x, rows);
    return {rows, false};
  }

 private:
  // Bidirectional attention is exact only over whole sequences: each starts at position 0 (its
  // kv_start) and runs without gaps; positions are inside the position table.
  void check_whole_sequences(const ForwardBatch& b) const {
    for (int32_t s = 0; s < b.num_seqs(); ++s) {
      const int32_t start = b.kv_start.empty() ? 0 : b.kv_start[static_cast<size_t>(s)];
      for (int32_t t = b.q_indptr[s]; t < b.q_indptr[s + 1]; ++t) {
        const int32_t want = start + (t - b.q_indptr[s]);
        IS_REQUIRE(b.positions[static_cast<size_t>(t)] == want, kInvalidInput,
                   "an encoder forward needs whole sequences: token {} of sequence {} is at position {}, expected {}",
                   t - b.q_indptr[s], s, b.positions[static_cast<size_t>(t)], want);
      }
      IS_REQUIRE(start + (b.q_indptr[s + 1] - b.q_indptr[s]) <= cfg_.max_position_embeddings, kInvalidInput,
                 "sequence {} of {} tokens is longer than the encoder's {} positions", s,
                 b.q_indptr[s + 1] - b.q_indptr[s], cfg_.max_position_embeddings);
    }
  }

  ModelConfig cfg_;
  Weight word_, position_, token_type_, emb_ln_w_, emb_ln_b_;
  std::vector<Layer> layers_;
};

}  // namespace

std::unique_ptr<Architecture> make_bert_architecture(const ModelConfig& cfg) { return std::make_unique<Bert>(cfg); }

}  // namespace inferscale
