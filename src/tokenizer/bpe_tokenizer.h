// Byte-level BPE tokenizers (GPT-2's scheme): the one encode pipeline behind HF's tokenizer.json and
// Qwen2 slow files (hf_tokenizer.h) and GGUF `gpt2` vocabularies (gguf_bpe.h). Each loader only
// translates its file into a BpeTokenizerSpec.
//
// encode: split out added tokens (AddedVocab) -> per text piece: NFC (if asked) -> ' ' in front
// (add_prefix_space) -> regex splits (RegexPreTokenizer) -> byte-level BPE per word (BpeModel) ->
// `prefix` / `suffix` ids around the sequence when add_special.
// decode: a token's bytes are its byte-level spelling decoded; an added token's are its content.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/added_vocab.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/regex_splitter.h"
#include "tokenizer/tokenizer_base.h"

namespace inferscale {

struct BpeTokenizerSpec {
  // Token strings by id in the byte-level alphabet (byte_level.h), as tokenizer.json keys and GGUF
  // tokenizer.ggml.tokens spell them; a string with characters outside the alphabet stands for its
  // own UTF-8 bytes. "" marks an unused id.
  std::vector<std::string> tokens;
  std::vector<std::pair<std::string, std::string>> merges;  // same spelling, in rank order
  bool ignore_merges = false;        // a word that is itself a token is emitted whole
  std::vector<AddedToken> added;     // matched in the text before the model runs
  bool nfc = false;                  // NFC-normalize text pieces
  bool prefix_space = false;         // ByteLevel add_prefix_space: ' ' before a piece lacking one
  std::vector<std::string> splits;   // pre-tokenizer regexes, in order
  std::vector<int32_t> prefix, suffix;  // ids around the sequence when add_special
  std::string kind = "bpe";          // Tokenizer::kind()
  std::string pre_name;              // Tokenizer::pre_tokenizer()
};

class BpeTokenizer : public TokenizerBase {
 public:
  // Throws kInvalidInput naming the problem (a merge over unknown tokens, a regex that does not
  // compile). Specials default to: BOS = prefix[0], add_bos = !prefix.empty(), EOS = known_end_ids;
  // a loader refines them with set_specials.
  explicit BpeTokenizer(BpeTokenizerSpec spec);

  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& opts = {}) const override;
  std::string token_bytes(int32_t id, bool skip_special) const override;
  int32_t vocab_size() const override { return vocab_size_; }
  bool is_special(int32_t id) const override;
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  std::string id_to_token(int32_t id) const override;
  std::string kind() const override { return kind_; }
  std::string pre_tokenizer() const override { return pre_name_; }

  // The regex pieces of one text piece (no added-token split, no BPE), for tests and tools.
  std::vector<std::string> pre_tokenize(std::string_view text) const;

 private:
  std::unique_ptr<BpeModel> model_;
  std::vector<std::string> token_text_;  // model token strings as the file spells them
  AddedVocab added_;
  bool nfc_ = false;
  bool prefix_space_ = false;
  RegexPreTokenizer pre_;
  std::vector<int32_t> prefix_, suffix_;
  int32_t vocab_size_ = 0;
  std::string kind_, pre_name_;
};

}  // namespace inferscale
