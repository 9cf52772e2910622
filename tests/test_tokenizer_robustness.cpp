// Inputs the goldens do not cover: invalid UTF-8, ids out of range, very long words and
// whitespace runs, and concurrent encoding through the shared word cache.
#include <gtest/gtest.h>

#include <thread>

#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/utf8.h"
#include "tokenizer_test_util.h"
#include "util/check.h"

using namespace inferscale;
using namespace inferscale::test;

namespace {

void check_invalid_utf8_is_repaired(const Tokenizer& tok) {
  const std::string bad = "ab\xFF\xFE c\xE4\xB8 d\xED\xA0\x80";
  EXPECT_EQ(tok.encode(bad), tok.encode(utf8_lossy(bad)));
  EXPECT_TRUE(utf8_valid(tok.decode(tok.encode(bad))));
}

void check_bad_ids(const Tokenizer& tok) {
  for (const int32_t id : {-1, tok.vocab_size()}) {
    try {
      tok.decode(std::vector<int32_t>{id});
      ADD_FAILURE() << "id " << id << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidInput);
    }
  }
}

}  // namespace

TEST(TokenizerRobustness, GgufVocabulary) {
  const auto tok = stories_from_fixture();
  check_invalid_utf8_is_repaired(*tok);
  check_bad_ids(*tok);
  const std::string long_word(20000, 'a');
  EXPECT_EQ(tok->decode(tok->encode(long_word)), long_word);
}

TEST(TokenizerRobustness, ByteLevelBpeLongInputsAndThreads) {
  const std::string path = shared_data("tokenizers/llama3.1/tokenizer.json");
  IS_SKIP_WITHOUT(path);
  const auto tok = HfTokenizer::from_file(path);
  check_invalid_utf8_is_repaired(*tok);
  check_bad_ids(*tok);
  // One pre-token of 200k bytes each: regex (JIT) and the merge loop must cope.
  for (const std::string& s : {std::string(200000, 'a'), std::string(200000, ' '), std::string(200000, '7'),
                               [] { std::string cjk; for (int i = 0; i < 30000; ++i) cjk += "中文"; return cjk; }()}) {
    EXPECT_EQ(tok->decode(tok->encode(s)), s);
  }
  // Concurrent encodes agree with a single-threaded run (the word cache is shared).
  std::vector<std::string> texts;
  for (int i = 0; i < 400; ++i) texts.push_back("turn " + std::to_string(i * 7919) + ": I'd say héllo wörld " + std::string(i % 7, ' ') + "😀");
  std::vector<std::vector<int32_t>> expected;
  for (const auto& t : texts) expected.push_back(tok->encode(t));
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int w = 0; w < 4; ++w)
    threads.emplace_back([&, w] {
      for (size_t i = 0; i < texts.size(); ++i)
        if (tok->encode(texts[(i + w * 97) % texts.size()]) != expected[(i + w * 97) % texts.size()]) ++mismatches[w];
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}
