// Shared state of the concrete tokenizers: which ids are BOS/EOS and whether encode adds BOS.
// load_tokenizer refines these from tokenizer_config.json before the tokenizer is shared.
#pragma once
#include <optional>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace inferscale {

struct SpecialIds {
  std::optional<int32_t> bos;
  std::vector<int32_t> eos;  // eos first, then other end-of-turn ids; no duplicates
  bool add_bos = false;
};

class TokenizerBase : public Tokenizer {
 public:
  std::optional<int32_t> bos_id() const override { return specials_.bos; }
  std::vector<int32_t> eos_ids() const override { return specials_.eos; }
  bool adds_bos() const override { return specials_.add_bos; }

  const SpecialIds& specials() const { return specials_; }
  // Not thread-safe: call before the tokenizer is shared.
  void set_specials(SpecialIds s) { specials_ = std::move(s); }

 protected:
  // Throws kInvalidInput unless 0 <= id < vocab_size().
  void require_id(int32_t id) const;

  SpecialIds specials_;
};

// Ids of the usual end-of-text / end-of-turn tokens present in `tok` (<|end_of_text|>, <|eot_id|>,
// <|eom_id|>, <|endoftext|>, <|im_end|>, </s>), in that order.
std::vector<int32_t> known_end_ids(const Tokenizer& tok);

}  // namespace inferscale
