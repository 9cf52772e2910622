// GGUF `gpt2` vocabularies (byte-level BPE): SmolLM2-135M-Instruct's tokenizer read from the real
// GGUF against HF goldens (skips without models/), the pre-tokenizer groups against HF tokenizers'
// splits, and token types, BOS/EOS flags and errors on small synthetic vocabularies.
#include <gtest/gtest.h>

#include "model/gguf.h"
#include "tokenizer/gguf_bpe.h"
#include "tokenizer/load_tokenizer.h"
#include "tokenizer/pre_tokenizers.h"
#include "tokenizer_test_util.h"
#include "util/check.h"

using namespace inferscale;
using namespace inferscale::test;

namespace {

const std::string kSmolLM2 = "SmolLM2-135M-Instruct.Q4_1.gguf";

#define SKIP_WITHOUT_SMOLLM2()                                                                          \
  do {                                                                                                  \
    if (!std::filesystem::exists(repo_model(kSmolLM2)))                                                 \
      GTEST_SKIP() << repo_model(kSmolLM2) << " absent (scripts/fetch_models.sh fetches it)";         \
  } while (0)

std::shared_ptr<const Tokenizer> smollm2() {
  static const auto tok = make_gguf_tokenizer(GgufFile::open_metadata(repo_model(kSmolLM2)));
  return tok;
}

// Every expectation message of a failing Error, or "" when `f` does not throw.
template <class F>
std::string error_of(F&& f, ErrorKind& kind) {
  try {
    f();
  } catch (const Error& e) {
    kind = e.kind();
    return e.what();
  }
  return {};
}

// Bytes as single tokens (ids 0..255), "h e" -> "he" (256), "he l" -> "hel" (257), then a control
// token, a user-defined one, BOS and EOS.
GgufBpeArrays tiny_arrays() {
  GgufBpeArrays a;
  a.tokens = byte_level_tokens();
  a.tokens.insert(a.tokens.end(), {"he", "hel", "<|ctl|>", "<user>", "<s>", "</s>"});
  a.merges = {"h e", "he l"};
  a.types.assign(a.tokens.size(), static_cast<int32_t>(GgufTokenType::kNormal));
  a.types[258] = static_cast<int32_t>(GgufTokenType::kControl);
  a.types[259] = static_cast<int32_t>(GgufTokenType::kUserDefined);
  a.types[260] = a.types[261] = static_cast<int32_t>(GgufTokenType::kControl);
  a.pre = "gpt-2";
  a.bos_id = 260;
  a.eos_id = 261;
  return a;
}

}  // namespace

TEST(TokenizerGgufBpe, SmolLM2Metadata) {
  SKIP_WITHOUT_SMOLLM2();
  const GgufFile f = GgufFile::open_metadata(repo_model(kSmolLM2));
  EXPECT_TRUE(f.tensors().empty());  // the Q4_1/Q8_0 tensors are not looked at
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
  const auto tok = smollm2();
  EXPECT_EQ(tok->kind(), "gguf-bpe");
  EXPECT_EQ(tok->pre_tokenizer(), "smollm");
  EXPECT_EQ(tok->vocab_size(), 49152);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_FALSE(tok->adds_bos());
  // Generation ends on <|im_end|> (the file's EOS, id 2) and on <|endoftext|>.
  EXPECT_EQ(tok->eos_ids(), (std::vector<int32_t>{2, 0}));
  EXPECT_EQ(tok->token_to_id("<|im_end|>"), 2);
  for (int32_t id = 0; id < 17; ++id) EXPECT_TRUE(tok->is_special(id)) << tok->id_to_token(id);
  EXPECT_FALSE(tok->is_special(17));
  EXPECT_EQ(tok->id_to_token(216), "Ġ");
  EXPECT_EQ(tok->token_bytes(216, true), " ");
}

TEST(TokenizerGgufBpe, SmolLM2MatchesGoldens) {
  SKIP_WITHOUT_SMOLLM2();
  const auto tok = smollm2();
  const nlohmann::json g = load_fixture("smollm2_goldens.json");
  int cases = 0, same_as_transformers = 0, differ = 0;
  for (const auto& c : g.at("cases")) {
    const std::string text = c.at("text");
    SCOPED_TRACE(text);
    const auto ids = tok->encode(text);
    EXPECT_EQ(ids, ids_of(c.at("ids")));
    EXPECT_EQ(tok->encode(text, {.add_special = true}), ids_of(c.at("ids_special")));
    EXPECT_EQ(tok->encode(text, {.parse_special = false}), ids_of(c.at("ids_plain")));
    EXPECT_EQ(tok->decode(ids, /*skip_special=*/false), text);  // byte-level BPE round-trips exactly
    ++cases;
    if (c.contains("hf_gguf_ids")) {
      EXPECT_NE(ids, ids_of(c.at("hf_gguf_ids")));
      ++differ;
    } else {
      ++same_as_transformers;
    }
  }
  EXPECT_EQ(cases, 59);
  // transformers' GGUF loader agrees everywhere but where a digit follows a space run or "½".
  EXPECT_GE(same_as_transformers, 50);
  EXPECT_EQ(differ, 7);
  for (const auto& d : g.at("decode")) {
    const auto ids = ids_of(d.at("ids"));
    EXPECT_EQ(tok->decode(ids, d.at("skip_special")), d.at("text").get<std::string>()) << d.at("ids").dump();
  }
}

