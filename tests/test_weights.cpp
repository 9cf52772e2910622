// Weight mapping: every fixture (HF names, f32/f16/bf16, sharded, tied, biases, q/k norms) and
// stories260K (GGUF names), shape errors naming the tensor and both shapes, and load_model on
// fixture directories (tokenizer fallback, fingerprints).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "backend/backend.h"
#include "model/gguf.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "model/weight_loader.h"
#include "model_test_util.h"

using namespace inferscale;
using namespace inferscale::testing;
namespace fs = std::filesystem;

namespace {

ModelWeights load_fixture(const std::string& name, ModelConfig* cfg_out = nullptr) {
  const std::string dir = fixture("models/" + name);
  const ModelConfig cfg = ModelConfig::from_hf_file(dir + "/config.json");
  if (cfg_out) *cfg_out = cfg;
  return load_weights(cfg, SafetensorsCheckpoint::open(dir));
}

void expect_layer_shapes(const ModelConfig& c, const ModelWeights& w, DType dt) {
  ASSERT_EQ(w.layers.size(), static_cast<size_t>(c.num_layers));
  EXPECT_EQ(w.embed.shape, (std::vector<int64_t>{c.vocab_size, c.hidden_size}));
  EXPECT_EQ(w.lm_head.shape, (std::vector<int64_t>{c.vocab_size, c.hidden_size}));
  EXPECT_EQ(w.final_norm.shape, (std::vector<int64_t>{c.hidden_size}));
  for (const LayerWeights& l : w.layers) {
    EXPECT_EQ(l.wq.shape, (std::vector<int64_t>{c.q_size(), c.hidden_size}));
    EXPECT_EQ(l.wk.shape, (std::vector<int64_t>{c.kv_size(), c.hidden_size}));
    EXPECT_EQ(l.wv.shape, (std::vector<int64_t>{c.kv_size(), c.hidden_size}));
    EXPECT_EQ(l.wo.shape, (std::vector<int64_t>{c.hidden_size, c.q_size()}));
    EXPECT_EQ(l.w_gate.shape, (std::vector<int64_t>{c.intermediate_size, c.hidden_size}));
    EXPECT_EQ(l.w_up.shape, (std::vector<int64_t>{c.intermediate_size, c.hidden_size}));
    EXPECT_EQ(l.w_down.shape, (std::vector<int64_t>{c.hidden_size, c.intermediate_size}));
    EXPECT_EQ(l.attn_norm.shape, (std::vector<int64_t>{c.hidden_size}));
    EXPECT_EQ(l.ffn_norm.shape, (std::vector<int64_t>{c.hidden_size}));
    EXPECT_EQ(l.bq.empty(), !c.attention_bias);
    EXPECT_EQ(l.bk.empty(), !c.attention_bias);
    EXPECT_EQ(l.bv.empty(), !c.attention_bias);
    EXPECT_EQ(l.q_norm.empty(), !c.qk_norm);
    EXPECT_EQ(l.k_norm.empty(), !c.qk_norm);
    for (const HostTensor* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down, &l.attn_norm, &l.ffn_norm})
      EXPECT_EQ(t->dtype, dt);
  }
}

}  // namespace

TEST(Weights, Llama3Scaled) {
  ModelConfig c;
  const ModelWeights w = load_fixture("llama3_scaled", &c);
  expect_layer_shapes(c, w, DType::kF32);
  EXPECT_NE(w.lm_head.data, w.embed.data);  // untied
}

TEST(Weights, Qwen2BiasTiedSharded) {
  ModelConfig c;
  const ModelWeights w = load_fixture("qwen2_bias_tied", &c);
  expect_layer_shapes(c, w, DType::kF32);
  EXPECT_EQ(w.lm_head.data, w.embed.data);  // tied: the same storage
  EXPECT_EQ(w.layers[1].bq.shape, (std::vector<int64_t>{64}));
  EXPECT_EQ(w.layers[1].bk.shape, (std::vector<int64_t>{32}));
}

TEST(Weights, Qwen3QkNormF16) {
  ModelConfig c;
  const ModelWeights w = load_fixture("qwen3_qknorm", &c);
  expect_layer_shapes(c, w, DType::kF16);
  EXPECT_EQ(c.q_size(), 128);  // head_dim 32 x 4 heads != hidden 64
  EXPECT_EQ(w.layers[0].wq.shape, (std::vector<int64_t>{128, 64}));
  EXPECT_EQ(w.layers[0].wo.shape, (std::vector<int64_t>{64, 128}));
  EXPECT_EQ(w.layers[0].q_norm.shape, (std::vector<int64_t>{32}));
}

