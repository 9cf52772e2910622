// ModelConfig from HF config.json: every architecture, both rope layouts, the shared real configs,
// and the errors (unknown architecture, missing key, sliding window, unsupported features).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model_test_util.h"

using namespace inferscale;
using namespace inferscale::testing;
using nlohmann::json;

namespace {

json llama_json() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "hidden_size": 256, "intermediate_size": 688,
    "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 1000,
    "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
    "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": false, "torch_dtype": "bfloat16"})");
}

json with_arch(json j, const std::string& arch) {
  j["architectures"] = {arch};
  return j;
}

}  // namespace

TEST(Config, Llama) {
  const ModelConfig c = ModelConfig::from_hf_json(llama_json());
  EXPECT_EQ(c.arch, Arch::kLlama);
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.hidden_size, 256);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.gqa_group(), 2);
  EXPECT_EQ(c.q_size(), 256);
  EXPECT_EQ(c.kv_size(), 128);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.rope_scaling.type, RopeType::kDefault);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_FALSE(c.rope_interleaved);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{2});
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_EQ(c.kv_bytes_per_token(2), 2 * 4 * 128 * 2);
}

TEST(Config, DefaultsForOptionalKeys) {
  json j = llama_json();
  for (const char* k : {"num_key_value_heads", "rms_norm_eps", "rope_theta", "bos_token_id", "eos_token_id",
                        "tie_word_embeddings", "torch_dtype"})
    j.erase(k);
  const ModelConfig c = ModelConfig::from_hf_json(j);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.bos_token_id, -1);
  EXPECT_TRUE(c.eos_token_ids.empty());
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.torch_dtype, "float32");
}

TEST(Config, NullMeansAbsent) {
  json j = llama_json();
  j["head_dim"] = nullptr;
  j["bos_token_id"] = nullptr;
  j["rope_scaling"] = nullptr;
  const ModelConfig c = ModelConfig::from_hf_json(j);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.bos_token_id, -1);
}

TEST(Config, EosAsList) {
  json j = llama_json();
  j["eos_token_id"] = {128001, 128008, 128009};
  EXPECT_EQ(ModelConfig::from_hf_json(j).eos_token_ids, (std::vector<int32_t>{128001, 128008, 128009}));
}

TEST(Config, Qwen2HasQkvBiasByArchitecture) {
  json j = with_arch(llama_json(), "Qwen2ForCausalLM");
  j["tie_word_embeddings"] = true;
  j["use_sliding_window"] = false;
  j["sliding_window"] = 4096;
  const ModelConfig c = ModelConfig::from_hf_json(j);
  EXPECT_EQ(c.arch, Arch::kQwen2);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.qk_norm);
}

TEST(Config, Qwen3QkNormAndExplicitHeadDim) {
  json j = with_arch(llama_json(), "Qwen3ForCausalLM");
  j["head_dim"] = 64;  // != 256 / 8
  const ModelConfig c = ModelConfig::from_hf_json(j);
  EXPECT_EQ(c.arch, Arch::kQwen3);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.q_size(), 512);
  EXPECT_EQ(c.kv_size(), 256);
  // Qwen3Config's default head_dim is 128 when the key is absent (not hidden / heads).
  j.erase("head_dim");
  EXPECT_EQ(ModelConfig::from_hf_json(j).head_dim, 128);
}

TEST(Config, Mistral) {
  json j = with_arch(llama_json(), "MistralForCausalLM");
  j["sliding_window"] = nullptr;
  const ModelConfig c = ModelConfig::from_hf_json(j);
  EXPECT_EQ(c.arch, Arch::kMistral);
  EXPECT_FALSE(c.attention_bias);
  // A window at least as long as the context never applies.
  j["sliding_window"] = 4096;
  EXPECT_NO_THROW(ModelConfig::from_hf_json(j));
}

