// load_model with real tokenizers: a GGUF's own vocabulary (stories260K), an HF tokenizer beside
// random weights, the vocabulary-size check, and tokenizer files in the fingerprint.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "model/model.h"
#include "model_test_util.h"

using namespace inferscale;
using namespace inferscale::testing;
namespace fs = std::filesystem;

// Tokenizer files are loaded by branch tok's load_tokenizer.
// TODO(model): drop this switch once tok is merged into main (the tests then always run).
#if __has_include("tokenizer/load_tokenizer.h")
#define SKIP_WITHOUT_TOKENIZERS()
#else
#define SKIP_WITHOUT_TOKENIZERS() GTEST_SKIP() << "tokenizer files need branch tok (load_tokenizer), not merged yet"
#endif

namespace {

// A small model config over the Llama 3 vocabulary (128,256 ids), so random weights stay cheap.
std::string write_small_llama3_config(const ScratchDir& dir) {
  nlohmann::json j = nlohmann::json::parse(read_file(shared_data("configs/Llama-3.1-8B.json")));
  j["hidden_size"] = 64;
  j["intermediate_size"] = 128;
  j["num_hidden_layers"] = 1;
  j["num_attention_heads"] = 4;
  j["num_key_value_heads"] = 2;
  const fs::path d = dir.path() / "llama3-small";
  fs::create_directories(d);
  write_file((d / "config.json").string(), j.dump());
  return d.string();
}

}  // namespace

TEST(ModelTokenizer, GgufVocabulary) {
  SKIP_WITHOUT_TOKENIZERS();
  const std::string path = shared_data("models/stories260K/stories260K.gguf");
  if (!exists(path)) GTEST_SKIP() << "shared data not present: " << path;
  const Model m = load_model(path);
  EXPECT_EQ(m.name, "stories260K");
  EXPECT_FALSE(m.random_weights);
  EXPECT_EQ(m.tokenizer->vocab_size(), 512);
  EXPECT_EQ(m.tokenizer->kind(), "gguf-spm");
  EXPECT_EQ(m.tokenizer->bos_id(), 1);
  EXPECT_TRUE(m.config.tie_word_embeddings);
  EXPECT_EQ(load_model(path).fingerprint, m.fingerprint);
}

TEST(ModelTokenizer, HfTokenizerBesideRandomWeights) {
  SKIP_WITHOUT_TOKENIZERS();
  const std::string tok = shared_data("tokenizers/llama3.1");
  if (!exists(tok) || !exists(shared_data("configs/Llama-3.1-8B.json"))) GTEST_SKIP() << "shared data not present";
  ScratchDir dir;
  const std::string model_dir = write_small_llama3_config(dir);
  LoadOptions opts;
  opts.random_weights = true;
  opts.tokenizer_path = tok;
  const Model m = load_model(model_dir, opts);
  EXPECT_EQ(m.tokenizer->kind(), "bpe");
  EXPECT_GE(m.tokenizer->vocab_size(), 128000);
  EXPECT_NE(m.chat_template.family(), ChatFamily::kNone);
  // The tokenizer files are part of the fingerprint: a changed tokenizer_config.json changes it.
  const fs::path tok_copy = dir.path() / "tok";
  fs::copy(tok, tok_copy);
  opts.tokenizer_path = tok_copy.string();
  const std::string base = load_model(model_dir, opts).fingerprint;
  EXPECT_EQ(base, m.fingerprint);
  nlohmann::json tc = nlohmann::json::parse(read_file((tok_copy / "tokenizer_config.json").string()));
  tc["add_bos_token"] = false;
  write_file((tok_copy / "tokenizer_config.json").string(), tc.dump());
  EXPECT_NE(load_model(model_dir, opts).fingerprint, base);
}

TEST(ModelTokenizer, VocabularyLargerThanTheModelIsRefused) {
  SKIP_WITHOUT_TOKENIZERS();
  const std::string tok = shared_data("tokenizers/llama3.1");
  if (!exists(tok)) GTEST_SKIP() << "shared data not present: " << tok;
  LoadOptions opts;
  opts.tokenizer_path = tok;
  expect_error([&] { load_model(fixture("models/mistral"), opts); }, ErrorKind::kInvalidInput, {"300"});
}
