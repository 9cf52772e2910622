// IncrementalDecoder: never emits broken UTF-8, and what it emits concatenates to decode(all ids).
// Property tests over random id sequences (all ids, and ids biased to byte tokens that split
// characters) for every tokenizer, plus streaming of real text.
#include <gtest/gtest.h>

#include <random>

#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/spm_tokenizer.h"
#include "tokenizer/utf8.h"
#include "tokenizer_test_util.h"

using namespace inferscale;
using namespace inferscale::test;

namespace {

// Streams `ids` and checks the invariants; returns the streamed text.
std::string stream(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip_special) {
  IncrementalDecoder dec(tok, skip_special);
  std::string all;
  for (const int32_t id : ids) {
    const std::string piece = dec.push(id);
    EXPECT_TRUE(utf8_valid(piece)) << "push emitted broken UTF-8 at id " << id;
    all += piece;
  }
  const std::string rest = dec.flush();
  EXPECT_TRUE(utf8_valid(rest));
  return all + rest;
}

// Random sequences drawn from `pool` (or the whole vocabulary when empty).
void random_property(const Tokenizer& tok, const std::vector<int32_t>& pool, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> any(0, tok.vocab_size() - 1);
  std::uniform_int_distribution<size_t> pick(0, pool.empty() ? 0 : pool.size() - 1);
  std::uniform_int_distribution<int> len(1, 40);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<int32_t> ids(static_cast<size_t>(len(rng)));
    for (auto& id : ids) id = pool.empty() || rng() % 4 == 0 ? any(rng) : pool[pick(rng)];
    for (const bool skip : {true, false}) {
      ASSERT_EQ(stream(tok, ids, skip), tok.decode(ids, skip)) << "trial " << trial << " skip " << skip;
    }
  }
}

// Ids whose bytes are not a whole character (byte-fallback tokens, byte-level fragments).
std::vector<int32_t> partial_char_ids(const Tokenizer& tok) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    if (!utf8_valid(tok.token_bytes(id, false))) ids.push_back(id);
  }
  return ids;
}

const char* kText = "Streaming 😀🎉 中文字符 naïve café — ok\n\t  spaces 👨‍👩‍👧‍👦 end";

void check_text_stream(const Tokenizer& tok) {
  const auto ids = tok.encode(kText);
  EXPECT_EQ(stream(tok, ids, true), tok.decode(ids, true));
}

}  // namespace

TEST(TokenizerIncrementalDecoder, Stories260KRandomIds) {
  const auto tok = stories_from_fixture();
  const auto partial = partial_char_ids(*tok);
  EXPECT_GE(partial.size(), 128u);  // the <0x80>..<0xFF> byte tokens
  random_property(*tok, {}, 1);
  random_property(*tok, partial, 2);
  check_text_stream(*tok);
  // A character split over byte tokens is held back until complete.
  IncrementalDecoder dec(*tok);
  const auto ids = tok->encode("😀");  // "▁" then four byte tokens
  ASSERT_EQ(ids.size(), 5u);
  EXPECT_EQ(dec.push(ids[0]), "");  // the leading dummy-prefix space is dropped
  EXPECT_EQ(dec.push(ids[1]), "");
  EXPECT_EQ(dec.push(ids[2]), "");
  EXPECT_EQ(dec.push(ids[3]), "");
  EXPECT_EQ(dec.push(ids[4]), "😀");
  EXPECT_EQ(dec.flush(), "");
}

TEST(TokenizerIncrementalDecoder, FlushReplacesAnIncompleteCharacter) {
  const auto tok = stories_from_fixture();
  IncrementalDecoder dec(*tok);
  EXPECT_EQ(dec.push(*tok->token_to_id("<0xE4>")), "");
  EXPECT_EQ(dec.push(*tok->token_to_id("<0xB8>")), "");
  EXPECT_EQ(dec.flush(), "\xEF\xBF\xBD");
  // An invalid byte is released as U+FFFD as soon as it is known to be invalid.
  IncrementalDecoder dec2(*tok);
  EXPECT_EQ(dec2.push(*tok->token_to_id("<0xE4>")), "");
  EXPECT_EQ(dec2.push(*tok->token_to_id("a")), "\xEF\xBF\xBD" "a");
}

TEST(TokenizerIncrementalDecoder, SentencePieceLeadingSpace) {
  const std::string path = shared_data("tokenizers/mistral-v3/tokenizer.model.v3");
  IS_SKIP_WITHOUT(path);
  const auto tok = SpmTokenizer::from_file(path);
  // BOS (skipped) then "▁Hello▁world": the first space goes, the second stays.
  IncrementalDecoder dec(*tok);
  EXPECT_EQ(dec.push(1), "");
  EXPECT_EQ(dec.push(23325), "Hello");
  EXPECT_EQ(dec.push(2294), " world");
  // Not skipping BOS: "<s>" is the first text, so the space after it stays (as HF decodes).
  IncrementalDecoder raw(*tok, false);
  EXPECT_EQ(raw.push(1), "<s>");
  EXPECT_EQ(raw.push(23325), " Hello");
  random_property(*tok, {}, 3);
  random_property(*tok, partial_char_ids(*tok), 4);
  check_text_stream(*tok);
}

TEST(TokenizerIncrementalDecoder, Llama3ByteLevel) {
  const std::string path = shared_data("tokenizers/llama3.1/tokenizer.json");
  IS_SKIP_WITHOUT(path);
  const auto tok = HfTokenizer::from_file(path);
  random_property(*tok, {}, 5);
  random_property(*tok, partial_char_ids(*tok), 6);
  check_text_stream(*tok);
}

TEST(TokenizerIncrementalDecoder, QwenByteLevel) {
  const std::string path = shared_data("tokenizers/qwen3/tokenizer.json");
  IS_SKIP_WITHOUT(path);
  const auto tok = HfTokenizer::from_file(path);
  random_property(*tok, partial_char_ids(*tok), 7);
  check_text_stream(*tok);
}
