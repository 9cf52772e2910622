// The embedding model on the CUDA backend (serve/chat/import-locomo --embedder with a GPU) against
// the same model on the CPU reference: vectors of varied texts (a long one split across forwards)
// for last-token and mean pooling, a headless backbone (no LM head) refusing logits, and the same
// nearest neighbours. The GPU computes in bf16, so vectors agree to cosine ~0.999, not exactly.
// BERT encoders: a random one of all-MiniLM-L6-v2's shape against the CPU encoder, with its queries
// replayed from CUDA graphs, and all-MiniLM-L6-v2 itself (when present) against
// sentence-transformers' vectors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/cuda/cuda_backend.h"
#include "cuda_test_util.h"
#include "memory/retrieval/model_embedder.h"
#include "memory/retrieval/sentence_transformers.h"
#include "model/bert_weights.h"
#include "model/model.h"
#include "tokenizer/byte_tokenizer.h"
#include "util/check.h"

using namespace inferscale;
using namespace inferscale::test;

namespace {

// A Qwen3-style backbone (q/k norm, head_dim 64: what the CUDA kernels take) over the byte
// tokenizer, random weights, no LM head.
std::shared_ptr<const Model> backbone() {
  auto m = std::make_shared<Model>();
  ModelConfig c = demo_config();
  c.arch = Arch::kQwen3;
  c.architecture = "Qwen3ForCausalLM";
  c.qk_norm = true;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 64;
  c.tie_word_embeddings = false;
  c.finalize();
  m->config = c;
  m->weights = make_random_weights(c, 11);
  m->weights.lm_head = {};  // an embedding backbone
  m->tokenizer = std::make_shared<ByteTokenizer>();
  m->name = "gpu-embedder-test";
  m->fingerprint = "gpu-embedder-test";
  return m;
}

std::unique_ptr<ModelEmbedder> embedder(const std::shared_ptr<const Model>& m, bool gpu, Pooling pooling) {
  ModelEmbedderOptions o;
  o.pooling = pooling;
  o.max_batch_tokens = 96;  // the long text below spans several forwards
  o.eos_id = ByteTokenizer::kEos;
  BackendOptions bo;
  bo.num_cache_blocks = embedder_cache_blocks(o, bo.block_size);
  std::unique_ptr<Backend> be = gpu ? std::unique_ptr<Backend>(make_cuda_backend(m->config, m->weights, bo))
                                    : make_cpu_backend(m->config, m->weights, bo);
  return std::make_unique<ModelEmbedder>(m, std::move(be), o);
}

double dot(const float* a, const float* b, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// A BertModel of all-MiniLM-L6-v2's shape (hidden 384, 12 heads of 32, intermediate 1536), two
// layers, random f32 weights (LayerNorm gains near 1), over the byte tokenizer.
std::shared_ptr<const Model> random_bert() {
  auto m = std::make_shared<Model>();
  ModelConfig c;
  c.arch = Arch::kBert;
  c.architecture = "BertModel";
  c.hidden_size = 384;
  c.num_heads = 12;
  c.num_kv_heads = 12;
  c.head_dim = 32;
  c.num_layers = 2;
  c.intermediate_size = 1536;
  c.vocab_size = ByteTokenizer::kVocabSize;
  c.max_position_embeddings = 512;
  c.type_vocab_size = 2;
  c.layer_norm_eps = 1e-12;
  c.finalize();
  std::mt19937_64 g(5);
  auto fill = [&](const std::vector<int64_t>& shape, float mean, float std) {
    HostTensor t = HostTensor::zeros(DType::kF32, shape);
    std::normal_distribution<float> d(mean, std);
    float* x = t.as<float>();
    for (int64_t i = 0; i < t.numel(); ++i) x[i] = d(g);
    return t;
  };
  BertWeights& w = m->weights.bert;
  for (const BertEmbeddingRole& r : bert_embedding_roles()) {
    const bool gain = std::string(r.role) == "emb_ln_w";
    w.*r.field = fill(r.shape(c), gain ? 1.0f : 0.0f, gain ? 0.1f : 0.05f);
  }
  w.layers.resize(static_cast<size_t>(c.num_layers));
  for (BertLayerWeights& l : w.layers)
    for (const BertLayerRole& r : bert_layer_roles()) {
      const bool gain = std::string(r.role).ends_with("ln_w");
      l.*r.field = fill(r.shape(c), gain ? 1.0f : 0.0f, gain ? 0.1f : 0.05f);
    }
  m->config = c;
  m->tokenizer = std::make_shared<ByteTokenizer>();
  m->name = "gpu-bert-test";
  m->fingerprint = "gpu-bert-test";
  return m;
}

std::unique_ptr<ModelEmbedder> encoder_embedder(const std::shared_ptr<const Model>& m, bool gpu, int32_t max_tokens,
                                                CudaBackend** cuda = nullptr, bool graphs = true) {
  ModelEmbedderOptions o;
  o.pooling = Pooling::kMean;
  o.max_tokens = max_tokens;
  BackendOptions bo;
  bo.num_cache_blocks = embedder_cache_blocks(o, bo.block_size);
  bo.cuda_graphs = graphs;
  std::unique_ptr<Backend> be;
  if (gpu) {
    std::unique_ptr<CudaBackend> c = make_cuda_backend(m->config, m->weights, bo);
    if (cuda) *cuda = c.get();
    be = std::move(c);
  } else {
    be = make_cpu_backend(m->config, m->weights, bo);
  }
  return std::make_unique<ModelEmbedder>(m, std::move(be), o);
}

// The worst cosine between rows of two sets of unit vectors, [n, d] each.
double worst_cosine(const std::vector<float>& a, const std::vector<float>& b, size_t d) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 1;
  for (size_t i = 0; i + d <= std::min(a.size(), b.size()); i += d) worst = std::min(worst, dot(&a[i], &b[i], d));
  return worst;
}

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != 0 ? std::string(v) : fallback;
}

}  // namespace

