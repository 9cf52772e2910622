// SentencePiece models (Mistral v3 tokenizer.model) through libsentencepiece, with HF's handling
// of special tokens and leading spaces (LlamaTokenizer converted with legacy=False):
// - control pieces ([INST], <s>, ...) and <unk> written in the text become their ids when
//   parse_special (the text is split at them and the pieces encoded separately);
// - the dummy-prefix "▁" goes only in front of text at the very start of the input, and only when
//   it does not already start with a space; text after a special token gets none.
// The segmentation of each piece is sentencepiece's own. (HF's converted BPE differs on runs of
// whitespace only; see scripts/make_tokenizer_goldens.py.)
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/added_vocab.h"
#include "tokenizer/tokenizer_base.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace inferscale {

class SpmTokenizer : public TokenizerBase {
 public:
  // Loads a .model file; errors name it. BOS is added by default (add_special), eos is </s>.
  static std::shared_ptr<SpmTokenizer> from_file(const std::string& path);
  ~SpmTokenizer() override;

  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& opts = {}) const override;
  std::string token_bytes(int32_t id, bool skip_special) const override;
  bool strips_leading_space() const override { return dummy_prefix_; }
  int32_t vocab_size() const override { return static_cast<int32_t>(pieces_.size()); }
  bool is_special(int32_t id) const override;
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  std::string id_to_token(int32_t id) const override;
  std::string kind() const override { return "sentencepiece"; }

 private:
  SpmTokenizer();

  // Encodes the model with add_dummy_prefix off; the prefix is decided per piece of text.
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  bool dummy_prefix_ = true;  // the model's own setting
  AddedVocab specials_text_;  // control pieces and <unk>, all special
  std::vector<std::string> pieces_;  // piece strings by id
  std::vector<std::string> bytes_;   // what each id decodes to ("▁" -> ' ', <0xXX> -> the byte)
  std::vector<bool> special_;
};

}  // namespace inferscale