TEST(Config, RopeScalingLayouts) {
  // transformers 4.x: rope_theta at the top, rope_scaling with "rope_type" or the older "type".
  json j = llama_json();
  j["rope_theta"] = 500000.0;
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  ModelConfig a = ModelConfig::from_hf_json(j);
  EXPECT_EQ(a.rope_scaling.type, RopeType::kLlama3);
  EXPECT_DOUBLE_EQ(a.rope_theta, 500000.0);
  EXPECT_DOUBLE_EQ(a.rope_scaling.factor, 8.0);
  EXPECT_EQ(a.rope_scaling.original_max_position_embeddings, 8192);

  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  ModelConfig b = ModelConfig::from_hf_json(j);
  EXPECT_EQ(b.rope_scaling.type, RopeType::kLinear);
  EXPECT_DOUBLE_EQ(b.rope_scaling.factor, 2.0);

  // transformers 5.x: one rope_parameters dict holding theta and scaling.
  json k = llama_json();
  k.erase("rope_theta");
  k["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 1024},
                          {"rope_theta", 1e6}, {"beta_fast", nullptr}};
  ModelConfig c = ModelConfig::from_hf_json(k);
  EXPECT_EQ(c.rope_scaling.type, RopeType::kYarn);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_DOUBLE_EQ(c.rope_scaling.beta_fast, 32.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.beta_slow, 1.0);
  EXPECT_TRUE(c.rope_scaling.truncate);
  // Theta inside the dict wins over a top-level one, as in transformers.
  k["rope_theta"] = 123.0;
  EXPECT_DOUBLE_EQ(ModelConfig::from_hf_json(k).rope_theta, 1e6);
  // A default-type rope_parameters carries only theta.
  k["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 5e5}};
  const ModelConfig d = ModelConfig::from_hf_json(k);
  EXPECT_EQ(d.rope_scaling.type, RopeType::kDefault);
  EXPECT_DOUBLE_EQ(d.rope_theta, 5e5);
}

TEST(Config, YarnDefaultsFilledByFinalize) {
  json j = llama_json();
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"original_max_position_embeddings", 1024}};
  const ModelConfig c = ModelConfig::from_hf_json(j);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 4.0);  // 4096 / 1024
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 2.0}};
  EXPECT_EQ(ModelConfig::from_hf_json(j).rope_scaling.original_max_position_embeddings, 4096);
}

TEST(Config, SharedLlama31_8B) {
  const std::string path = shared_data("configs/Llama-3.1-8B.json");
  if (!exists(path)) GTEST_SKIP() << "shared data not present: " << path;
  const ModelConfig c = ModelConfig::from_hf_file(path);
  EXPECT_EQ(c.arch, Arch::kLlama);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.intermediate_size, 14336);
  EXPECT_EQ(c.num_layers, 32);
  EXPECT_EQ(c.num_heads, 32);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.type, RopeType::kLlama3);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(c.bos_token_id, 128000);
  EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{128001});
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.num_parameters(), 8030261248LL);
  EXPECT_EQ(c.kv_bytes_per_token(2), 131072);  // 128 KiB of bf16 KV per token
}

TEST(Config, SharedQwen25_7B) {
  const std::string path = shared_data("configs/Qwen2.5-7B.json");
  if (!exists(path)) GTEST_SKIP() << "shared data not present: " << path;
  const ModelConfig c = ModelConfig::from_hf_file(path);
  EXPECT_EQ(c.arch, Arch::kQwen2);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_EQ(c.hidden_size, 3584);
  EXPECT_EQ(c.num_heads, 28);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.intermediate_size, 18944);
  EXPECT_EQ(c.vocab_size, 152064);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.rope_scaling.type, RopeType::kDefault);
  EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{151643});
  EXPECT_EQ(c.num_parameters(), 7615616512LL);
}

TEST(Config, SharedMistral7B) {
  const std::string path = shared_data("configs/Mistral-7B-v0.3.json");
  if (!exists(path)) GTEST_SKIP() << "shared data not present: " << path;
  const ModelConfig c = ModelConfig::from_hf_file(path);
  EXPECT_EQ(c.arch, Arch::kMistral);
  EXPECT_EQ(c.vocab_size, 32768);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{2});
  EXPECT_EQ(c.num_parameters(), 7248023552LL);
}

