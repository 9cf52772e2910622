// BERT encoders (model/bert.cpp) on the CPU backend, against fixtures made by
// scripts/make_bert_fixtures.py:
//   - a tiny random BertModel: last_hidden_state of three sequences of different lengths run as
//     one padded batch in transformers (float64), so the padding mask matters;
//   - all-MiniLM-L6-v2 (models/, skipped when absent): sentence embeddings of 50 LoCoMo turns and
//     20 questions equal sentence-transformers' (float64) to cosine >= 0.99999. The token ids are
//     sentence-transformers' own, stored in the fixture: this test does not depend on a WordPiece
//     tokenizer.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "engine/block_manager.h"
#include "memory/retrieval/hidden_state_embedder.h"
#include "memory/retrieval/model_embedder.h"
#include "memory/retrieval/sentence_transformers.h"
#include "model/config.h"
#include "model/json_file.h"
#include "model/safetensors.h"
#include "model/weight_loader.h"
#include "model_test_util.h"

namespace inferscale {
namespace {

using testing::expect_error;
using testing::fixture;

const std::string kMiniLm = std::string(INFERSCALE_SOURCE_DIR) + "/models/all-MiniLM-L6-v2";

struct Encoder {
  ModelConfig cfg;
  ModelWeights weights;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<BlockManager> blocks;
  int32_t max_batch_tokens = 512;

