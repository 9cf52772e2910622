// Tokens matched as whole strings in the input before any model runs: HF's "added tokens" and
// SentencePiece/GGUF control tokens. Splitting follows HF's AddedVocabulary: scanning left to right,
// the earliest position where some token matches wins, and the longest token there.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace inferscale {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;      // skipped by decode(skip_special); matched only when parse_special
  bool lstrip = false;       // the match swallows whitespace on its left
  bool rstrip = false;       // ... and on its right
  bool single_word = false;  // matches only when not inside a word (ASCII alnum, _, non-ASCII)
  // HF's `normalized` flag is not used: tokens always match the raw text (the shared files have
  // normalized=false everywhere; with NFC as the only normalizer the difference is contrived).
};

// A piece of split input: plain text (id < 0) or one added token.
struct TextPiece {
  std::string_view text;
  int32_t id = -1;
  size_t offset = 0;  // byte offset of `text` in the input
};

class AddedVocab {
 public:
  // Later tokens with the same content replace earlier ones.
  void add(AddedToken token);
  // Non-special tokens are always matched (as HF does, also under split_special_tokens); special
  // ones only when parse_special. Empty text pieces are omitted.
  std::vector<TextPiece> split(std::string_view text, bool parse_special) const;

  const AddedToken* find(int32_t id) const;
  std::optional<int32_t> id_of(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }
  int32_t max_id() const;

 private:
  // Length of the token's match at `pos` (including stripped whitespace), 0 if none. `begin` is
  // where the match starts after lstrip.
  size_t match_at(const AddedToken& t, std::string_view text, size_t pos, size_t floor, size_t& begin) const;

  std::vector<AddedToken> tokens_;
  std::unordered_map<std::string, size_t> by_content_;
  std::unordered_map<int32_t, size_t> by_id_;
  // Token indices by first byte, longest content first.
  std::array<std::vector<size_t>, 256> by_first_byte_;
};

}  // namespace inferscale
