// What a sentence-transformers model directory says about turning hidden states into a sentence
// vector: modules.json (Transformer -> Pooling -> [Normalize]), the Pooling module's config.json
// (pooling_mode_mean_tokens / _cls_token / _lasttoken) and sentence_bert_config.json
// (max_seq_length).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "memory/retrieval/hidden_state_embedder.h"

namespace inferscale {

struct SentenceTransformersConfig {
  Pooling pooling = Pooling::kMean;
  bool normalize = false;      // a Normalize module follows the pooling
  int32_t max_seq_length = 0;  // 0: not given
};

// nullopt when `model_dir` is not a directory with modules.json. kUnsupported for a pooling mode
// other than mean, CLS or last token (max, mean_sqrt_len, weighted mean), or several at once;
// kInvalidInput for malformed files.
std::optional<SentenceTransformersConfig> read_sentence_transformers_config(const std::string& model_dir);

}  // namespace inferscale
