// The WordPiece tokenizer (BERT family): HF `tokenizers`' ids on all-MiniLM-L6-v2's tokenizer.json
// (goldens of scripts/make_wordpiece_goldens.py; skipped without the fetched model), and the
// WordPiece rules, the Bert normalizer and pre-tokenizer on small hand-made vocabularies.
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "tokenizer/bert_text.h"
#include "tokenizer/load_tokenizer.h"
#include "tokenizer/wordpiece.h"
#include "tokenizer_test_util.h"
#include "util/check.h"

using namespace inferscale;
using namespace inferscale::test;
using nlohmann::json;

namespace {

const std::string kMiniLm = repo_model("all-MiniLM-L6-v2");

#define SKIP_WITHOUT_MINILM()                                                                             \
  do {                                                                                                    \
    if (!std::filesystem::exists(kMiniLm + "/tokenizer.json"))                                            \
      GTEST_SKIP() << "model absent: " << kMiniLm << " (scripts/fetch_models.sh fetches all-MiniLM-L6-v2)"; \
  } while (0)

// A tiny BERT tokenizer.json: the given vocabulary after the five specials.
json tiny_tokenizer(const std::vector<std::string>& words, size_t max_chars = 100) {
  json vocab = json::object();
  const std::vector<std::string> specials = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  json added = json::array();
  for (size_t i = 0; i < specials.size(); ++i) {
    vocab[specials[i]] = i;
    added.push_back({{"id", i}, {"content", specials[i]}, {"special", true}, {"normalized", false}});
  }
  for (size_t i = 0; i < words.size(); ++i) vocab[words[i]] = specials.size() + i;
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", added},
          {"normalizer", {{"type", "BertNormalizer"}, {"clean_text", true}, {"handle_chinese_chars", true},
                          {"strip_accents", nullptr}, {"lowercase", true}}},
          {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
          {"post_processor", {{"type", "BertProcessing"}, {"sep", {"[SEP]", 3}}, {"cls", {"[CLS]", 2}}}},
          {"decoder", {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}}},
          {"model", {{"type", "WordPiece"}, {"unk_token", "[UNK]"}, {"continuing_subword_prefix", "##"},
                     {"max_input_chars_per_word", max_chars}, {"vocab", vocab}}}};
}

std::vector<std::string> tokens_of(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  std::vector<std::string> out;
  for (const int32_t id : ids) out.push_back(tok.id_to_token(id));
  return out;
}

}  // namespace

TEST(WordPieceGoldens, MiniLmMatchesHfTokenizers) {
  SKIP_WITHOUT_MINILM();
  const LoadedTokenizer loaded = load_tokenizer(kMiniLm);  // found by the loader: model type WordPiece
  const auto* tok = dynamic_cast<const WordPieceTokenizer*>(loaded.tokenizer.get());
  ASSERT_NE(tok, nullptr) << "loader gave kind " << loaded.tokenizer->kind();
  EXPECT_EQ(tok->kind(), "wordpiece");
  EXPECT_EQ(tok->vocab_size(), 30522);
  EXPECT_EQ(tok->bos_id(), 101);
  EXPECT_TRUE(tok->adds_bos());
  EXPECT_EQ(tok->eos_ids(), std::vector<int32_t>{102});
  EXPECT_EQ(tok->unk_id(), 100);

  const json g = load_fixture("minilm_wordpiece_goldens.json");
  ASSERT_TRUE(tok->truncation().has_value());
  EXPECT_EQ(tok->truncation()->max_length, g.at("file_truncation").at("max_length").get<size_t>());
  EXPECT_GE(g.at("cases").size(), 40u);
  for (const auto& c : g.at("cases")) {
    const std::string text = c.at("text");
    SCOPED_TRACE("text: '" + text + "'");
    EXPECT_EQ(tok->encode(text, {.add_special = false}), ids_of(c.at("ids")));
    EXPECT_EQ(tok->encode(text, {.add_special = true}), ids_of(c.at("ids_special")));
    EXPECT_EQ(tok->encode(text, {.add_special = true, .parse_special = false}), ids_of(c.at("ids_plain")));
    EXPECT_EQ(tok->pre_tokenize(text), c.at("words").get<std::vector<std::string>>());
    EXPECT_EQ(tok->encode_truncated(text, 16, {.add_special = true}), ids_of(c.at("ids_trunc")));
    EXPECT_EQ(tok->encode_truncated(text, 16, {.add_special = true}, /*left=*/true), ids_of(c.at("ids_trunc_left")));
  }
  for (const auto& d : g.at("decode")) {
    const auto ids = ids_of(d.at("ids"));
    EXPECT_EQ(tok->decode(ids, d.at("skip_special").get<bool>()), d.at("text").get<std::string>())
        << "ids: " << d.at("ids").dump() << " skip_special " << d.at("skip_special");
    // The streaming decoder folds the same pieces.
    IncrementalDecoder inc(*tok, d.at("skip_special").get<bool>());
    std::string streamed;
    for (const int32_t id : ids) streamed += inc.push(id);
    streamed += inc.flush();
    EXPECT_EQ(streamed, d.at("text").get<std::string>());
  }
}