TEST(Config, Fixtures) {
  const ModelConfig l = ModelConfig::from_hf_file(fixture("models/llama3_scaled/config.json"));
  EXPECT_EQ(l.rope_scaling.type, RopeType::kLlama3);
  EXPECT_EQ(l.rope_scaling.original_max_position_embeddings, 1024);
  EXPECT_EQ(l.eos_token_ids, (std::vector<int32_t>{2, 3}));
  const ModelConfig q2 = ModelConfig::from_hf_file(fixture("models/qwen2_bias_tied/config.json"));
  EXPECT_TRUE(q2.attention_bias);
  EXPECT_TRUE(q2.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(q2.rope_theta, 1e6);
  const ModelConfig q3 = ModelConfig::from_hf_file(fixture("models/qwen3_qknorm/config.json"));
  EXPECT_TRUE(q3.qk_norm);
  EXPECT_EQ(q3.head_dim, 32);
  EXPECT_EQ(q3.torch_dtype, "float16");
  const ModelConfig m = ModelConfig::from_hf_file(fixture("models/mistral/config.json"));
  EXPECT_EQ(m.arch, Arch::kMistral);
  EXPECT_EQ(m.torch_dtype, "bfloat16");
  const ModelConfig y = ModelConfig::from_hf_file(fixture("models/llama_yarn/config.json"));
  EXPECT_EQ(y.rope_scaling.type, RopeType::kYarn);
  EXPECT_DOUBLE_EQ(y.rope_scaling.factor, 4.0);
  EXPECT_EQ(y.rope_scaling.original_max_position_embeddings, 512);
}

TEST(Config, UnknownArchitectureIsNamed) {
  expect_error([] { ModelConfig::from_hf_json(with_arch(llama_json(), "GPT2LMHeadModel")); }, ErrorKind::kUnsupported,
               {"GPT2LMHeadModel"});
  json j = llama_json();
  j.erase("architectures");
  expect_error([&] { ModelConfig::from_hf_json(j); }, ErrorKind::kInvalidInput, {"architectures"});
}

// An integer key given as a float must be a whole number inside int64's range: 7.8e102 was cast
// to int64_t (undefined behaviour; found by fuzz_model_config, fuzz/regressions/).
TEST(Config, FloatIntegersOutOfRangeAreNamed) {
  for (const double bad : {7.77e102, -1e19, 9.3e18, 4096.5}) {
    json j = llama_json();
    j["hidden_size"] = bad;
    expect_error([&] { ModelConfig::from_hf_json(j); }, ErrorKind::kInvalidInput, {"hidden_size", "must be an integer"});
  }
  json ok = llama_json();
  ok["hidden_size"] = 256.0;
  EXPECT_EQ(ModelConfig::from_hf_json(ok).hidden_size, 256);
}

TEST(Config, MissingKeyNamesKeyAndFile) {
  ScratchDir dir;
  json j = llama_json();
  j.erase("intermediate_size");
  write_file(dir.file("config.json"), j.dump());
  expect_error([&] { ModelConfig::from_hf_file(dir.file("config.json")); }, ErrorKind::kInvalidInput,
               {"intermediate_size", dir.file("config.json")});
  json r = llama_json();
  r["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0}};
  expect_error([&] { ModelConfig::from_hf_json(r); }, ErrorKind::kInvalidInput,
               {"rope_scaling.original_max_position_embeddings"});
}

TEST(Config, BadFiles) {
  ScratchDir dir;
  expect_error([&] { ModelConfig::from_hf_file(dir.file("nope.json")); }, ErrorKind::kNotFound, {"nope.json"});
  write_file(dir.file("bad.json"), "{\"architectures\": [");
  expect_error([&] { ModelConfig::from_hf_file(dir.file("bad.json")); }, ErrorKind::kInvalidInput,
               {"bad.json", "JSON"});
  json j = llama_json();
  j["hidden_size"] = "big";
  expect_error([&] { ModelConfig::from_hf_json(j); }, ErrorKind::kInvalidInput, {"hidden_size"});
  j["hidden_size"] = 256.5;
  expect_error([&] { ModelConfig::from_hf_json(j); }, ErrorKind::kInvalidInput, {"hidden_size"});
  j["hidden_size"] = 256.0;
  EXPECT_EQ(ModelConfig::from_hf_json(j).hidden_size, 256);
}

TEST(Config, SlidingWindowIsRefused) {
  json q = with_arch(llama_json(), "Qwen2ForCausalLM");
  q["use_sliding_window"] = true;
  q["sliding_window"] = 1024;
  q["max_window_layers"] = 2;
  expect_error([&] { ModelConfig::from_hf_json(q); }, ErrorKind::kUnsupported, {"sliding_window=1024", "2 of 4"});
  // Windowed layers only from max_window_layers on: none here.
  q["max_window_layers"] = 28;
  EXPECT_NO_THROW(ModelConfig::from_hf_json(q));
  // Explicit layer types.
  q["layer_types"] = {"full_attention", "sliding_attention", "full_attention", "full_attention"};
  expect_error([&] { ModelConfig::from_hf_json(q); }, ErrorKind::kUnsupported, {"sliding"});
  q["use_sliding_window"] = false;
  EXPECT_NO_THROW(ModelConfig::from_hf_json(q));

  json m = with_arch(llama_json(), "MistralForCausalLM");
  m["sliding_window"] = 1024;
  expect_error([&] { ModelConfig::from_hf_json(m); }, ErrorKind::kUnsupported, {"sliding_window=1024"});
  m.erase("sliding_window");  // MistralConfig's default is 4096, == max_position_embeddings here
  EXPECT_NO_THROW(ModelConfig::from_hf_json(m));
  m["max_position_embeddings"] = 32768;
  expect_error([&] { ModelConfig::from_hf_json(m); }, ErrorKind::kUnsupported, {"sliding_window=4096"});
}

TEST(Config, UnsupportedFeaturesAreNamed) {
  json j = llama_json();
  j["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2.0}};
  expect_error([&] { ModelConfig::from_hf_json(j); }, ErrorKind::kUnsupported, {"dynamic"});
  j["rope_scaling"] = {{"type", "longrope"}, {"short_factor", {1.0}}, {"long_factor", {1.0}}};
  expect_error([&] { ModelConfig::from_hf_json(j); }, ErrorKind::kUnsupported, {"longrope"});
  j = llama_json();
  j["partial_rotary_factor"] = 0.5;
  expect_error([&] { ModelConfig::from_hf_json(j); }, ErrorKind::kUnsupported, {"partial_rotary_factor"});
  j = llama_json();
  j["attention_bias"] = true;
  expect_error([&] { ModelConfig::from_hf_json(j); }, ErrorKind::kUnsupported, {"attention_bias"});
  j = llama_json();
  j["mlp_bias"] = true;
  expect_error([&] { ModelConfig::from_hf_json(j); }, ErrorKind::kUnsupported, {"mlp_bias"});
  j = llama_json();
  j["hidden_act"] = "gelu";
  expect_error([&] { ModelConfig::from_hf_json(j); }, ErrorKind::kUnsupported, {"gelu"});
  j = llama_json();
  j["quantization_config"] = {{"quant_method", "awq"}};
  expect_error([&] { ModelConfig::from_hf_json(j); }, ErrorKind::kUnsupported, {"quantization_config"});
  j = llama_json();
  j["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}}}};
  expect_error([&] { ModelConfig::from_hf_json(j); }, ErrorKind::kUnsupported, {"full_attention"});
}

TEST(Config, InvalidCombinations) {
  json j = llama_json();
  j["num_key_value_heads"] = 3;
  expect_error([&] { ModelConfig::from_hf_json(j); }, ErrorKind::kInvalidInput, {"num_key_value_heads"});
  j = llama_json();
  j["num_attention_heads"] = 7;
  j["num_key_value_heads"] = 7;
  expect_error([&] { ModelConfig::from_hf_json(j); }, ErrorKind::kInvalidInput, {"hidden_size", "head_dim"});
  j = llama_json();
  j["head_dim"] = 33;
  expect_error([&] { ModelConfig::from_hf_json(j); }, ErrorKind::kInvalidInput, {"head_dim"});
}

TEST(Config, FingerprintAndJson) {
  const ModelConfig a = ModelConfig::from_hf_json(llama_json());
  const ModelConfig b = ModelConfig::from_hf_json(llama_json());
  EXPECT_EQ(a.fingerprint(), b.fingerprint());
  json j = llama_json();
  j["rope_theta"] = 10000.5;
  EXPECT_NE(ModelConfig::from_hf_json(j).fingerprint(), a.fingerprint());
  j = llama_json();
  j["rms_norm_eps"] = 1e-6;
  EXPECT_NE(ModelConfig::from_hf_json(j).fingerprint(), a.fingerprint());
  j = llama_json();
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  const std::string lin2 = ModelConfig::from_hf_json(j).fingerprint();
  j["rope_scaling"]["factor"] = 3.0;
  EXPECT_NE(ModelConfig::from_hf_json(j).fingerprint(), lin2);
  // Tokens that do not change a forward's numbers leave it alone.
  j = llama_json();
  j["eos_token_id"] = 7;
  EXPECT_EQ(ModelConfig::from_hf_json(j).fingerprint(), a.fingerprint());

  const json out = a.to_json();
  EXPECT_EQ(out.at("arch"), "llama");
  EXPECT_EQ(out.at("head_dim"), 32);
  EXPECT_EQ(out.at("rope_scaling").at("type"), "default");
  EXPECT_EQ(out.at("num_parameters"), a.num_parameters());
}
