// The tensors of a BertModel encoder (model/bert.cpp), by role, in their stored dtype.
// HF layout: linear weights are [out_features, in_features] row-major.
//
//   role            HF name (encoder.layer.{i}.…; "bert." before all when saved from a BertFor* head)
//   word            embeddings.word_embeddings.weight          [vocab, H]
//   position        embeddings.position_embeddings.weight      [max_position_embeddings, H]
//   token_type      embeddings.token_type_embeddings.weight    [type_vocab_size, H]
//   emb_ln_w/_b     embeddings.LayerNorm.{weight,bias}          [H]
//   per layer: the kBertLayerRoles table below
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/config.h"
#include "tensor/host_tensor.h"

namespace inferscale {

struct BertLayerWeights {
  HostTensor wq, bq, wk, bk, wv, bv;  // [H, H], [H]: attention.self.{query,key,value}
  HostTensor wo, bo;                  // [H, H], [H]: attention.output.dense
  HostTensor attn_ln_w, attn_ln_b;    // [H]: attention.output.LayerNorm
  HostTensor w_in, b_in;              // [I, H], [I]: intermediate.dense
  HostTensor w_out, b_out;            // [H, I], [H]: output.dense
  HostTensor ffn_ln_w, ffn_ln_b;      // [H]: output.LayerNorm
};

struct BertWeights {
  HostTensor word, position, token_type, emb_ln_w, emb_ln_b;
  std::vector<BertLayerWeights> layers;
  bool empty() const { return word.empty(); }
};

// One per-layer tensor: its role, HF name after "encoder.layer.{i}.", field and shape.
struct BertLayerRole {
  const char* role;
  const char* hf;
  HostTensor BertLayerWeights::*field;
  std::vector<int64_t> (*shape)(const ModelConfig&);
};
std::span<const BertLayerRole> bert_layer_roles();

// One embedding tensor: role, HF name after "embeddings.", field and shape.
struct BertEmbeddingRole {
  const char* role;
  const char* hf;
  HostTensor BertWeights::*field;
  std::vector<int64_t> (*shape)(const ModelConfig&);
};
std::span<const BertEmbeddingRole> bert_embedding_roles();

}  // namespace inferscale
