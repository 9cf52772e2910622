// The text steps of BERT tokenizers before WordPiece runs, as HF `tokenizers` defines them
// (normalizers/bert.rs, pre_tokenizers/bert.rs):
//
//   BertNormalizer, in this order:
//     clean_text           drop U+0000, U+FFFD and control characters (categories Cc, Cf, Co, Cs,
//                          except \t \n \r); every whitespace character (\t \n \r and Unicode
//                          White_Space) becomes ' '
//     handle_chinese_chars ' ' on both sides of every CJK ideograph (the blocks of bert_is_cjk)
//     strip_accents        NFD, then drop nonspacing marks (Mn); unset: follows lowercase
//     lowercase            full lowercase mapping per character (U+0130 -> "i" U+0307)
//   BertPreTokenizer: split at whitespace (dropped) and around every punctuation character
//     (ASCII punctuation, which includes $ + < = > ^ ` | ~, or a Unicode P* category), each
//     punctuation character a word of its own. Symbols (emoji, ©) are not split off.
//
// Input must be valid UTF-8 (the tokenizer repairs it first).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace inferscale {

struct BertNormalizerOptions {
  bool clean_text = true;
  bool handle_chinese_chars = true;
  bool strip_accents = true;  // tokenizer.json's null means "= lowercase"; the loader resolves it
  bool lowercase = true;
};

// The CJK Unified Ideographs blocks BERT spaces out (not Hiragana, Katakana or Hangul).
bool bert_is_cjk(uint32_t cp);
// ASCII punctuation or a Unicode punctuation category (Pc Pd Pe Pf Pi Po Ps).
bool bert_is_punctuation(uint32_t cp);
// \t \n \r or Unicode White_Space (Rust's char::is_whitespace).
bool bert_is_whitespace(uint32_t cp);

std::string bert_normalize(std::string_view text, const BertNormalizerOptions& opts);
// The words of normalized text, in order; views into `text`, never empty.
std::vector<std::string_view> bert_pre_tokenize(std::string_view text);

}  // namespace inferscale
