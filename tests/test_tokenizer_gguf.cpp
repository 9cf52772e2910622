// make_gguf_tokenizer / load_tokenizer on a real GGUF file (stories260K): the vocabulary read by
// the GGUF reader must behave exactly as the one built from the fixture arrays.
#include <gtest/gtest.h>

#include "model/gguf.h"
#include "tokenizer/load_tokenizer.h"
#include "tokenizer_test_util.h"
#include "util/check.h"

using namespace inferscale;
using namespace inferscale::test;

TEST(TokenizerGguf, FactoryMatchesFixtureArrays) {
  const std::string path = shared_data("models/stories260K/stories260K.gguf");
  IS_SKIP_WITHOUT(path);
  const auto tok = make_gguf_tokenizer(GgufFile::open(path));
  const auto ref = stories_from_fixture();
  EXPECT_EQ(tok->vocab_size(), 512);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_ids(), std::vector<int32_t>{2});
  EXPECT_TRUE(tok->adds_bos());
  const nlohmann::json g = load_fixture("stories260K_goldens.json");  // kept alive: the loop walks into it
  int n = 0;
  for (const auto& c : g.at("cases")) {
    ++n;
    const std::string text = c.at("text");
    EXPECT_EQ(tok->encode(text, {.add_special = true}), ids_of(c.at("ids_special"))) << text;
    EXPECT_EQ(tok->encode(text), ref->encode(text)) << text;
  }
  EXPECT_GE(n, 40);
  for (int32_t id = 0; id < 512; ++id) EXPECT_EQ(tok->token_bytes(id, false), ref->token_bytes(id, false));
}

TEST(TokenizerGguf, LoadTokenizerOnGgufFile) {
  const std::string path = shared_data("models/stories260K/stories260K.gguf");
  IS_SKIP_WITHOUT(path);
  const auto t = load_tokenizer(path);
  EXPECT_EQ(t.tokenizer->kind(), "gguf-spm");
  // No template and no chat special tokens: a base model, served in the plain format.
  EXPECT_EQ(t.chat.family(), ChatFamily::kPlain);
  // The greedy story of shared/data/models/stories260K/greedy_bos_256.json decodes back.
  EXPECT_EQ(t.tokenizer->encode("Once upon a time", {.add_special = true}),
            (std::vector<int32_t>{1, 403, 407, 261, 378}));
}
