#include "tokenizer/byte_tokenizer.h"

#include <fmt/format.h>

#include <array>
#include <charconv>

#include "util/check.h"

namespace inferscale {

namespace {

constexpr std::array<std::string_view, 4> kSpecials = {"<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>",
                                                       "<|im_end|>"};

}  // namespace

std::vector<int32_t> ByteTokenizer::encode(std::string_view text, const EncodeOptions& opts) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() + 1);
  if (opts.add_special) ids.push_back(kBos);
  size_t i = 0;
  while (i < text.size()) {
    if (opts.parse_special && text[i] == '<') {
      bool matched = false;
      for (size_t k = 0; k < kSpecials.size(); ++k) {
        if (text.substr(i).starts_with(kSpecials[k])) {
          ids.push_back(256 + static_cast<int32_t>(k));
          i += kSpecials[k].size();
          matched = true;
          break;
        }
      }
      if (matched) continue;
    }
    ids.push_back(static_cast<uint8_t>(text[i]));
    ++i;
  }
  return ids;
}

std::string ByteTokenizer::token_bytes(int32_t id, bool skip_special) const {
  IS_REQUIRE(id >= 0 && id < kVocabSize, kInvalidInput, "token id {} is out of range for the byte tokenizer (0-{})", id,
             kVocabSize - 1);
  if (id < 256) return std::string(1, static_cast<char>(id));
  return skip_special ? std::string() : std::string(kSpecials[static_cast<size_t>(id - 256)]);
}

std::optional<int32_t> ByteTokenizer::token_to_id(std::string_view token) const {
  for (size_t k = 0; k < kSpecials.size(); ++k)
    if (token == kSpecials[k]) return 256 + static_cast<int32_t>(k);
  if (token.size() == 1) return static_cast<uint8_t>(token[0]);
  if (token.size() == 6 && token.starts_with("<0x") && token.ends_with(">")) {
    unsigned v = 0;
    const auto r = std::from_chars(token.data() + 3, token.data() + 5, v, 16);
    if (r.ec == std::errc() && r.ptr == token.data() + 5) return static_cast<int32_t>(v);
  }
  return std::nullopt;
}

std::string ByteTokenizer::id_to_token(int32_t id) const {
  IS_REQUIRE(id >= 0 && id < kVocabSize, kInvalidInput, "token id {} is out of range for the byte tokenizer (0-{})", id,
             kVocabSize - 1);
  if (id < 256) return fmt::format("<0x{:02X}>", id);
  return std::string(kSpecials[static_cast<size_t>(id - 256)]);
}

}  // namespace inferscale
