// The seam for model-based embedders: a decoder model run by our engine returns final hidden
// states for token ids; this class tokenizes, batches, pools (last token or mean) and
// L2-normalizes. The model side plugs in as two callbacks, so this file needs no engine.
//
// Hidden states of a batch are ragged and concatenated, one row per token:
//
//   batch:   | seq 0: t0 t1 t2 | seq 1: t3 | seq 2: t4 t5 |
//   hidden:  [3 + 1 + 2, hidden_dim] row-major, rows in the same order
//   last:    rows 2, 3, 5          mean: rows 0..2, 3..3, 4..5          cls: rows 0, 3, 4
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "memory/retrieval/embedder.h"

namespace inferscale {

// kCls: the first token ([CLS] of BERT encoders); kMean: every token of the sequence.
enum class Pooling { kLastToken, kMean, kCls };
const char* pooling_name(Pooling p);  // "last", "mean", "cls"

// Pools concatenated hidden states ([sum(lengths), dim]) into one row per sequence ([n, dim]).
// Mean pooling accumulates in double. kInvalidInput for an empty sequence or a size mismatch.
std::vector<float> pool_hidden_states(std::span<const float> hidden, std::span<const int64_t> lengths, int32_t dim,
                                      Pooling pooling);
// Scales each row of [rows, dim] to unit L2 norm; an all-zero row stays zero.
void l2_normalize_rows(std::span<float> data, int32_t dim);

class HiddenStateEmbedder final : public Embedder {
 public:
  // Token ids of a text, as the embedding model expects them (BOS/EOS included).
  using TokenizeFn = std::function<std::vector<int32_t>(std::string_view text)>;
  // Final (normed) hidden states of a batch of sequences, concatenated: [sum(len), dim].
  using HiddenStatesFn = std::function<std::vector<float>(const std::vector<std::vector<int32_t>>& batch)>;

  struct Options {
    std::string name;               // the stored-vector key; include model and pooling
    int32_t dim = 0;                // hidden size of the model
    Pooling pooling = Pooling::kLastToken;
    bool normalize = true;          // L2 (inner product = cosine)
    size_t max_batch = 16;          // sequences per HiddenStatesFn call
    std::string query_prefix;       // prepended to queries ("Instruct: ...\nQuery: ")
  };

  HiddenStateEmbedder(Options opts, TokenizeFn tokenize, HiddenStatesFn hidden_states);

  std::string name() const override { return opts_.name; }
  int32_t dim() const override { return opts_.dim; }
  std::vector<float> embed(std::span<const std::string> texts) override;
  std::vector<float> embed_query(std::string_view query) override;

 private:
  Options opts_;
  TokenizeFn tokenize_;
  HiddenStatesFn hidden_states_;
};

}  // namespace inferscale
