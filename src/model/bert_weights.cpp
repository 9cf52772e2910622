#include "model/bert_weights.h"

namespace inferscale {
namespace {

using Shape = std::vector<int64_t>;
Shape h(const ModelConfig& c) { return {c.hidden_size}; }
Shape hh(const ModelConfig& c) { return {c.hidden_size, c.hidden_size}; }
Shape i(const ModelConfig& c) { return {c.intermediate_size}; }
Shape ih(const ModelConfig& c) { return {c.intermediate_size, c.hidden_size}; }
Shape hi(const ModelConfig& c) { return {c.hidden_size, c.intermediate_size}; }

const BertLayerRole kLayerRoles[] = {
    {"wq", "attention.self.query.weight", &BertLayerWeights::wq, hh},
    {"bq", "attention.self.query.bias", &BertLayerWeights::bq, h},
    {"wk", "attention.self.key.weight", &BertLayerWeights::wk, hh},
    {"bk", "attention.self.key.bias", &BertLayerWeights::bk, h},
    {"wv", "attention.self.value.weight", &BertLayerWeights::wv, hh},
    {"bv", "attention.self.value.bias", &BertLayerWeights::bv, h},
    {"wo", "attention.output.dense.weight", &BertLayerWeights::wo, hh},
    {"bo", "attention.output.dense.bias", &BertLayerWeights::bo, h},
    {"attn_ln_w", "attention.output.LayerNorm.weight", &BertLayerWeights::attn_ln_w, h},
    {"attn_ln_b", "attention.output.LayerNorm.bias", &BertLayerWeights::attn_ln_b, h},
    {"w_in", "intermediate.dense.weight", &BertLayerWeights::w_in, ih},
    {"b_in", "intermediate.dense.bias", &BertLayerWeights::b_in, i},
    {"w_out", "output.dense.weight", &BertLayerWeights::w_out, hi},
    {"b_out", "output.dense.bias", &BertLayerWeights::b_out, h},
    {"ffn_ln_w", "output.LayerNorm.weight", &BertLayerWeights::ffn_ln_w, h},
    {"ffn_ln_b", "output.LayerNorm.bias", &BertLayerWeights::ffn_ln_b, h},
};

const BertEmbeddingRole kEmbeddingRoles[] = {
    {"word", "word_embeddings.weight", &BertWeights::word, [](const ModelConfig& c) { return Shape{c.vocab_size, c.hidden_size}; }},
    {"position", "position_embeddings.weight", &BertWeights::position,
     [](const ModelConfig& c) { return Shape{c.max_position_embeddings, c.hidden_size}; }},
    {"token_type", "token_type_embeddings.weight", &BertWeights::token_type,
     [](const ModelConfig& c) { return Shape{c.type_vocab_size, c.hidden_size}; }},
    {"emb_ln_w", "LayerNorm.weight", &BertWeights::emb_ln_w, h},
    {"emb_ln_b", "LayerNorm.bias", &BertWeights::emb_ln_b, h},
};

}  // namespace

std::span<const BertLayerRole> bert_layer_roles() { return kLayerRoles; }
std::span<const BertEmbeddingRole> bert_embedding_roles() { return kEmbeddingRoles; }

}  // namespace inferscale
