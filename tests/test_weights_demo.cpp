// The built-in demo model (load_model("demo")) and its byte tokenizer.
#include <gtest/gtest.h>

#include <cstring>

#include "model/model.h"
#include "model_test_util.h"
#include "tokenizer/byte_tokenizer.h"

using namespace inferscale;
using namespace inferscale::testing;

TEST(DemoModel, Loads) {
  const Model m = load_model("demo");
  EXPECT_EQ(m.name, "demo");
  EXPECT_EQ(m.source, "demo");
  EXPECT_TRUE(m.random_weights);
  const ModelConfig& c = m.config;
  EXPECT_EQ(c.arch, Arch::kLlama);
  EXPECT_EQ(c.hidden_size, 256);
  EXPECT_EQ(c.num_layers, 4);
  EXPECT_EQ(c.num_heads, 8);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.intermediate_size, 688);
  EXPECT_EQ(c.max_position_embeddings, 8192);
  EXPECT_EQ(c.vocab_size, 260);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{257, 259}));
  EXPECT_LT(c.num_parameters(), 5'000'000);
  ASSERT_NE(m.tokenizer, nullptr);
  EXPECT_EQ(m.tokenizer->vocab_size(), 260);
  EXPECT_EQ(m.chat_template.family(), ChatFamily::kChatML);
  EXPECT_EQ(m.weights.layers.size(), 4u);
  EXPECT_EQ(m.weights.embed.dtype, DType::kF32);
}

TEST(DemoModel, DeterministicFingerprint) {
  const Model a = load_model("demo");
  const Model b = load_model("demo");
  EXPECT_EQ(a.fingerprint, b.fingerprint);
  EXPECT_EQ(std::memcmp(a.weights.layers[3].w_up.data, b.weights.layers[3].w_up.data, a.weights.layers[3].w_up.nbytes()), 0);
  LoadOptions opts;
  opts.seed = 1;
  EXPECT_NE(load_model("demo", opts).fingerprint, a.fingerprint);
  opts.seed = 0;
  opts.tokenizer_path = "/some/tokenizer.json";
  expect_error([&] { load_model("demo", opts); }, ErrorKind::kInvalidInput, {"demo"});
}

TEST(ByteTokenizer, EncodeDecode) {
  const ByteTokenizer t;
  EXPECT_EQ(t.encode("hi"), (std::vector<int32_t>{'h', 'i'}));
  EncodeOptions bos;
  bos.add_special = true;
  EXPECT_EQ(t.encode("a", bos), (std::vector<int32_t>{256, 'a'}));
  EXPECT_TRUE(t.adds_bos());
  // Specials are split out of the text; partial matches stay bytes.
  const std::vector<int32_t> ids = t.encode("<|im_start|>user\nhé<|im_end|><|im_");
  const std::vector<int32_t> want = {258, 'u', 's', 'e', 'r', '\n', 'h', 0xc3, 0xa9, 259, '<', '|', 'i', 'm', '_'};
  EXPECT_EQ(ids, want);
  EncodeOptions raw;
  raw.parse_special = false;
  EXPECT_EQ(t.encode("<|im_end|>", raw).size(), 10u);
  EXPECT_EQ(t.decode(ids), "user\nhé<|im_");
  EXPECT_EQ(t.decode(ids, false), "<|im_start|>user\nhé<|im_end|><|im_");
  expect_error([&] { t.decode(std::vector<int32_t>{260}); }, ErrorKind::kInvalidInput, {"260"});
}

TEST(ByteTokenizer, InvalidUtf8BecomesReplacementCharacter) {
  const ByteTokenizer t;
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(t.decode(std::vector<int32_t>{0xff, 'a'}), fffd + "a");
  EXPECT_EQ(t.decode(std::vector<int32_t>{0xe2, 0x82}), fffd);             // truncated 3-byte: one maximal subpart
  EXPECT_EQ(t.decode(std::vector<int32_t>{0xe2, 0x82, 0xac}), "\xE2\x82\xAC");  // €
  EXPECT_EQ(t.decode(std::vector<int32_t>{0xc0, 0x80}), fffd + fffd);      // overlong: each byte
  EXPECT_EQ(t.decode(std::vector<int32_t>{0xed, 0xa0, 0x80}), fffd + fffd + fffd);  // surrogate
  EXPECT_EQ(t.decode(std::vector<int32_t>{0xf0, 0x9f, 0x98, 0x80, 0xf0, 0x9f}), "\xF0\x9F\x98\x80" + fffd);
}

TEST(ByteTokenizer, Vocabulary) {
  const ByteTokenizer t;
  EXPECT_EQ(t.bos_id(), 256);
  EXPECT_EQ(t.eos_ids(), (std::vector<int32_t>{257, 259}));
  EXPECT_TRUE(t.is_special(259));
  EXPECT_FALSE(t.is_special(255));
  EXPECT_EQ(t.id_to_token(10), "<0x0A>");
  EXPECT_EQ(t.id_to_token(257), "<|end_of_text|>");
  EXPECT_EQ(t.token_to_id("<0x0A>"), 10);
  EXPECT_EQ(t.token_to_id("<0xff>"), 255);
  EXPECT_EQ(t.token_to_id("x"), 'x');
  EXPECT_EQ(t.token_to_id("<|im_start|>"), 258);
  EXPECT_EQ(t.token_to_id("<0x1G>"), std::nullopt);
  EXPECT_EQ(t.token_to_id("hello"), std::nullopt);
  for (int32_t id = 0; id < 260; ++id) EXPECT_EQ(t.token_to_id(t.id_to_token(id)), id);
  EXPECT_EQ(t.kind(), "byte");
}
