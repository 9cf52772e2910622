// BERT-family WordPiece tokenizers from an HF tokenizer.json whose model type is "WordPiece"
// (all-MiniLM-L6-v2, bge, e5, gte), matching HF `tokenizers` id for id:
//
//   encode: added tokens split out of the raw text (AddedVocab; [CLS], [SEP], ... when
//           parse_special) -> per text piece: BertNormalizer -> BertPreTokenizer (bert_text.h)
//           -> WordPiece per word -> [CLS] ... [SEP] around the sequence when add_special
//           (TemplateProcessing's or BertProcessing's single-sequence template)
//   WordPiece on one word: a word longer than max_input_chars_per_word characters is [UNK];
//           else greedy longest match from the left, every piece after the first spelled with
//           the continuation prefix ("##"); a position where nothing matches makes the whole
//           word [UNK].
//   decode: the WordPiece decoder's fold: "##x" -> "x", every other token ' ' + token, with the
//           decoder's cleanup (".", "?", "!", "," take no space); the first piece's space is
//           dropped (strips_leading_space). Unlike HF, a continuation token at the very start
//           decodes without its "##" (decode is a fold over token_bytes, tokenizer.h).
//
// Truncation: encode_truncated() keeps at most max_length ids with the specials included, cutting
// the text's ids on the right (or left) as HF's truncation does for one sequence; truncation()
// is the one tokenizer.json configures (sentence-transformers overrides its length with
// max_seq_length). Unsupported tokenizer.json features throw kUnsupported naming the feature.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tokenizer/added_vocab.h"
#include "tokenizer/bert_text.h"
#include "tokenizer/tokenizer_base.h"

namespace inferscale {

struct WordPieceTruncation {
  size_t max_length = 0;
  bool left = false;  // direction "Left": keep the last ids
};

class WordPieceTokenizer final : public TokenizerBase {
 public:
  static std::shared_ptr<WordPieceTokenizer> from_file(const std::string& path);
  // `source` names the origin in error messages.
  static std::shared_ptr<WordPieceTokenizer> from_json(const nlohmann::json& j, const std::string& source);

  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& opts = {}) const override;
  // encode() cut to at most `max_length` ids; with add_special the specials are kept and the text
  // gives up the room (kInvalidInput when max_length cannot hold the specials).
  std::vector<int32_t> encode_truncated(std::string_view text, size_t max_length, const EncodeOptions& opts = {},
                                        bool left = false) const;
  std::string token_bytes(int32_t id, bool skip_special) const override;
  bool strips_leading_space() const override { return true; }
  int32_t vocab_size() const override { return vocab_size_; }
  bool is_special(int32_t id) const override;
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  std::string id_to_token(int32_t id) const override;
  std::string kind() const override { return "wordpiece"; }
  std::string pre_tokenizer() const override { return "bert"; }

  // The truncation tokenizer.json sets (none when it has "truncation": null).
  const std::optional<WordPieceTruncation>& truncation() const { return truncation_; }
  int32_t unk_id() const { return unk_id_; }
  // The words BertNormalizer + BertPreTokenizer make of one text piece (no added-token split).
  std::vector<std::string> pre_tokenize(std::string_view text) const;

 private:
  WordPieceTokenizer() = default;
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  std::vector<std::string> tokens_;                  // vocabulary strings by id ("" for an unused id)
  std::unordered_map<std::string, int32_t> vocab_;
  std::string prefix_ = "##";                        // continuing_subword_prefix
  size_t max_chars_ = 100;                           // max_input_chars_per_word
  size_t max_token_bytes_ = 0;                       // longest vocabulary string: bounds the match
  int32_t unk_id_ = -1;
  BertNormalizerOptions norm_;
  bool normalize_ = false;                           // a BertNormalizer is configured
  bool cleanup_ = true;                              // the decoder's cleanup
  AddedVocab added_;
  std::vector<int32_t> head_, tail_;                 // post-processor ids around one sequence
  std::optional<WordPieceTruncation> truncation_;
  int32_t vocab_size_ = 0;
};

}  // namespace inferscale
