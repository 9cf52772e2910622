// load_tokenizer: finding the tokenizer files of a model directory, specials and chat family from
// tokenizer_config.json, and clear errors for missing, malformed or unsupported files.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "tokenizer/load_tokenizer.h"
#include "tokenizer/json_file.h"
#include "tokenizer_test_util.h"
#include "util/check.h"

using namespace inferscale;
using namespace inferscale::test;
namespace fs = std::filesystem;

namespace {

// A fresh temporary directory, removed at the end of the test.
struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("is_tok_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  void write(const std::string& name, const std::string& text) const { std::ofstream(path / name) << text; }
};

// The error load_tokenizer throws for `path`.
Error load_error(const std::string& path) {
  try {
    load_tokenizer(path);
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no error for " << path;
  return Error(ErrorKind::kInternal, "");
}

bool mentions(const Error& e, const std::string& what) { return std::string(e.what()).find(what) != std::string::npos; }

// A minimal valid byte-level tokenizer.json, edited by each error test.
nlohmann::json tiny_tokenizer_json() {
  return nlohmann::json::parse(R"({
    "added_tokens": [{"id": 3, "content": "<eos>", "special": true}],
    "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
    "post_processor": null,
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}
  })");
}

}  // namespace

TEST(LoadTokenizer, Llama31Directory) {
  const std::string dir = shared_data("tokenizers/llama3.1");
  IS_SKIP_WITHOUT(dir);
  const auto t = load_tokenizer(dir);
  EXPECT_EQ(t.tokenizer->kind(), "bpe");
  EXPECT_EQ(t.tokenizer->bos_id(), 128000);
  const auto eos = t.tokenizer->eos_ids();
  ASSERT_FALSE(eos.empty());
  EXPECT_EQ(eos[0], 128009);  // the config's eos_token <|eot_id|> first
  EXPECT_NE(std::find(eos.begin(), eos.end(), 128001), eos.end());
  EXPECT_EQ(t.chat.family(), ChatFamily::kLlama3);  // the shared config carries the Llama 3 template
}

TEST(LoadTokenizer, QwenDirectories) {
  const std::string slow = shared_data("tokenizers/qwen2.5");
  IS_SKIP_WITHOUT(slow);
  const auto t = load_tokenizer(slow);  // vocab.json + merges.txt
  EXPECT_EQ(t.tokenizer->eos_ids()[0], 151643);
  EXPECT_FALSE(t.tokenizer->adds_bos());
  EXPECT_EQ(t.chat.family(), ChatFamily::kChatML);
  EXPECT_EQ(t.tokenizer->encode("Hello world"), (std::vector<int32_t>{9707, 1879}));
  const auto fast = load_tokenizer(shared_data("tokenizers/qwen3"));
  EXPECT_EQ(fast.tokenizer->eos_ids()[0], 151645);  // Qwen3's config: <|im_end|>
  EXPECT_EQ(fast.chat.family(), ChatFamily::kChatML);
}

TEST(LoadTokenizer, MistralWithoutConfigGuessesFamily) {
  const std::string dir = shared_data("tokenizers/mistral-v3");
  IS_SKIP_WITHOUT(dir);
  for (const std::string& path : {dir, dir + "/tokenizer.model.v3"}) {
    const auto t = load_tokenizer(path);
    EXPECT_EQ(t.tokenizer->kind(), "sentencepiece");
    EXPECT_TRUE(t.tokenizer->adds_bos());
    EXPECT_EQ(t.chat.family(), ChatFamily::kMistral);
    EXPECT_EQ(t.tokenizer->encode(t.chat.render({{"user", "Hi"}}, true)),
              (std::vector<int32_t>{1, 3, 16127, 4}));  // <s>[INST]▁Hi[/INST]
  }
}

TEST(LoadTokenizer, TiktokenFileIsUnsupported) {
  const std::string path = shared_data("tokenizers/llama3/tokenizer.model");
  IS_SKIP_WITHOUT(path);
  const Error e = load_error(path);
  EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
  EXPECT_TRUE(mentions(e, "tiktoken")) << e.what();
}

TEST(LoadTokenizer, MissingFilesNameThePath) {
  const TempDir tmp;
  Error e = load_error((tmp.path / "nope").string());
  EXPECT_EQ(e.kind(), ErrorKind::kNotFound);
  EXPECT_TRUE(mentions(e, "nope"));
  e = load_error(tmp.path.string());  // a directory without tokenizer files
  EXPECT_EQ(e.kind(), ErrorKind::kNotFound);
  EXPECT_TRUE(mentions(e, "tokenizer.json"));
  tmp.write("vocab.json", "{}");
  tmp.write("merges.txt", "");
  e = load_error(tmp.path.string());  // slow files without a Qwen2 config
  EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
}