TEST(Weights, EmbeddingBackboneWithoutModelPrefixOrHead) {
  // Qwen3-Embedding style: the fixture's tensors renamed without "model." and without lm_head
  // (untied): the same views, an empty head, and the CPU backend refuses logits but gives hidden states.
  const ModelConfig c = ModelConfig::from_hf_file(fixture("models/qwen3_qknorm/config.json"));
  const SafetensorsCheckpoint ckpt = SafetensorsCheckpoint::open(fixture("models/qwen3_qknorm"));
  const ModelWeights ref = load_weights(c, ckpt);
  TensorSource src;
  src.where = "backbone";
  for (const std::string& n : ckpt.names())
    if (n.rfind("model.", 0) == 0) src.names.push_back(n.substr(6));
  src.find = [&](const std::string& n) -> std::optional<HostTensor> {
    if (!ckpt.has("model." + n)) return std::nullopt;
    return ckpt.get("model." + n);
  };
  const ModelWeights w = map_weights(c, WeightNaming::kHF, src);
  EXPECT_TRUE(w.lm_head.empty());
  EXPECT_EQ(w.embed.data, ref.embed.data);
  EXPECT_EQ(w.final_norm.data, ref.final_norm.data);
  EXPECT_EQ(w.layers[1].k_norm.data, ref.layers[1].k_norm.data);
  EXPECT_EQ(w.layers[1].w_down.data, ref.layers[1].w_down.data);

  BackendOptions bo;
  bo.num_cache_blocks = 4;
  auto be = make_cpu_backend(c, w, bo);
  ForwardBatch fb;
  fb.token_ids = {5, 7, 9};
  fb.positions = {0, 1, 2};
  fb.slot_mapping = {0, 1, 2};
  fb.q_indptr = {0, 3};
  fb.kv_indices = {0};
  fb.kv_indptr = {0, 1};
  fb.output_tokens = {2};
  std::vector<float> out;
  expect_error([&] { be->forward(fb, out); }, ErrorKind::kUnsupported, {"no LM head"});
  fb.output = ForwardBatch::Output::kHidden;
  be->forward(fb, out);
  EXPECT_EQ(out.size(), static_cast<size_t>(c.hidden_size));
}

TEST(Weights, MistralBf16AndYarn) {
  ModelConfig c;
  ModelWeights w = load_fixture("mistral", &c);
  expect_layer_shapes(c, w, DType::kBF16);
  w = load_fixture("llama_yarn", &c);
  expect_layer_shapes(c, w, DType::kF32);
}

TEST(Weights, ViewsIntoTheMapping) {
  // No copy: a weight is the checkpoint's own view of the mapped bytes, and keeps the mapping alive.
  const ModelConfig c = ModelConfig::from_hf_file(fixture("models/llama3_scaled/config.json"));
  ModelWeights w;
  const void* expected = nullptr;
  {
    const SafetensorsCheckpoint ckpt = SafetensorsCheckpoint::open(fixture("models/llama3_scaled"));
    w = load_weights(c, ckpt);
    expected = ckpt.get("model.layers.1.mlp.down_proj.weight").data;
  }
  EXPECT_EQ(w.layers[1].w_down.data, expected);
  EXPECT_NE(w.layers[1].w_down.owner, nullptr);
  EXPECT_TRUE(std::isfinite(w.layers[1].w_down.as<float>()[171]));  // still mapped after the checkpoint is gone
}

TEST(Weights, ShapeMismatchNamesTensorAndShapes) {
  ModelConfig c = ModelConfig::from_hf_file(fixture("models/llama3_scaled/config.json"));
  c.intermediate_size = 100;
  expect_error([&] { load_weights(c, SafetensorsCheckpoint::open(fixture("models/llama3_scaled"))); },
               ErrorKind::kInvalidInput, {"model.layers.0.mlp.gate_proj.weight", "[172, 64]", "[100, 64]"});
  c = ModelConfig::from_hf_file(fixture("models/llama3_scaled/config.json"));
  c.num_layers = 3;
  expect_error([&] { load_weights(c, SafetensorsCheckpoint::open(fixture("models/llama3_scaled"))); },
               ErrorKind::kNotFound, {"model.layers.2.input_layernorm.weight", "model.safetensors"});
  // Qwen2 weights read as Llama: fine except the biases go unused (a warning); as Qwen3: q_norm missing.
  c = ModelConfig::from_hf_file(fixture("models/qwen2_bias_tied/config.json"));
  c.attention_bias = false;
  c.qk_norm = true;
  expect_error([&] { load_weights(c, SafetensorsCheckpoint::open(fixture("models/qwen2_bias_tied"))); },
               ErrorKind::kNotFound, {"model.layers.0.self_attn.q_norm.weight"});
  // Untied config over a tied checkpoint: lm_head is missing.
  c = ModelConfig::from_hf_file(fixture("models/qwen2_bias_tied/config.json"));
  c.tie_word_embeddings = false;
  expect_error([&] { load_weights(c, SafetensorsCheckpoint::open(fixture("models/qwen2_bias_tied"))); },
               ErrorKind::kNotFound, {"lm_head.weight"});
}

