#include "tokenizer/byte_tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>

#include "util/check.h"

namespace inferscale {

namespace {

constexpr std::array<std::string_view, 4> kSpecials = {"<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>",
                                                       "<|im_end|>"};

// `s` with each invalid UTF-8 maximal subpart replaced by U+FFFD (as HF tokenizers / Rust's
// from_utf8_lossy do). TODO(model): use the shared utf8_lossy of branch tok once it is on main.
std::string utf8_repair(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<uint8_t>(s[i]);
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
      ++i;
      continue;
    }
    // Sequence length and the allowed range of the second byte (excludes overlongs and surrogates).
    size_t len = 0;
    uint8_t lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) len = 2;
    else if (c == 0xe0) len = 3, lo = 0xa0;
    else if (c >= 0xe1 && c <= 0xec) len = 3;
    else if (c == 0xed) len = 3, hi = 0x9f;
    else if (c >= 0xee && c <= 0xef) len = 3;
    else if (c == 0xf0) len = 4, lo = 0x90;
    else if (c >= 0xf1 && c <= 0xf3) len = 4;
    else if (c == 0xf4) len = 4, hi = 0x8f;
    size_t n = len == 0 ? 0 : 1;  // bytes of a valid prefix
    while (n > 0 && n < len && i + n < s.size()) {
      const auto b = static_cast<uint8_t>(s[i + n]);
      const bool ok = n == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xbf);
      if (!ok) break;
      ++n;
    }
    if (len > 0 && n == len) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD for the maximal subpart (at least the lead byte)
      i += std::max<size_t>(n, 1);
    }
  }
  return out;
}

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

std::string ByteTokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  bytes.reserve(ids.size());
  for (int32_t id : ids) bytes += token_bytes(id, skip_special);
  return utf8_repair(bytes);
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
