#include "tokenizer/added_vocab.h"

#include <algorithm>
#include <cctype>

namespace inferscale {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
// ASCII letters, digits, '_' and any non-ASCII byte count as word characters for single_word.
bool is_word(char c) {
  const auto b = static_cast<unsigned char>(c);
  return b >= 0x80 || std::isalnum(b) || c == '_';
}

}  // namespace

void AddedVocab::add(AddedToken token) {
  if (token.content.empty()) return;
  const auto it = by_content_.find(token.content);
  size_t index = tokens_.size();
  if (it != by_content_.end()) {
    index = it->second;
    by_id_.erase(tokens_[index].id);
    tokens_[index] = std::move(token);
  } else {
    tokens_.push_back(std::move(token));
    by_content_[tokens_.back().content] = index;
    auto& bucket = by_first_byte_[static_cast<unsigned char>(tokens_.back().content[0])];
    bucket.push_back(index);
    std::stable_sort(bucket.begin(), bucket.end(),
                     [&](size_t a, size_t b) { return tokens_[a].content.size() > tokens_[b].content.size(); });
  }
  by_id_[tokens_[index].id] = index;
}

const AddedToken* AddedVocab::find(int32_t id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

std::optional<int32_t> AddedVocab::id_of(std::string_view content) const {
  const auto it = by_content_.find(std::string(content));
  if (it == by_content_.end()) return std::nullopt;
  return tokens_[it->second].id;
}

int32_t AddedVocab::max_id() const {
  int32_t m = -1;
  for (const auto& t : tokens_) m = std::max(m, t.id);
  return m;
}

size_t AddedVocab::match_at(const AddedToken& t, std::string_view text, size_t pos, size_t floor,
                            size_t& begin) const {
  if (text.compare(pos, t.content.size(), t.content) != 0) return 0;
  size_t end = pos + t.content.size();
  if (t.single_word && ((pos > 0 && is_word(text[pos - 1])) || (end < text.size() && is_word(text[end])))) return 0;
  begin = pos;
  if (t.lstrip)
    while (begin > floor && is_space(text[begin - 1])) --begin;
  if (t.rstrip)
    while (end < text.size() && is_space(text[end])) ++end;
  return end - begin;
}

std::vector<TextPiece> AddedVocab::split(std::string_view text, bool parse_special) const {
  std::vector<TextPiece> out;
  size_t start = 0;  // start of the pending plain text
  for (size_t pos = 0; pos < text.size(); ++pos) {
    const auto& bucket = by_first_byte_[static_cast<unsigned char>(text[pos])];
    for (const size_t index : bucket) {
      const AddedToken& t = tokens_[index];
      if (t.special && !parse_special) continue;
      size_t begin = pos;
      const size_t len = match_at(t, text, pos, start, begin);
      if (len == 0) continue;
      if (begin > start) out.push_back({text.substr(start, begin - start), -1, start});
      out.push_back({text.substr(begin, len), t.id, begin});
      start = begin + len;
      pos = start - 1;
      break;
    }
  }
  if (start < text.size()) out.push_back({text.substr(start), -1, start});
  return out;
}

}  // namespace inferscale