TEST(CudaEmbedder, VectorsMatchTheCpuEmbedder) {
  REQUIRE_GPU();
  const auto m = backbone();
  std::vector<std::string> texts = {"Alice adopted a cat named Miso", "x", "Où est la gare ? 駅はどこですか",
                                    "Bob works as a nurse in Oslo and likes hiking on Sundays",
                                    std::string(300, 'a') + " a long text that needs several forwards"};
  for (Pooling pooling : {Pooling::kLastToken, Pooling::kMean}) {
    auto cpu = embedder(m, false, pooling);
    auto gpu = embedder(m, true, pooling);
    ASSERT_EQ(cpu->dim(), gpu->dim());
    const size_t d = static_cast<size_t>(cpu->dim());
    const std::vector<float> vc = cpu->embed(texts), vg = gpu->embed(texts);
    ASSERT_EQ(vc.size(), vg.size());
    double worst = 1;
    for (size_t i = 0; i < texts.size(); ++i) {
      const double cos = dot(&vc[i * d], &vg[i * d], d);  // both L2-normalized
      worst = std::min(worst, cos);
      EXPECT_GT(cos, 0.995) << "text " << i << " pooling " << static_cast<int>(pooling);
      EXPECT_NEAR(dot(&vg[i * d], &vg[i * d], d), 1.0, 1e-5);
    }
    note(std::string("embedder/") + (pooling == Pooling::kMean ? "mean" : "last") + " worst cosine gpu vs cpu",
         std::to_string(worst));
    // Nearest neighbour of every text among the others: the same on both.
    for (size_t i = 0; i < texts.size(); ++i) {
      size_t bc = 0, bg = 0;
      double sc = -2, sg = -2;
      for (size_t j = 0; j < texts.size(); ++j) {
        if (j == i) continue;
        if (const double s = dot(&vc[i * d], &vc[j * d], d); s > sc) sc = s, bc = j;
        if (const double s = dot(&vg[i * d], &vg[j * d], d); s > sg) sg = s, bg = j;
      }
      if (bc != bg) EXPECT_NEAR(sc, sg, 5e-3) << "text " << i;  // a different neighbour only at a near tie
    }
  }
}

TEST(CudaEmbedder, HeadlessBackboneRefusesLogits) {
  REQUIRE_GPU();
  const auto m = backbone();
  BackendOptions bo;
  bo.num_cache_blocks = 8;
  auto be = make_cuda_backend(m->config, m->weights, bo);
  ForwardBatch b;
  b.token_ids = {1, 2, 3};
  b.positions = {0, 1, 2};
  b.slot_mapping = {0, 1, 2};
  b.q_indptr = {0, 3};
  b.kv_indptr = {0, 1};
  b.kv_indices = {0};
  b.output_tokens = {2};
  std::vector<float> out;
  try {
    be->forward(b, out);
    ADD_FAILURE() << "logits from a model without an LM head";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("no LM head"), std::string::npos) << e.what();
  }
  b.output = ForwardBatch::Output::kHidden;
  be->forward(b, out);
  EXPECT_EQ(out.size(), static_cast<size_t>(m->config.hidden_size));
}

