// An Embedder over an embedding model run by our own backend: a decoder (Qwen3-Embedding,
// gte-Qwen2 layout: final-normed hidden states) or a BERT encoder (all-MiniLM-L6-v2, bge, e5, gte:
// last_hidden_state, each text whole in one forward): texts -> token ids -> packed forwards
// (packed_prefill.h) -> hidden states -> pooling (last token, mean or CLS) -> L2 normalization
// (HiddenStateEmbedder). The tokenizer is the model's (Tokenizer interface).
//
//   text  -> [head][content, truncated][tail][eos]    head/tail: what the tokenizer adds around a
//                                                      text (BOS, a post-processor's suffix); eos:
//                                                      appended for last-token pooling when asked
//   query -> the same, after the query prefix ("Instruct: {task}\nQuery: ")
//
// The embedder owns its model, its backend and a block manager over that backend's cache, whose
// blocks hold sequences only while they are being embedded. embed() is called from the engine
// thread and from HTTP threads (query embedding): one mutex serializes the backend.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "engine/block_manager.h"
#include "memory/retrieval/hidden_state_embedder.h"
#include "model/model.h"

namespace inferscale {

struct ModelEmbedderOptions {
  Pooling pooling = Pooling::kLastToken;
  bool normalize = true;               // L2: inner product = cosine
  int32_t max_tokens = 512;            // a text's tokens, special tokens included; longer texts are truncated
                                       // (with a log line); encoders: at most max_position_embeddings
  int32_t max_batch_tokens = 2048;     // tokens per forward; a longer text is split across forwards
  std::optional<int32_t> eos_id;       // appended to every text unless its tokens already end with it
  std::string query_prefix;            // prepended to query texts
  std::string name;                    // the stored-vector key; empty: derived (model, pooling, settings)
};

// The id last-token pooling models end their inputs with: "<|endoftext|>" when the vocabulary
// has it (Qwen embedding models), else the tokenizer's first end id; none for mean pooling.
std::optional<int32_t> default_embedder_eos(const Tokenizer& tok, Pooling pooling);
// Cache blocks the embedder's backend needs: one forward's budget plus one whole text.
int64_t embedder_cache_blocks(const ModelEmbedderOptions& opts, int32_t block_size);

// Hidden states ([sum(len), hidden], model_embedder.h's hidden_states()) of `batch` through
// `backend`, packed into forwards of at most max_batch_tokens tokens; only the rows `pooling`
// reads leave the backend. whole_sequences: encoders (no text split across forwards).
// forwarded: tokens run, when non-null.
std::vector<float> embedding_hidden_states(Backend& backend, BlockManager& blocks, int32_t max_batch_tokens,
                                           const std::vector<std::vector<int32_t>>& batch, Pooling pooling,
                                           bool whole_sequences, int64_t* forwarded = nullptr);

class ModelEmbedder final : public Embedder {
 public:
  // `backend` runs `model` (its cache must hold embedder_cache_blocks() blocks) and is used by
  // this embedder only.
  ModelEmbedder(std::shared_ptr<const Model> model, std::unique_ptr<Backend> backend, ModelEmbedderOptions opts);

  std::string name() const override { return inner_->name(); }
  int32_t dim() const override { return inner_->dim(); }
  std::vector<float> embed(std::span<const std::string> texts) override { return inner_->embed(texts); }
  std::vector<float> embed_query(std::string_view query) override { return inner_->embed_query(query); }

  // The token ids a text is embedded from.
  std::vector<int32_t> tokenize(std::string_view text) const;
  // Hidden states of each sequence's tokens (final-normed for decoders), concatenated:
  // [sum(len), hidden]. With last-token / CLS pooling only each sequence's last / first row is
  // computed; the others are zero.
  // Thread-safe.
  std::vector<float> hidden_states(const std::vector<std::vector<int32_t>>& batch);
  int64_t tokens_processed() const;
  const ModelEmbedderOptions& options() const { return opts_; }

 private:
  std::shared_ptr<const Model> model_;
  std::unique_ptr<Backend> backend_;  // declared after model_: destroyed first (it may view the weights)
  ModelEmbedderOptions opts_;
  std::vector<int32_t> head_, tail_;  // what encode(add_special) puts around a text
  mutable std::mutex mu_;             // guards backend_, blocks_ and tokens_
  BlockManager blocks_;
  int64_t tokens_ = 0;
  std::unique_ptr<HiddenStateEmbedder> inner_;
};

}  // namespace inferscale
