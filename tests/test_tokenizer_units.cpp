// Unit tests of the tokenizer building blocks: UTF-8 repair, the byte-level alphabet, added-token
// splitting, the PCRE2 splitter, BPE merging order and the SentencePiece proto patch.
#include <gtest/gtest.h>

#include "tokenizer/added_vocab.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/regex_splitter.h"
#include "tokenizer/spm_proto.h"
#include "tokenizer/spm_text.h"
#include "tokenizer/utf8.h"
#include "util/check.h"

using namespace inferscale;

namespace {
const std::string kFFFD = "\xEF\xBF\xBD";

std::vector<std::string> split_all(const RegexSplitter& re, std::string_view text) {
  std::vector<std::string_view> parts;
  re.split(text, parts);
  return {parts.begin(), parts.end()};
}
}  // namespace

TEST(TokenizerUtf8, LossyReplacesMaximalSubparts) {
  // Same results as Python's bytes.decode('utf-8', 'replace') and Rust's from_utf8_lossy.
  EXPECT_EQ(utf8_lossy("ok"), "ok");
  EXPECT_EQ(utf8_lossy("\xE4\xB8"), kFFFD);                 // truncated 3-byte char: one U+FFFD
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x98"), kFFFD);             // truncated 4-byte char
  EXPECT_EQ(utf8_lossy("\x80\x80"), kFFFD + kFFFD);         // lone continuation bytes
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), kFFFD + kFFFD + kFFFD);  // a surrogate
  EXPECT_EQ(utf8_lossy("\xC0\xAF"), kFFFD + kFFFD);         // overlong
  EXPECT_EQ(utf8_lossy("a\xE4z"), "a" + kFFFD + "z");
  EXPECT_TRUE(utf8_valid("中文 😀"));
  EXPECT_FALSE(utf8_valid("\xF4\x90\x80\x80"));  // above U+10FFFF
}

TEST(TokenizerUtf8, IncompleteTail) {
  EXPECT_EQ(utf8_incomplete_tail("abc"), 0u);
  EXPECT_EQ(utf8_incomplete_tail("a\xE4"), 1u);
  EXPECT_EQ(utf8_incomplete_tail("a\xE4\xB8"), 2u);
  EXPECT_EQ(utf8_incomplete_tail("a\xE4\xB8\xAD"), 0u);
  EXPECT_EQ(utf8_incomplete_tail("\xF0\x9F\x98"), 3u);
  EXPECT_EQ(utf8_incomplete_tail("a\xE4z"), 0u);   // broken, not incomplete
  EXPECT_EQ(utf8_incomplete_tail("\xE4\x41"), 0u);
}

TEST(TokenizerUtf8, Nfc) {
  EXPECT_EQ(utf8_nfc("e\xCC\x81"), "\xC3\xA9");  // e + combining acute -> é
  EXPECT_EQ(utf8_nfc("abc"), "abc");
}

TEST(TokenizerByteLevel, AlphabetRoundTrips) {
  EXPECT_EQ(byte_level_char(' '), "\xC4\xA0");   // 'Ġ'
  EXPECT_EQ(byte_level_char('\n'), "\xC4\x8A");  // 'Ċ'
  EXPECT_EQ(byte_level_char('a'), "a");
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  EXPECT_EQ(byte_level_decode(byte_level_encode(all)), all);
  EXPECT_EQ(byte_level_decode("a b"), std::nullopt);  // ' ' itself is outside the alphabet
}

TEST(TokenizerAddedVocab, LeftmostLongestAndSpecialParsing) {
  AddedVocab v;
  v.add({10, "<a>", true});
  v.add({11, "<a><b>", true});
  v.add({12, "<tool>", false});
  auto pieces = v.split("x<a><b>y<a>z<tool>", true);
  ASSERT_EQ(pieces.size(), 6u);
  EXPECT_EQ(pieces[0].text, "x");
  EXPECT_EQ(pieces[1].id, 11);  // the longest match at the earliest position
  EXPECT_EQ(pieces[2].text, "y");
  EXPECT_EQ(pieces[3].id, 10);
  EXPECT_EQ(pieces[5].id, 12);
  EXPECT_EQ(pieces[5].offset, 12u);
  pieces = v.split("x<a><tool>", false);  // special tokens stay text; non-special still match
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[0].text, "x<a>");
  EXPECT_EQ(pieces[1].id, 12);
}