TEST(LoadTokenizer, MalformedFilesNameTheFile) {
  const TempDir tmp;
  tmp.write("tokenizer.json", "{ not json");
  Error e = load_error(tmp.path.string());
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidInput);
  EXPECT_TRUE(mentions(e, "tokenizer.json")) << e.what();

  tmp.write("tokenizer.json", tiny_tokenizer_json().dump());
  tmp.write("tokenizer_config.json", "[1, 2");
  e = load_error(tmp.path.string());
  EXPECT_TRUE(mentions(e, "tokenizer_config.json")) << e.what();

  tmp.write("tokenizer_config.json", R"({"eos_token": "<missing>"})");
  e = load_error(tmp.path.string());
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidInput);
  EXPECT_TRUE(mentions(e, "<missing>")) << e.what();

  fs::remove(tmp.path / "tokenizer.json");
  fs::remove(tmp.path / "tokenizer_config.json");
  tmp.write("tokenizer.model", std::string("\x0a\xff\xff garbage", 11));
  e = load_error(tmp.path.string());
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidInput);
  EXPECT_TRUE(mentions(e, "tokenizer.model")) << e.what();
}

TEST(LoadTokenizer, TinyTokenizerJsonWorks) {
  const TempDir tmp;
  tmp.write("tokenizer.json", tiny_tokenizer_json().dump());
  tmp.write("tokenizer_config.json", R"({"eos_token": {"content": "<eos>"}})");
  const auto t = load_tokenizer(tmp.path.string());
  EXPECT_EQ(t.tokenizer->encode("abab<eos>"), (std::vector<int32_t>{2, 2, 3}));
  EXPECT_EQ(t.tokenizer->eos_ids(), std::vector<int32_t>{3});
  EXPECT_EQ(t.chat.family(), ChatFamily::kPlain);  // no template, no chat tokens: the plain fallback
}

TEST(LoadTokenizer, UnsupportedFeaturesAreNamed) {
  const std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>> cases = {
      {[](nlohmann::json& j) { j["model"]["type"] = "Unigram"; }, "model type 'Unigram'"},  // WordPiece: wordpiece.h
      {[](nlohmann::json& j) { j["normalizer"] = {{"type", "Lowercase"}}; }, "normalizer type 'Lowercase'"},
      {[](nlohmann::json& j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; }, "pre_tokenizer type 'Whitespace'"},
      {[](nlohmann::json& j) { j["decoder"] = {{"type", "WordPiece"}}; }, "decoder type 'WordPiece'"},
      {[](nlohmann::json& j) { j["post_processor"] = {{"type", "BertProcessing"}}; }, "post_processor type 'BertProcessing'"},
      {[](nlohmann::json& j) { j["model"]["byte_fallback"] = true; }, "byte_fallback"},
      {[](nlohmann::json& j) {
         j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", "Removed"}};
       }, "Split behavior 'Removed'"},
  };
  const TempDir tmp;
  for (const auto& [edit, name] : cases) {
    nlohmann::json j = tiny_tokenizer_json();
    edit(j);
    tmp.write("tokenizer.json", j.dump());
    const Error e = load_error(tmp.path.string());
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported) << name;
    EXPECT_TRUE(mentions(e, name)) << e.what();
    EXPECT_TRUE(mentions(e, "tokenizer.json")) << e.what();
  }
  nlohmann::json j = tiny_tokenizer_json();
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         {{{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}},
                          {{"type", "ByteLevel"}, {"use_regex", false}}}}};
  tmp.write("tokenizer.json", j.dump());
  const Error e = load_error(tmp.path.string());
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidInput);
  EXPECT_TRUE(mentions(e, "tokenizer.json") && mentions(e, "(unclosed")) << e.what();
}

// Import tokenizes thousands of conversation turns: LoCoMo's 5,882 turns (~730 KB) must be quick.
TEST(LoadTokenizer, EncodesConversationTurnsFast) {
  const std::string data = shared_data("locomo/locomo10.json");
  const std::string dir = shared_data("tokenizers/llama3.1");
  IS_SKIP_WITHOUT(data);
  IS_SKIP_WITHOUT(dir);
  std::vector<std::string> turns;
  for (const auto& sample : read_tokenizer_json(data))
    for (const auto& [key, session] : sample.at("conversation").items())
      if (session.is_array())
        for (const auto& turn : session) turns.push_back(turn.at("text").get<std::string>());
  ASSERT_GT(turns.size(), 5000u);
  const auto t = load_tokenizer(dir);
  size_t bytes = 0, tokens = 0;
  const auto start = std::chrono::steady_clock::now();
  for (const auto& s : turns) {
    bytes += s.size();
    tokens += t.tokenizer->encode(s).size();
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("encoded %zu turns, %zu bytes -> %zu tokens in %.3f s (%.1f MB/s)\n", turns.size(), bytes, tokens,
              secs, bytes / secs / 1e6);
  EXPECT_LT(secs, 10.0);  // generous: a shared 2-core CI machine
}