TEST(TokenizerGgufBpe, SmolLM2LoadsWithItsChatTemplate) {
  SKIP_WITHOUT_SMOLLM2();
  const LoadedTokenizer t = load_tokenizer(repo_model(kSmolLM2));
  EXPECT_EQ(t.tokenizer->kind(), "gguf-bpe");
  EXPECT_EQ(t.chat.family(), ChatFamily::kChatML);
  EXPECT_EQ(t.chat.default_system(), "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  // The prompt ids equal transformers' apply_chat_template(tokenize=True) on the same GGUF.
  const nlohmann::json g = load_fixture("smollm2_goldens.json");
  int n = 0;
  for (const auto& c : g.at("chat")) {
    std::vector<ChatMessage> msgs;
    for (const auto& m : c.at("messages")) msgs.push_back({m.at("role"), m.at("content")});
    const std::string prompt = t.chat.render(msgs, true);
    EXPECT_EQ(t.tokenizer->encode(prompt, t.chat.encode_options(*t.tokenizer)), ids_of(c.at("ids"))) << prompt;
    ++n;
  }
  EXPECT_EQ(n, 4);
}

// Each pre-tokenizer group splits like the HF tokenizers pre-tokenizer it stands for.
TEST(TokenizerGgufBpe, PreTokenizerGroupsMatchHfSplits) {
  const nlohmann::json g = load_fixture("gguf_pre_tokenizer_goldens.json");
  ASSERT_EQ(g.at("groups").size(), 5u);
  for (const auto& [name, cases] : g.at("groups").items()) {
    const GgufPreTokenizer& pre = gguf_pre_tokenizer(name);
    EXPECT_EQ(pre.name, name);
    const RegexPreTokenizer splitter(pre.regexes);
    int n = 0;
    for (const auto& c : cases) {
      const std::string text = c.at("text");
      std::vector<std::string> pieces;
      for (const std::string_view p : splitter.split(text)) pieces.emplace_back(p);
      EXPECT_EQ(pieces, c.at("pieces").get<std::vector<std::string>>()) << name << ": " << text;
      ++n;
    }
    EXPECT_GE(n, 60) << name;
  }
}

TEST(TokenizerGgufBpe, PreTokenizerNames) {
  // llama.cpp's aliases share their group's regexes.
  EXPECT_EQ(gguf_pre_tokenizer("gpt2").regexes, gguf_pre_tokenizer("gpt-2").regexes);
  EXPECT_EQ(gguf_pre_tokenizer("llama3").name, "llama-bpe");
  EXPECT_TRUE(gguf_pre_tokenizer("llama-bpe").ignore_merges);
  EXPECT_TRUE(gguf_pre_tokenizer("llama-bpe").add_bos);
  EXPECT_EQ(gguf_pre_tokenizer("starcoder").regexes, gguf_pre_tokenizer("smollm").regexes);
  EXPECT_EQ(gguf_pre_tokenizer("deepseek-r1-qwen").name, "qwen2");
  EXPECT_FALSE(gguf_pre_tokenizer("qwen2").add_bos);
  ErrorKind kind{};
  const std::string msg = error_of([] { gguf_pre_tokenizer("tekken"); }, kind);
  EXPECT_EQ(kind, ErrorKind::kUnsupported);
  for (const char* part : {"'tekken'", "smollm", "llama-bpe", "qwen2", "gpt-2", "default"})
    EXPECT_NE(msg.find(part), std::string::npos) << msg;
}

TEST(TokenizerGgufBpe, TokenTypesAndSpecialFlags) {
  const auto tok = make_gguf_bpe_tokenizer(tiny_arrays());
  EXPECT_EQ(tok->kind(), "gguf-bpe");
  EXPECT_EQ(tok->pre_tokenizer(), "gpt-2");
  EXPECT_EQ(tok->vocab_size(), 262);
  EXPECT_EQ(tok->bos_id(), 260);
  EXPECT_EQ(tok->eos_ids(), std::vector<int32_t>{261});
  EXPECT_FALSE(tok->adds_bos());  // gpt-2's default without tokenizer.ggml.add_bos_token
  const int32_t h = 'h', e = 'e', l = 'l', o = 'o';  // the id of a byte token is the byte
  EXPECT_EQ(tok->encode("hello"), (std::vector<int32_t>{257, l, o}));
  // Control tokens: matched only when parse_special, special; user-defined: always, not special.
  EXPECT_EQ(tok->encode("he<|ctl|>he<user>"), (std::vector<int32_t>{256, 258, 256, 259}));
  const auto plain = tok->encode("he<|ctl|><user>", {.parse_special = false});
  EXPECT_EQ(plain.size(), 1u + 7u + 1u);
  EXPECT_EQ(plain.front(), 256);
  EXPECT_EQ(plain.back(), 259);
  EXPECT_TRUE(tok->is_special(258));
  EXPECT_FALSE(tok->is_special(259));
  EXPECT_EQ(tok->decode(std::vector<int32_t>{256, 258, 259, h, e}), "he<user>he");
  EXPECT_EQ(tok->decode(std::vector<int32_t>{256, 258, 259}, false), "he<|ctl|><user>");

  GgufBpeArrays a = tiny_arrays();
  a.add_bos = true;
  a.add_eos = true;
  const auto both = make_gguf_bpe_tokenizer(a);
  EXPECT_TRUE(both->adds_bos());
  EXPECT_EQ(both->encode("he", {.add_special = true}), (std::vector<int32_t>{260, 256, 261}));
  EXPECT_EQ(both->encode("he"), std::vector<int32_t>{256});

  a = tiny_arrays();
  a.pre = "llama-bpe";  // BOS by default, unless the file says otherwise
  EXPECT_EQ(make_gguf_bpe_tokenizer(a)->encode("he", {.add_special = true}), (std::vector<int32_t>{260, 256}));
  a.add_bos = false;
  EXPECT_EQ(make_gguf_bpe_tokenizer(a)->encode("he", {.add_special = true}), std::vector<int32_t>{256});

  a = tiny_arrays();
  a.end_ids = {258};  // tokenizer.ggml.eot_token_id
  EXPECT_EQ(make_gguf_bpe_tokenizer(a)->eos_ids(), (std::vector<int32_t>{261, 258}));
}

TEST(TokenizerGgufBpe, MissingPreIsDefaultWithAWarning) {
  GgufBpeArrays a = tiny_arrays();
  a.pre.clear();
  LogCapture log;
  const auto tok = make_gguf_bpe_tokenizer(a);
  EXPECT_EQ(tok->pre_tokenizer(), "default");
  EXPECT_EQ(log.count("no tokenizer.ggml.pre"), 1u);
  // default splits punctuation runs and 3-digit groups off first.
  EXPECT_EQ(tok->pre_tokenize("a+b 12345"), (std::vector<std::string>{"a", "+", "b", " ", "123", "45"}));
}

TEST(TokenizerGgufBpe, BadArraysAreClearErrors) {
  auto expect = [](GgufBpeArrays a, ErrorKind want, const char* part) {
    ErrorKind kind{};
    const std::string msg = error_of([&] { make_gguf_bpe_tokenizer(std::move(a)); }, kind);
    EXPECT_EQ(kind, want) << msg;
    EXPECT_NE(msg.find(part), std::string::npos) << msg;
  };
  GgufBpeArrays a = tiny_arrays();
  a.types.pop_back();
  expect(a, ErrorKind::kInvalidInput, "token types");
  a = tiny_arrays();
  a.merges.push_back("nospace");
  expect(a, ErrorKind::kInvalidInput, "'nospace'");
  a = tiny_arrays();
  a.merges.push_back("x yz");  // "yz" is not a token
  expect(a, ErrorKind::kInvalidInput, "missing from the vocabulary");
  a = tiny_arrays();
  a.pre = "no-such-pre";
  expect(a, ErrorKind::kUnsupported, "'no-such-pre'");
  a = tiny_arrays();
  a.bos_id = -1;
  a.add_bos = true;
  expect(a, ErrorKind::kInvalidInput, "bos_token_id");
  a = tiny_arrays();
  a.eos_id = 5000;
  expect(a, ErrorKind::kInvalidInput, "out of range");
  a = tiny_arrays();
  a.tokens.clear();
  expect(a, ErrorKind::kInvalidInput, "empty");
}

// The stories260K GGUF (a `llama` vocabulary): open_metadata reads the same metadata as open.
TEST(TokenizerGgufBpe, OpenMetadataReadsWhatOpenReads) {
  const std::string path = shared_data("models/stories260K/stories260K.gguf");
  IS_SKIP_WITHOUT(path);
  const GgufFile full = GgufFile::open(path);
  const GgufFile meta = GgufFile::open_metadata(path);
  EXPECT_FALSE(full.tensors().empty());
  EXPECT_TRUE(meta.tensors().empty());
  EXPECT_EQ(meta.metadata().size(), full.metadata().size());
  EXPECT_EQ(meta.get_strings("tokenizer.ggml.tokens"), full.get_strings("tokenizer.ggml.tokens"));
  EXPECT_LT(meta.header_size(), full.header_size());
}