  explicit Encoder(const std::string& dir) {
    cfg = ModelConfig::from_hf_file(dir + "/config.json");
    weights = load_weights(cfg, SafetensorsCheckpoint::open(dir));
    BackendOptions bo;
    bo.num_cache_blocks = 80;
    bo.num_threads = 2;
    backend = make_cpu_backend(cfg, weights, bo);
    blocks = std::make_unique<BlockManager>(backend->num_cache_blocks(), backend->block_size());
  }
  // [sum(len), H]: every token's last hidden state.
  std::vector<float> hidden(const std::vector<std::vector<int32_t>>& seqs) {
    return embedding_hidden_states(*backend, *blocks, max_batch_tokens, seqs, Pooling::kMean, true);
  }
};

TEST(BertTiny, MatchesTransformersFloat64InOnePaddedBatch) {
  Encoder e(fixture("models/bert_tiny"));
  EXPECT_EQ(e.cfg.arch, Arch::kBert);
  const nlohmann::json g = load_json_file(fixture("models/bert_tiny/golden.json"));
  const auto seqs = g.at("sequences").get<std::vector<std::vector<int32_t>>>();
  const std::vector<float> h = e.hidden(seqs);
  const auto H = static_cast<size_t>(e.cfg.hidden_size);
  size_t row = 0;
  double worst = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const auto& want = g.at("hidden").at(s);
    ASSERT_EQ(want.size(), seqs[s].size());
    for (size_t t = 0; t < seqs[s].size(); ++t, ++row)
      for (size_t j = 0; j < H; ++j) worst = std::max(worst, std::abs(h[row * H + j] - want.at(t).at(j).get<double>()));
  }
  EXPECT_LT(worst, 2e-5) << "max |ours - transformers float64| over every token";
  std::cout << "bert_tiny: max abs difference vs transformers float64: " << worst << "\n";
}

TEST(BertTiny, BatchedEqualsAlone) {
  Encoder e(fixture("models/bert_tiny"));
  const nlohmann::json g = load_json_file(fixture("models/bert_tiny/golden.json"));
  const auto seqs = g.at("sequences").get<std::vector<std::vector<int32_t>>>();
  const std::vector<float> all = e.hidden(seqs);
  const auto H = static_cast<size_t>(e.cfg.hidden_size);
  size_t row = 0;
  for (const auto& s : seqs) {
    const std::vector<float> alone = e.hidden({s});
    ASSERT_EQ(alone.size(), s.size() * H);
    for (size_t i = 0; i < alone.size(); ++i) ASSERT_NEAR(alone[i], all[row * H + i], 1e-5) << i;
    row += s.size();
  }
}

TEST(BertTiny, ForcesWholeSequencesIntoOneForward) {
  Encoder e(fixture("models/bert_tiny"));
  e.max_batch_tokens = 20;
  const nlohmann::json g = load_json_file(fixture("models/bert_tiny/golden.json"));
  const auto seqs = g.at("sequences").get<std::vector<std::vector<int32_t>>>();  // 17, 5, 40 tokens
  // 40 tokens cannot be one forward of 20: refused, never split.
  expect_error([&] { e.hidden(seqs); }, ErrorKind::kInvalidInput, {"sequence 2", "does not fit one forward"});
  // 17 + 5 does not fit 20 either: two forwards, each sequence whole, same numbers as alone.
  const std::vector<float> two = e.hidden({seqs[0], seqs[1]});
  const std::vector<float> a = e.hidden({seqs[0]}), b = e.hidden({seqs[1]});
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(two[i], a[i], 1e-5);
  for (size_t i = 0; i < b.size(); ++i) ASSERT_NEAR(two[a.size() + i], b[i], 1e-5);
  EXPECT_EQ(e.blocks->num_free(), e.backend->num_cache_blocks());
}

TEST(BertTiny, RefusesWhatAnEncoderCannotDo) {
  Encoder e(fixture("models/bert_tiny"));
  ForwardBatch b;
  b.token_ids = {5, 6};
  b.positions = {1, 2};  // not from 0: a chunk of a sequence
  b.slot_mapping = {1, 2};
  b.q_indptr = {0, 2};
  b.kv_indptr = {0, 1};
  b.kv_indices = {0};
  b.output_tokens = {0, 1};
  b.output = ForwardBatch::Output::kHidden;
  std::vector<float> out;
  expect_error([&] { e.backend->forward(b, out); }, ErrorKind::kInvalidInput, {"whole sequences"});
  b.output = ForwardBatch::Output::kLogits;
  expect_error([&] { e.backend->forward(b, out); }, ErrorKind::kUnsupported, {"hidden states, not logits"});
  // Longer than the 64 learned positions.
  std::vector<int32_t> too_long(65, 3);
  expect_error([&] { e.hidden({too_long}); }, ErrorKind::kInvalidInput, {"64 positions"});
}

TEST(BertConfig, ReadsBertModelAndRefusesOtherVariants) {
  nlohmann::json j = load_json_file(fixture("models/bert_tiny/config.json"));
  ModelConfig c = ModelConfig::from_hf_json(j);
  EXPECT_EQ(c.arch, Arch::kBert);
  EXPECT_EQ(c.num_kv_heads, c.num_heads);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.type_vocab_size, 2);
  EXPECT_DOUBLE_EQ(c.layer_norm_eps, 1e-12);
  EXPECT_NE(c.fingerprint().find("ln_eps="), std::string::npos);
  j["hidden_act"] = "gelu_new";
  expect_error([&] { ModelConfig::from_hf_json(j); }, ErrorKind::kUnsupported, {"gelu_new"});
  j["hidden_act"] = "gelu";
  j["position_embedding_type"] = "relative_key";
  expect_error([&] { ModelConfig::from_hf_json(j); }, ErrorKind::kUnsupported, {"relative_key"});
}

TEST(Pooling, ClsTakesEachSequencesFirstRow) {
  const std::vector<float> hidden = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};  // rows of 2: seqs of 3 and 2 tokens
  const std::vector<int64_t> lengths = {3, 2};
  EXPECT_EQ(pool_hidden_states(hidden, lengths, 2, Pooling::kCls), (std::vector<float>{1, 2, 7, 8}));
  EXPECT_EQ(pool_hidden_states(hidden, lengths, 2, Pooling::kLastToken), (std::vector<float>{5, 6, 9, 10}));
}

