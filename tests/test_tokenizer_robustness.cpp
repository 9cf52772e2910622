// Inputs the goldens do not cover: invalid UTF-8, ids out of range, very long words and
// whitespace runs, and concurrent encoding through the shared word cache.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <thread>

#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/load_tokenizer.h"
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

// Model files the fuzzers broke (fuzz/regressions/), each now a named kInvalidInput: a
// tokenizer.json whose vocabulary gives an id as 2.5e96, or its WordPiece model a
// max_input_chars_per_word of 1e24 (converted to an integer: undefined behaviour), and a SentencePiece model with an empty piece (the library's trie builder threw an
// exception of its own, which ended the process).
TEST(TokenizerRobustness, FuzzerFoundModelFilesAreNamedErrors) {
  const std::string dir = std::string(INFERSCALE_SOURCE_DIR) + "/fuzz/regressions/";
  for (const auto& [file, says] :
       {std::pair{"fuzz_tokenizer_json/vocab_id_float_past_int64", "is not an integer in [0, 16777216)"},
        std::pair{"fuzz_tokenizer_json/max_chars_float_past_size_t", "model.max_input_chars_per_word is"},
        std::pair{"fuzz_spm/empty_piece", "not a SentencePiece model"}}) {
    const std::string path = dir + file;
    // load_tokenizer knows a file by its name (and reads a tokenizer_config.json beside it): each
    // goes into a folder of its own under the name a model folder gives it.
    const std::filesystem::path d = std::filesystem::temp_directory_path() / ("inferscale-regression-" + std::to_string(::getpid()));
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
    const std::string named = (d / (std::string(file).find("spm") != std::string::npos ? "tokenizer.model" : "tokenizer.json")).string();
    std::filesystem::copy_file(path, named);
    try {
      load_tokenizer(named);
      ADD_FAILURE() << file << " loaded";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidInput) << file;
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
    std::filesystem::remove_all(d);
  }
}