TEST(Weights, Stories260KGguf) {
  const std::string path = shared_data("models/stories260K/stories260K.gguf");
  if (!exists(path)) GTEST_SKIP() << "shared data not present: " << path;
  const GgufFile g = GgufFile::open(path);
  const ModelConfig c = config_from_gguf(g);
  const ModelWeights w = load_weights(c, g);
  expect_layer_shapes(c, w, DType::kF32);
  EXPECT_EQ(w.layers.size(), 5u);
  EXPECT_EQ(w.layers[0].wk.shape, (std::vector<int64_t>{32, 64}));  // 4 kv heads x head_dim 8
  EXPECT_EQ(w.lm_head.data, w.embed.data);                           // tied
  EXPECT_EQ(w.embed.data, g.tensor("token_embd.weight").data);       // a view, no copy
}

TEST(Weights, LoadModelHfDirectoryWithoutTokenizer) {
  const Model m = load_model(fixture("models/qwen3_qknorm"));
  EXPECT_EQ(m.name, "qwen3_qknorm");
  EXPECT_FALSE(m.random_weights);
  ASSERT_NE(m.tokenizer, nullptr);
  EXPECT_EQ(m.tokenizer->kind(), "byte");  // the fixture has no tokenizer files
  EXPECT_EQ(m.weights.layers[1].k_norm.dtype, DType::kF16);
  EXPECT_EQ(m.fingerprint.rfind("xxh3:", 0), 0u);
  // Stable across loads, different across models.
  EXPECT_EQ(load_model(fixture("models/qwen3_qknorm")).fingerprint, m.fingerprint);
  EXPECT_NE(load_model(fixture("models/mistral")).fingerprint, m.fingerprint);
  // Sharded, with a trailing slash.
  EXPECT_EQ(load_model(fixture("models/qwen2_bias_tied") + "/").name, "qwen2_bias_tied");
}

TEST(Weights, FingerprintFollowsConfigAndWeights) {
  ScratchDir dir;
  const fs::path d = dir.path() / "m";
  fs::copy(fixture("models/mistral"), d);
  const std::string base = load_model(d.string()).fingerprint;
  EXPECT_EQ(load_model(d.string()).fingerprint, base);
  // A config change that alters the numbers.
  std::string cfg = read_file((d / "config.json").string());
  const std::string eps = "\"rms_norm_eps\": 1e-05";
  ASSERT_NE(cfg.find(eps), std::string::npos);
  write_file((d / "config.json").string(), std::string(cfg).replace(cfg.find(eps), eps.size(), "\"rms_norm_eps\": 2e-05"));
  EXPECT_NE(load_model(d.string()).fingerprint, base);
  write_file((d / "config.json").string(), cfg);
  EXPECT_EQ(load_model(d.string()).fingerprint, base);
  // Other weights of the same shapes (llama3_scaled's f32 tensors) change it too.
  fs::copy_file(fixture("models/llama3_scaled/model.safetensors"), d / "model.safetensors",
                fs::copy_options::overwrite_existing);
  EXPECT_NE(load_model(d.string()).fingerprint, base);
}

TEST(Weights, LoadModelErrors) {
  expect_error([] { load_model("/nonexistent/model"); }, ErrorKind::kNotFound, {"/nonexistent/model", "demo"});
  expect_error([] { load_model(fixture("models/mistral/config.json")); }, ErrorKind::kInvalidInput,
               {"config file", "random"});
  ScratchDir dir;
  expect_error([&] { load_model(dir.path().string()); }, ErrorKind::kNotFound, {"config.json"});
  LoadOptions opts;
  opts.tokenizer_path = dir.file("missing.json");
  expect_error([&] { load_model(fixture("models/mistral"), opts); }, ErrorKind::kNotFound, {"missing.json"});
}