TEST(TokenizerAddedVocab, StripAndSingleWordFlags) {
  AddedVocab v;
  v.add({1, "<m>", true, /*lstrip=*/true, /*rstrip=*/true});
  v.add({2, "cat", false, false, false, /*single_word=*/true});
  auto pieces = v.split("a  <m>  b", true);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0].text, "a");
  EXPECT_EQ(pieces[1].text, "  <m>  ");
  EXPECT_EQ(pieces[2].text, "b");
  pieces = v.split("concat cat", true);
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[0].text, "concat ");
  EXPECT_EQ(pieces[1].id, 2);
}

TEST(TokenizerRegexSplitter, LlamaPatternWithLookahead) {
  const RegexSplitter re(
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)");
  EXPECT_EQ(split_all(re, "a   b"), (std::vector<std::string>{"a", "  ", " b"}));  // \s+(?!\S) leaves one space
  EXPECT_EQ(split_all(re, "I'M 12345"), (std::vector<std::string>{"I", "'M", " ", "123", "45"}));
  EXPECT_EQ(split_all(re, "héllo wörld"), (std::vector<std::string>{"héllo", " wörld"}));
  EXPECT_EQ(split_all(re, ""), std::vector<std::string>{});
}

TEST(TokenizerRegexSplitter, BadPatternIsNamed) {
  try {
    RegexSplitter re("(unclosed");
    FAIL() << "compiled";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidInput);
    EXPECT_NE(std::string(e.what()).find("(unclosed"), std::string::npos);
  }
}

TEST(TokenizerBpeModel, MergesByRankLeftmostFirst) {
  // Byte tokens a, b, c, then merges in rank order: "a a" (rank 0), "aa b" (1), "b c" (2).
  std::vector<std::string> vocab = {"a", "b", "c", "aa", "aab", "bc"};
  const BpeModel bpe(vocab, {{"a", "a"}, {"aa", "b"}, {"b", "c"}}, false);
  std::vector<int32_t> ids;
  bpe.encode_word("aaa", ids);  // leftmost "a a" first: [aa, a]
  EXPECT_EQ(ids, (std::vector<int32_t>{3, 0}));
  ids.clear();
  bpe.encode_word("aabc", ids);  // "a a" (0) before "b c" (2), then "aa b" (1): [aab, c]
  EXPECT_EQ(ids, (std::vector<int32_t>{4, 2}));
  ids.clear();
  bpe.encode_word("aabc", ids);  // from the cache
  EXPECT_EQ(ids, (std::vector<int32_t>{4, 2}));
  EXPECT_THROW(BpeModel(vocab, {{"a", "x"}}, false), Error);
  // ignore_merges: a word that is a token is taken whole even if merges would not reach it.
  const BpeModel whole({"a", "b", "ab", "ba", "aba"}, {{"a", "b"}}, true);
  ids.clear();
  whole.encode_word("aba", ids);
  EXPECT_EQ(ids, std::vector<int32_t>{4});
}

TEST(TokenizerSpmProto, PatchesAddDummyPrefix) {
  // ModelProto { normalizer_spec (3) { name (1) = "id", add_dummy_prefix (3) = true } }
  const std::string proto = std::string("\x1a\x06\x0a\x02id\x18\x01", 8);
  bool previous = false;
  const std::string patched = spm_set_add_dummy_prefix(proto, false, previous, "test");
  EXPECT_TRUE(previous);
  EXPECT_EQ(patched, std::string("\x1a\x06\x0a\x02id\x18\x00", 8));
  // Absent spec: appended; default previous value is true.
  EXPECT_EQ(spm_set_add_dummy_prefix("", false, previous, "test"), std::string("\x1a\x02\x18\x00", 4));
  EXPECT_THROW(spm_set_add_dummy_prefix("\x1a\x7f", false, previous, "test"), Error);  // truncated
}

TEST(TokenizerSpmText, EscapesAndBytePieces) {
  EXPECT_EQ(spm_escape("a b"), "a\xE2\x96\x81" "b");
  EXPECT_EQ(spm_unescape("\xE2\x96\x81Hello\xE2\x96\x81"), " Hello ");
  EXPECT_EQ(spm_byte_piece("<0x0A>"), 10);
  EXPECT_EQ(spm_byte_piece("<0xff>"), 255);
  EXPECT_EQ(spm_byte_piece("<0xZZ>"), -1);
  EXPECT_EQ(spm_byte_piece("hello!"), -1);
}
