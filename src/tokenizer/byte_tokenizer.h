// The byte tokenizer of the built-in demo model (and the fallback for random-weight models that ship
// no tokenizer): ids 0-255 are the bytes themselves, then four specials:
//
//   256 <|begin_of_text|>  BOS        258 <|im_start|>  ChatML turn start
//   257 <|end_of_text|>    EOS        259 <|im_end|>    ChatML turn end (also ends generation)
//
// With parse_special, the special strings in the text become their ids; everything else is bytes.
#pragma once
#include "tokenizer/tokenizer.h"

namespace inferscale {

class ByteTokenizer : public Tokenizer {
 public:
  static constexpr int32_t kBos = 256;
  static constexpr int32_t kEos = 257;
  static constexpr int32_t kImStart = 258;
  static constexpr int32_t kImEnd = 259;
  static constexpr int32_t kVocabSize = 260;

  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& opts = {}) const override;
  std::string decode(std::span<const int32_t> ids, bool skip_special = true) const override;
  // The bytes `id` adds to decoded text (empty for a special when skip_special); kInvalidInput out
  // of range. TODO(model): becomes an override of Tokenizer::token_bytes when branch tok lands.
  std::string token_bytes(int32_t id, bool skip_special) const;

  int32_t vocab_size() const override { return kVocabSize; }
  std::optional<int32_t> bos_id() const override { return kBos; }
  std::vector<int32_t> eos_ids() const override { return {kEos, kImEnd}; }
  bool is_special(int32_t id) const override { return id >= 256 && id < kVocabSize; }
  // Accepts a special's text, "<0xNN>" or a one-byte string.
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  // "<0xNN>" for a byte, the special's text otherwise.
  std::string id_to_token(int32_t id) const override;
  bool adds_bos() const override { return true; }
  std::string kind() const override { return "byte"; }
};

}  // namespace inferscale