// A BERT encoder on the GPU: bidirectional attention over heads of 32, LayerNorm, GELU and biases
// in bf16 give the CPU encoder's vectors to cosine >= 0.9999, for texts batched together and for
// queries alone, and a query-sized text replays its CUDA graph with the eager forward's vector.
TEST(CudaEmbedder, BertEncoderMatchesTheCpuEncoder) {
  REQUIRE_GPU();
  const auto m = random_bert();
  const std::vector<std::string> texts = {"Alice adopted a cat named Miso", "x", "Bob works as a nurse in Oslo",
                                          "Where did Caroline go on holiday last summer, and with whom?",
                                          std::string(200, 'a') + " a text of more than one kv chunk"};
  auto cpu = encoder_embedder(m, false, 256);
  CudaBackend* be = nullptr;
  auto gpu = encoder_embedder(m, true, 256, &be);
  const size_t d = 384;
  const std::vector<float> vc = cpu->embed(texts), vg = gpu->embed(texts);
  const double batched = worst_cosine(vc, vg, d);
  EXPECT_GE(batched, 0.9999);
  note("embedder/bert worst cosine gpu vs cpu (batched texts)", std::to_string(batched));

  const std::string query = "What did Alice name her cat?";
  const std::vector<float> qc = cpu->embed_query(query);
  auto eager = encoder_embedder(m, true, 256, nullptr, /*graphs=*/false);
  const std::vector<float> qe = eager->embed_query(query);
  std::vector<float> qg;
  for (int i = 0; i < 3; ++i) qg = gpu->embed_query(query);  // warm-up, capture, replay
  EXPECT_GE(be->graph_stats().replays, 2) << "a query replays its encode graph";
  EXPECT_GE(worst_cosine(qc, qg, d), 0.9999);
  const double graph_vs_eager = worst_cosine(qe, qg, d);
  EXPECT_GE(graph_vs_eager, 0.99999) << "the padded graph forward against the eager one";
  note("embedder/bert query cosine graph vs eager", std::to_string(graph_vs_eager));
  for (size_t i = 0; i < texts.size(); ++i) {  // each text alone (graphs) against the batch's vector
    const std::vector<float> alone = gpu->embed_query(texts[i]);
    EXPECT_GE(dot(alone.data(), &vg[i * d], d), 0.9999) << "text " << i;
  }
}

// all-MiniLM-L6-v2 on the GPU against sentence-transformers' float64 vectors of 70 texts (the CPU
// encoder's fixture, tests/test_bert.cpp). INFERSCALE_MINILM: its directory (f32 or bf16
// safetensors: the GPU rounds weights to bf16 either way); INFERSCALE_FIXTURES_DIR: tests/fixtures.
TEST(CudaEmbedder, MiniLmMatchesSentenceTransformers) {
  REQUIRE_GPU();
  const std::string dir = env_or("INFERSCALE_MINILM", std::string(INFERSCALE_SOURCE_DIR) + "/models/all-MiniLM-L6-v2");
  const std::string fixtures = env_or("INFERSCALE_FIXTURES_DIR", std::string(INFERSCALE_SOURCE_DIR) + "/tests/fixtures");
  if (!std::filesystem::exists(dir + "/model.safetensors")) GTEST_SKIP() << dir << " absent (scripts/fetch_models.sh)";
  std::ifstream tf(fixtures + "/minilm/texts.json");
  ASSERT_TRUE(tf.good()) << fixtures;
  const nlohmann::json f = nlohmann::json::parse(tf);
  const auto texts = f.at("texts").get<std::vector<std::string>>();
  std::ifstream in(fixtures + "/minilm/embeddings.f32", std::ios::binary);
  std::vector<float> want(texts.size() * 384);
  in.read(reinterpret_cast<char*>(want.data()), static_cast<std::streamsize>(want.size() * 4));
  ASSERT_TRUE(in.good());
  auto m = std::make_shared<const Model>(load_model(dir));
  const auto st = read_sentence_transformers_config(dir);
  ASSERT_TRUE(st.has_value());
  auto gpu = encoder_embedder(m, true, st->max_seq_length);
  const std::vector<float> got = gpu->embed(texts);
  const double worst = worst_cosine(got, want, 384);
  EXPECT_GE(worst, 0.9999);
  note("embedder/all-MiniLM-L6-v2 worst cosine gpu vs sentence-transformers (70 texts)", std::to_string(worst));
  double worst_alone = 1;
  for (size_t i = 0; i < texts.size(); i += 7) {  // queries, one at a time through the graphs
    const std::vector<float> q = gpu->embed_query(texts[i]);
    worst_alone = std::min(worst_alone, dot(q.data(), &want[i * 384], 384));
  }
  EXPECT_GE(worst_alone, 0.9999);
  note("embedder/all-MiniLM-L6-v2 worst cosine of queries alone", std::to_string(worst_alone));
}
