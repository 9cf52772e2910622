// Byte-level BPE tokenizers in HF's format (Llama 3, Qwen2.5): tokenizer.json, or Qwen2's "slow"
// files (vocab.json + merges.txt + tokenizer_config.json added tokens). Both translate the files
// into a BpeTokenizerSpec; the pipeline is BpeTokenizer's (bpe_tokenizer.h).
// Unsupported tokenizer.json features throw Error(kUnsupported) naming the feature.
#pragma once
#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "tokenizer/bpe_tokenizer.h"

namespace inferscale {

class HfTokenizer : public BpeTokenizer {
 public:
  // Parses a tokenizer.json file; errors name the file.
  static std::shared_ptr<HfTokenizer> from_file(const std::string& path);
  // `source` names the origin in error messages.
  static std::shared_ptr<HfTokenizer> from_json(const nlohmann::json& j, const std::string& source);
  // Qwen2Tokenizer slow files: vocab.json, merges.txt and the added_tokens_decoder of
  // tokenizer_config.json (`config`), with Qwen2's fixed pipeline (NFC, its split regex, ByteLevel).
  static std::shared_ptr<HfTokenizer> from_qwen2_files(const std::string& vocab_json, const std::string& merges_txt,
                                                       const nlohmann::json& config);

 private:
  explicit HfTokenizer(BpeTokenizerSpec spec) : BpeTokenizer(std::move(spec)) {}
  // Errors of the spec (a merge over unknown tokens, a regex that does not compile) name `source`.
  static std::shared_ptr<HfTokenizer> make(BpeTokenizerSpec spec, const std::string& source);
};

}  // namespace inferscale