TEST(SentenceTransformersConfig, PoolingModes) {
  testing::ScratchDir dir;
  const auto write = [&](const std::string& rel, const std::string& text) {
    std::filesystem::create_directories((dir.path() / rel).parent_path());
    testing::write_file((dir.path() / rel).string(), text);
  };
  EXPECT_FALSE(read_sentence_transformers_config(dir.path().string()).has_value());
  write("modules.json", R"([{"type": "sentence_transformers.models.Transformer", "path": ""},
                           {"type": "sentence_transformers.models.Pooling", "path": "1_Pooling"}])");
  write("1_Pooling/config.json", R"({"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": false})");
  write("sentence_bert_config.json", R"({"max_seq_length": 128})");
  auto c = read_sentence_transformers_config(dir.path().string());
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->pooling, Pooling::kCls);
  EXPECT_FALSE(c->normalize);
  EXPECT_EQ(c->max_seq_length, 128);
  write("1_Pooling/config.json", R"({"pooling_mode_max_tokens": true})");
  expect_error([&] { read_sentence_transformers_config(dir.path().string()); }, ErrorKind::kUnsupported,
               {"pooling_mode_max_tokens"});
}

TEST(MiniLm, EmbeddingsEqualSentenceTransformers) {
  if (!testing::exists(kMiniLm + "/model.safetensors")) GTEST_SKIP() << kMiniLm << " absent (scripts/fetch_models.sh)";
  const auto st = read_sentence_transformers_config(kMiniLm);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->pooling, Pooling::kMean);
  EXPECT_TRUE(st->normalize);
  EXPECT_EQ(st->max_seq_length, 256);

  const nlohmann::json f = load_json_file(fixture("minilm/texts.json"));
  const auto texts = f.at("texts").get<std::vector<std::string>>();
  const auto ids = f.at("ids").get<std::vector<std::vector<int32_t>>>();
  ASSERT_EQ(texts.size(), 70u);
  std::ifstream in(fixture("minilm/embeddings.f32"), std::ios::binary);
  std::vector<float> want(texts.size() * 384);
  in.read(reinterpret_cast<char*>(want.data()), static_cast<std::streamsize>(want.size() * 4));
  ASSERT_TRUE(in.good());

  Encoder e(kMiniLm);
  ASSERT_EQ(e.cfg.hidden_size, 384);
  // The fixture's ids stand in for the tokenizer: text -> sentence-transformers' ids.
  std::map<std::string, std::vector<int32_t>> by_text;
  for (size_t i = 0; i < texts.size(); ++i) by_text[texts[i]] = ids[i];
  HiddenStateEmbedder::Options o;
  o.name = "minilm-test";
  o.dim = 384;
  o.pooling = st->pooling;
  o.normalize = st->normalize;
  o.max_batch = 32;
  HiddenStateEmbedder emb(
      o, [&](std::string_view t) { return by_text.at(std::string(t)); },
      [&](const std::vector<std::vector<int32_t>>& batch) { return e.hidden(batch); });
  const std::vector<float> got = emb.embed(texts);
  ASSERT_EQ(got.size(), want.size());
  double worst = 1.0;
  for (size_t i = 0; i < texts.size(); ++i) {
    double dot = 0, na = 0, nb = 0;
    for (size_t j = 0; j < 384; ++j) {
      dot += static_cast<double>(got[i * 384 + j]) * want[i * 384 + j];
      na += static_cast<double>(got[i * 384 + j]) * got[i * 384 + j];
      nb += static_cast<double>(want[i * 384 + j]) * want[i * 384 + j];
    }
    const double cos = dot / std::sqrt(na * nb);
    worst = std::min(worst, cos);
    EXPECT_GE(cos, 0.99999) << "text " << i << ": " << texts[i];
    EXPECT_NEAR(na, 1.0, 1e-5);
  }
  std::cout << "MiniLM: min cosine vs sentence-transformers float64 over " << texts.size() << " texts: 1 - " << 1.0 - worst
            << "\n";
}

}  // namespace
}  // namespace inferscale