TEST(WordPiece, GreedyLongestMatchWithContinuations) {
  const auto tok = WordPieceTokenizer::from_json(tiny_tokenizer({"un", "unaff", "##aff", "##able", "##a", "##ble", "a", "."}), "tiny");
  EXPECT_EQ(tokens_of(*tok, tok->encode("unaffable")), (std::vector<std::string>{"unaff", "##able"}));
  EXPECT_EQ(tokens_of(*tok, tok->encode("UnAble.")), (std::vector<std::string>{"un", "##able", "."}));
  // A position where nothing matches makes the whole word unknown, not just its tail.
  EXPECT_EQ(tokens_of(*tok, tok->encode("unaffablex a")), (std::vector<std::string>{"[UNK]", "a"}));
  EXPECT_EQ(tokens_of(*tok, tok->encode("a", {.add_special = true})), (std::vector<std::string>{"[CLS]", "a", "[SEP]"}));
  EXPECT_EQ(tok->decode(tok->encode("unaffable a.", {.add_special = true})), "unaffable a.");
  EXPECT_EQ(tok->decode(tok->encode("unaffable a.", {.add_special = true}), false), "[CLS] unaffable a. [SEP]");
}

TEST(WordPiece, MaxInputCharsCountsCharactersNotBytes) {
  const auto tok = WordPieceTokenizer::from_json(tiny_tokenizer({"é", "##é", "e"}, 3), "tiny");
  // strip_accents follows lowercase: é -> e.
  EXPECT_EQ(tokens_of(*tok, tok->encode("ééé")), (std::vector<std::string>{"[UNK]"}));  // "eee": no ##e
  json j = tiny_tokenizer({"é", "##é"}, 3);
  j["normalizer"]["strip_accents"] = false;
  const auto keep = WordPieceTokenizer::from_json(j, "tiny");
  EXPECT_EQ(tokens_of(*keep, keep->encode("ééé")), (std::vector<std::string>{"é", "##é", "##é"}));  // 3 chars, 6 bytes
  EXPECT_EQ(tokens_of(*keep, keep->encode("éééé")), (std::vector<std::string>{"[UNK]"}));
}

TEST(WordPiece, TruncationKeepsSpecials) {
  const auto tok = WordPieceTokenizer::from_json(tiny_tokenizer({"a", "b", "c", "d"}), "tiny");
  EXPECT_EQ(tokens_of(*tok, tok->encode_truncated("a b c d", 4, {.add_special = true})),
            (std::vector<std::string>{"[CLS]", "a", "b", "[SEP]"}));
  EXPECT_EQ(tokens_of(*tok, tok->encode_truncated("a b c d", 4, {.add_special = true}, true)),
            (std::vector<std::string>{"[CLS]", "c", "d", "[SEP]"}));
  EXPECT_EQ(tokens_of(*tok, tok->encode_truncated("a b", 10, {.add_special = false})), (std::vector<std::string>{"a", "b"}));
  EXPECT_THROW(tok->encode_truncated("a", 1, {.add_special = true}), Error);
}

TEST(WordPiece, BadFilesGiveClearErrors) {
  json j = tiny_tokenizer({"a"});
  j["normalizer"] = {{"type", "NFKC"}};
  EXPECT_THROW(WordPieceTokenizer::from_json(j, "tiny"), Error);
  j = tiny_tokenizer({"a"});
  j["model"]["unk_token"] = "<unk>";
  EXPECT_THROW(WordPieceTokenizer::from_json(j, "tiny"), Error);
  j = tiny_tokenizer({"a"});
  j["model"]["vocab"] = "not an object";
  EXPECT_THROW(WordPieceTokenizer::from_json(j, "tiny"), Error);
  j = tiny_tokenizer({"a"});
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  try {
    WordPieceTokenizer::from_json(j, "tiny");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("Whitespace"), std::string::npos) << e.what();
  }
}

TEST(BertText, NormalizerSteps) {
  const BertNormalizerOptions all;
  EXPECT_EQ(bert_normalize("Héllo\tWÖRLD\r\n", all), "hello world  ");
  EXPECT_EQ(bert_normalize("a\x0b" "b\xc2\x85" "c\xe2\x80\x8b" "d", all), "abcd");  // Cc, Cc, Cf dropped
  EXPECT_EQ(bert_normalize("x\xe4\xb8\xadz", all), "x \xe4\xb8\xad z");            // 中 spaced out
  EXPECT_EQ(bert_normalize("\xe3\x81\x8b", all), "\xe3\x81\x8b");                  // か: no CJK spacing, no Mn
  BertNormalizerOptions lower_only;
  lower_only.strip_accents = false;
  EXPECT_EQ(bert_normalize("\xc4\xb0", lower_only), "i\xcc\x87");  // İ -> i + combining dot
  EXPECT_EQ(bert_normalize("\xc4\xb0", all), "i");                 // accents go first
}

TEST(BertText, PreTokenizerSplitsWhitespaceAndPunctuation) {
  EXPECT_EQ(bert_pre_tokenize("hi,  there!$5 a_b \xc2\xbfq\xe2\x80\x94"),
            (std::vector<std::string_view>{"hi", ",", "there", "!", "$", "5", "a", "_", "b", "\xc2\xbf", "q",
                                           "\xe2\x80\x94"}));
  EXPECT_EQ(bert_pre_tokenize("\xc2\xa9x \xf0\x9f\x98\x80y"), (std::vector<std::string_view>{"\xc2\xa9x", "\xf0\x9f\x98\x80y"}));
  EXPECT_TRUE(bert_pre_tokenize("   ").empty());
}
