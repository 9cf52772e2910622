#include "tokenizer/bert_text.h"

#include <utf8proc.h>

#include "tokenizer/utf8.h"

namespace inferscale {
namespace {

bool is_control(uint32_t cp) {
  if (cp == '\t' || cp == '\n' || cp == '\r') return false;  // whitespace, not control
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CS:
      return true;
    default:
      return false;  // unassigned code points (Cn) are kept, as HF keeps them
  }
}

}  // namespace

bool bert_is_cjk(uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
         (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

bool bert_is_punctuation(uint32_t cp) {
  if (cp < 0x80) return (cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) || (cp >= 123 && cp <= 126);
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO:
      return true;
    default:
      return false;
  }
}

bool bert_is_whitespace(uint32_t cp) {
  // Unicode's White_Space property (the list Rust's char::is_whitespace tests).
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

std::string bert_normalize(std::string_view text, const BertNormalizerOptions& o) {
  std::string cur;
  cur.reserve(text.size() + 8);
  for (size_t i = 0; i < text.size();) {
    const uint32_t cp = utf8_next(text, i);
    if (o.clean_text) {
      if (cp == 0 || cp == 0xFFFD || is_control(cp)) continue;  // control test first: U+000B, U+0085 are dropped
      if (bert_is_whitespace(cp)) {
        cur += ' ';
        continue;
      }
    }
    if (o.handle_chinese_chars && bert_is_cjk(cp)) {
      cur += ' ';
      utf8_append(cp, cur);
      cur += ' ';
      continue;
    }
    utf8_append(cp, cur);
  }
  if (o.strip_accents) {
    const std::string decomposed = utf8_nfd(cur);
    cur.clear();
    for (size_t i = 0; i < decomposed.size();) {
      const uint32_t cp = utf8_next(decomposed, i);
      if (utf8proc_category(static_cast<utf8proc_int32_t>(cp)) != UTF8PROC_CATEGORY_MN) utf8_append(cp, cur);
    }
  }
  if (o.lowercase) {
    std::string lower;
    lower.reserve(cur.size());
    for (size_t i = 0; i < cur.size();) {
      const uint32_t cp = utf8_next(cur, i);
      if (cp == 0x130) {  // the one unconditional multi-character lowercase mapping (SpecialCasing.txt)
        lower += 'i';
        utf8_append(0x307, lower);
      } else {
        utf8_append(static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))), lower);
      }
    }
    cur = std::move(lower);
  }
  return cur;
}

std::vector<std::string_view> bert_pre_tokenize(std::string_view text) {
  std::vector<std::string_view> words;
  size_t start = 0;  // start of the word being read
  for (size_t i = 0; i < text.size();) {
    const size_t at = i;
    const uint32_t cp = utf8_next(text, i);
    const bool space = bert_is_whitespace(cp), punct = !space && bert_is_punctuation(cp);
    if (!space && !punct) continue;
    if (at > start) words.push_back(text.substr(start, at - start));
    if (punct) words.push_back(text.substr(at, i - at));
    start = i;
  }
  if (text.size() > start) words.push_back(text.substr(start));
  return words;
}

}  // namespace inferscale
