// Byte-level BPE tokenizers in HF's format (Llama 3, Qwen2.5): tokenizer.json, or Qwen2's "slow"
// files (vocab.json + merges.txt + tokenizer_config.json added tokens).
//
// encode: split out added tokens -> per text piece: NFC (if the normalizer asks) -> regex splits
// -> byte-level BPE per word -> post-processor template (BOS) when add_special.
// Unsupported tokenizer.json features throw Error(kUnsupported) naming the feature.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tokenizer/added_vocab.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/regex_splitter.h"
#include "tokenizer/tokenizer_base.h"

namespace inferscale {

class HfTokenizer : public TokenizerBase {
 public:
  // Parses a tokenizer.json file; errors name the file.
  static std::shared_ptr<HfTokenizer> from_file(const std::string& path);
  // `source` names the origin in error messages.
  static std::shared_ptr<HfTokenizer> from_json(const nlohmann::json& j, const std::string& source);
  // Qwen2Tokenizer slow files: vocab.json, merges.txt and the added_tokens_decoder of
  // tokenizer_config.json (`config`), with Qwen2's fixed pipeline (NFC, its split regex, ByteLevel).
  static std::shared_ptr<HfTokenizer> from_qwen2_files(const std::string& vocab_json, const std::string& merges_txt,
                                                       const nlohmann::json& config);

  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& opts = {}) const override;
  std::string token_bytes(int32_t id, bool skip_special) const override;
  int32_t vocab_size() const override { return vocab_size_; }
  bool is_special(int32_t id) const override;
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  std::string id_to_token(int32_t id) const override;
  std::string kind() const override { return "bpe"; }

 private:
  HfTokenizer() = default;
  void finish();  // sizes and specials once vocab, merges and added tokens are in place

  std::unique_ptr<BpeModel> model_;
  std::vector<std::string> token_text_;  // model token strings as the file spells them (byte-level form)
  AddedVocab added_;
  bool nfc_ = false;
  bool prefix_space_ = false;  // ByteLevel add_prefix_space: a text piece gets ' ' in front
  std::vector<std::unique_ptr<RegexSplitter>> splits_;  // applied in order, each to every piece of the last
  std::vector<int32_t> prefix_, suffix_;               // post-processor ids around the sequence
  int32_t vocab_size_ = 0;
};

}  // namespace inferscale
