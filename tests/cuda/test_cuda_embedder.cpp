// The embedding model on the CUDA backend (serve/chat/import-locomo --embedder with a GPU) against
// the same model on the CPU reference: vectors of varied texts (a long one split across forwards)
// for last-token and mean pooling, a headless backbone (no LM head) refusing logits, and the same
// nearest neighbours. The GPU computes in bf16, so vectors agree to cosine ~0.999, not exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "cuda_test_util.h"
#include "memory/retrieval/model_embedder.h"
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
