// Zero-copy memory on the GPU with a real model: SmolLM2-135M-Instruct (GGUF) answering LoCoMo
// questions with k = 10 and k = 50 injected facts (w = 2, BM25) gives the same 32 greedy tokens
// whether the engine reads the facts in place from the pool or copies them into each request's
// blocks (EngineOptions::facts_in_place), with fewer cache blocks held while in place.
// INFERSCALE_SMOLLM2: the GGUF file (default models/SmolLM2-135M-Instruct.Q4_1.gguf);
// INFERSCALE_LOCOMO: locomo10.json (default ../shared/data/locomo/locomo10.json). Skips without them.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "cuda_test_util.h"
#include "engine/engine.h"
#include "memory/formats/locomo.h"
#include "memory/memory_service.h"
#include "memory/retrieval/bm25_retriever.h"
#include "memory/store/fact_store.h"
#include "model/model.h"
#include "../test_fact_store_util.h"

namespace inferscale {
namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != 0 ? std::string(v) : fallback;
}

struct Answers {
  std::vector<std::vector<int32_t>> tokens;  // per (k, question)
  int64_t max_blocks = 0;                    // the most cache blocks a request held after its prefill
  EngineStats stats;
};

Answers answer(const Model& m, FactStore& store, const std::string& user, const std::vector<std::string>& questions,
               const std::filesystem::path& kv_dir, bool in_place) {
  Bm25Retriever retriever(store);
  BackendOptions bo;
  bo.num_cache_blocks = 2048;
  bo.num_pool_blocks = 4096;
  EngineOptions eo;
  eo.facts_in_place = in_place;
  Engine engine(make_cuda_backend(m.config, m.weights, bo), m.tokenizer, eo);
  MemoryOptions mo;
  mo.kv_dir = kv_dir;
  MemoryService service(store, retriever, m, engine.backend(), engine.blocks(), mo);
  engine.set_memory(&service);
  Answers a;
  for (const int32_t k : {10, 50}) {
    for (const std::string& q : questions) {
      MemoryRequest r;
      r.user = user;
      r.k = k;
      r.window = 2;
      const MemoryPrompt p = service.prepare(r, {{"user", q}});
      SamplingParams sp;
      sp.temperature = 0;
      sp.max_tokens = 32;
      sp.ignore_eos = true;
      engine.add_request(p.tokens, sp, p.injected);
      std::vector<int32_t> tokens;
      std::vector<RequestOutput> outs = engine.step();
      a.max_blocks = std::max(a.max_blocks, engine.blocks().num_blocks() - engine.blocks().num_free());
      for (bool done = false; !done;) {
        for (const RequestOutput& o : outs) {
          tokens.insert(tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
          done = done || o.finished;
        }
        if (!done) outs = engine.step();
      }
      a.tokens.push_back(tokens);
      service.release(p);
    }
  }
  a.stats = engine.stats();
  return a;
}

}  // namespace

TEST(CudaMemory, SmolLm2AnswersTheSameWithFactsReadInPlace) {
  REQUIRE_GPU();
  const std::string model = env_or("INFERSCALE_SMOLLM2", std::string(INFERSCALE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf");
  const std::string locomo = env_or("INFERSCALE_LOCOMO", std::string(INFERSCALE_SHARED_DATA) + "/locomo/locomo10.json");
  if (!std::filesystem::exists(model) || !std::filesystem::exists(locomo)) GTEST_SKIP() << model << " or " << locomo << " absent";
  const Model m = load_model(model);
  const LocomoConversation c = load_locomo(locomo).at(0);
  testing::TempDir dir;
  auto store = FactStore::open(dir.path() / "data");
  store->add_turns(kDefaultTenant, c.sample_id, c.sample_id, locomo_turns(c));
  std::vector<std::string> questions;
  for (size_t i = 0; i < c.qa.size() && questions.size() < 4; i += 17) questions.push_back(c.qa[i].question);
  const Answers in_place = answer(m, *store, c.sample_id, questions, dir.path() / "kv", true);
  const Answers copied = answer(m, *store, c.sample_id, questions, dir.path() / "kv", false);
  EXPECT_EQ(in_place.stats.requests_facts_in_place, 8);
  EXPECT_EQ(copied.stats.requests_facts_copied, 8);
  ASSERT_EQ(in_place.tokens.size(), copied.tokens.size());
  int same = 0;
  for (size_t i = 0; i < in_place.tokens.size(); ++i) {
    EXPECT_EQ(in_place.tokens[i].size(), 32u);
    EXPECT_EQ(in_place.tokens[i], copied.tokens[i]) << (i < questions.size() ? "k = 10, " : "k = 50, ") << "question "
                                                    << i % questions.size();
    same += in_place.tokens[i] == copied.tokens[i];
  }
  EXPECT_LT(in_place.max_blocks, copied.max_blocks);
  test::note("memory/smollm2 answers identical in place vs copied (of 8, 32 tokens)", std::to_string(same));
  test::note("memory/smollm2 most cache blocks a request held, in place / copied (k = 50)",
             std::to_string(in_place.max_blocks) + " / " + std::to_string(copied.max_blocks));
}

}  // namespace inferscale
