#include "tokenizer/tokenizer.h"

#include "tokenizer/tokenizer_base.h"
#include "tokenizer/utf8.h"
#include "util/check.h"

namespace inferscale {

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  bool first = true;  // no non-empty piece yet: the leading-space rule still applies
  for (const int32_t id : ids) {
    std::string piece = token_bytes(id, skip_special);
    if (piece.empty()) continue;
    if (first && strips_leading_space() && piece[0] == ' ') piece.erase(0, 1);
    first = false;
    bytes += piece;
  }
  return utf8_lossy(bytes);
}

void TokenizerBase::require_id(int32_t id) const {
  IS_REQUIRE(id >= 0 && id < vocab_size(), kInvalidInput, "token id {} is out of range (vocabulary size {})", id,
             vocab_size());
}

std::vector<int32_t> known_end_ids(const Tokenizer& tok) {
  std::vector<int32_t> ids;
  for (const char* name : {"<|end_of_text|>", "<|eot_id|>", "<|eom_id|>", "<|endoftext|>", "<|im_end|>", "</s>"})
    if (const auto id = tok.token_to_id(name); id && tok.is_special(*id)) ids.push_back(*id);
  return ids;
}

}  // namespace inferscale
