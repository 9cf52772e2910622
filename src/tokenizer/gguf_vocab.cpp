#include "tokenizer/gguf_vocab.h"

#include <functional>
#include <queue>

#include "tokenizer/spm_text.h"
#include "tokenizer/utf8.h"
#include "util/check.h"

namespace inferscale {
GgufSpmTokenizer::GgufSpmTokenizer(GgufVocabArrays v) : v_(std::move(v)) {
  const size_t n = v_.tokens.size();
  IS_REQUIRE(n > 0, kInvalidInput, "GGUF vocabulary: tokenizer.ggml.tokens is empty");
  IS_REQUIRE(v_.scores.size() == n && v_.types.size() == n, kInvalidInput,
             "GGUF vocabulary: {} tokens but {} scores and {} token types", n, v_.scores.size(), v_.types.size());
  for (const int32_t id : {v_.bos_id, v_.eos_id, v_.unk_id})
    IS_REQUIRE(id >= -1 && id < static_cast<int32_t>(n), kInvalidInput, "GGUF vocabulary: special id {} out of range",
               id);
  std::fill(std::begin(byte_ids_), std::end(byte_ids_), -1);
  bytes_.resize(n);
  ids_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const auto id = static_cast<int32_t>(i);
    const std::string& text = v_.tokens[i];
    ids_.emplace(text, id);
    switch (type(id)) {
      case GgufTokenType::kByte: {
        const int b = spm_byte_piece(text);
        IS_REQUIRE(b >= 0, kInvalidInput, "GGUF vocabulary: byte token {} is '{}', not <0xXX>", id, text);
        byte_ids_[b] = id;
        bytes_[i] = std::string(1, static_cast<char>(b));
        break;
      }
      case GgufTokenType::kControl:
      case GgufTokenType::kUnknown:
        specials_text_.add({id, text, true});
        bytes_[i] = text;
        break;
      case GgufTokenType::kUserDefined:
        specials_text_.add({id, text, false});
        bytes_[i] = text;
        break;
      default:
        bytes_[i] = spm_unescape(text);
    }
  }
  SpecialIds s;
  if (v_.bos_id >= 0) s.bos = v_.bos_id;
  if (v_.eos_id >= 0) s.eos.push_back(v_.eos_id);
  s.add_bos = v_.add_bos && s.bos.has_value();
  set_specials(std::move(s));
}

std::vector<int32_t> GgufSpmTokenizer::encode(std::string_view text, const EncodeOptions& opts) const {
  std::string repaired;
  text = utf8_repaired(text, repaired);
  std::vector<int32_t> ids;
  if (opts.add_special && specials_.add_bos) ids.push_back(*specials_.bos);
  bool after_special = true;  // the start of the input counts as "after a special token"
  for (const TextPiece& piece : specials_text_.split(text, opts.parse_special)) {
    if (piece.id >= 0) {
      ids.push_back(piece.id);
      after_special = true;
      continue;
    }
    std::string s = after_special && v_.add_space_prefix ? " " : "";
    s += piece.text;
    encode_text(spm_escape(s), ids);
    after_special = false;
  }
  return ids;
}

void GgufSpmTokenizer::encode_text(std::string_view text, std::vector<int32_t>& out) const {
  // One symbol per code point in a linked list; merged symbols grow in place (`len`).
  struct Symbol {
    size_t begin, len;
    int prev, next;
  };
  std::vector<Symbol> syms;
  for (size_t i = 0; i < text.size();) {
    bool complete;
    size_t n = utf8_scan(text.substr(i), complete);
    if (n == 0) n = 1;
    const int k = static_cast<int>(syms.size());
    syms.push_back({i, n, k - 1, k + 1});
    i += n;
  }
  if (syms.empty()) return;
  syms.back().next = -1;

  struct Bigram {
    float score;
    int left, right;
    size_t len;  // combined length when pushed; a mismatch marks a stale entry
    bool operator<(const Bigram& o) const { return score != o.score ? score < o.score : left > o.left; }
  };
  std::priority_queue<Bigram> queue;
  // Which pair of pieces produced a merged piece, to split back a piece that is not a token.
  std::unordered_map<std::string_view, std::pair<std::string_view, std::string_view>> rev;
  auto view = [&](const Symbol& s) { return text.substr(s.begin, s.len); };
  auto consider = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    const auto it = ids_.find(std::string(text.substr(syms[l].begin, syms[l].len + syms[r].len)));
    if (it == ids_.end()) return;
    queue.push({v_.scores[static_cast<size_t>(it->second)], l, r, syms[l].len + syms[r].len});
  };
  for (int i = 0; i + 1 < static_cast<int>(syms.size()); ++i) consider(i, i + 1);

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = syms[b.left];
    Symbol& r = syms[b.right];
    if (l.len == 0 || r.len == 0 || l.len + r.len != b.len || l.next != b.right) continue;
    rev.emplace(text.substr(l.begin, b.len), std::make_pair(view(l), view(r)));
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) syms[r.next].prev = b.left;
    consider(l.prev, b.left);
    consider(b.left, l.next);
  }

  std::function<void(std::string_view)> emit = [&](std::string_view piece) {
    if (const auto it = ids_.find(std::string(piece)); it != ids_.end()) {
      out.push_back(it->second);
      return;
    }
    if (const auto it = rev.find(piece); it != rev.end()) {
      emit(it->second.first);
      emit(it->second.second);
      return;
    }
    for (const char c : piece) {
      const int32_t id = byte_ids_[static_cast<unsigned char>(c)];
      if (id >= 0)
        out.push_back(id);
      else if (v_.unk_id >= 0)
        out.push_back(v_.unk_id);
    }
  };
  for (int i = 0; i >= 0; i = syms[i].next) emit(view(syms[i]));
}

std::string GgufSpmTokenizer::token_bytes(int32_t id, bool skip_special) const {
  require_id(id);
  return skip_special && is_special(id) ? std::string() : bytes_[static_cast<size_t>(id)];
}

bool GgufSpmTokenizer::is_special(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return false;
  const auto t = type(id);
  return t == GgufTokenType::kControl || t == GgufTokenType::kUnknown;
}

std::optional<int32_t> GgufSpmTokenizer::token_to_id(std::string_view token) const {
  const auto it = ids_.find(std::string(token));
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

std::string GgufSpmTokenizer::id_to_token(int32_t id) const {
  require_id(id);
  return v_.tokens[static_cast<size_t>(id)];
}

}  // namespace inferscale
