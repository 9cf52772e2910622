// Where a request's memory preparation goes on the host: one ticket resolved to a ready prompt
// (every fact resident), back to back as the engine thread resolves a burst of admissions, and
// the parts it is made of timed alone. The preparation is host code, the same whichever backend
// runs the forward; here the CPU backend holds the pool (random weights of --config's shape: a
// small config keeps the encoding of the facts short).
//
//   bench_memory_prepare --config C --tokenizer T --locomo locomo10.json [--k 5,50] [--rounds 20]
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "engine/engine.h"
#include "memory/bm25_retriever.h"
#include "memory/fact_store.h"
#include "memory/locomo.h"
#include "memory/memory_service.h"
#include "memory/prompt_layout.h"
#include "model/model.h"
#include "tokenizer/load_tokenizer.h"

using namespace inferscale;
using Clock = std::chrono::steady_clock;

namespace {

double us(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::micro>(b - a).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string config, tokenizer, locomo;
  int conv = 0, window = 2, rounds = 20, questions = 100;
  std::vector<int> ks{5, 50};
  CLI::App app{"host time of a request's memory preparation (ticket resolve), and its parts"};
  app.add_option("--config", config, "HF config.json (random weights of its shape)")->required();
  app.add_option("--tokenizer", tokenizer, "tokenizer file or directory")->required();
  app.add_option("--locomo", locomo, "locomo10.json")->required();
  app.add_option("--conv", conv, "conversation index");
  app.add_option("--window", window, "CWE window");
  app.add_option("--k", ks, "facts per request")->delimiter(',');
  app.add_option("--rounds", rounds, "passes over the questions (the median pass is reported)");
  app.add_option("--questions", questions, "questions a pass");
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);

  Model model;
  model.config = ModelConfig::from_hf_file(config);
  LoadedTokenizer lt = load_tokenizer(tokenizer);
  model.tokenizer = lt.tokenizer;
  model.chat_template = lt.chat;
  model.fingerprint = "bench-random-" + model.config.fingerprint();
  model.random_weights = true;
  model.weights = make_random_weights(model.config, 1);
  BackendOptions bo;
  bo.block_size = 16;
  bo.num_cache_blocks = 4096;
  bo.num_pool_blocks = 8192;
  Engine engine(make_cpu_backend(model.config, model.weights, bo), model.tokenizer, EngineOptions{});

  const auto convs = load_locomo(locomo);
  const LocomoConversation& c = convs.at(static_cast<size_t>(conv));
  const auto dir = std::filesystem::temp_directory_path() / ("inferscale-prepare-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  auto store = FactStore::open(dir);
  Bm25Retriever retriever(*store);
  const auto ids = store->add_turns(kDefaultTenant, c.sample_id, c.sample_id, locomo_turns(c));
  MemoryOptions mo;
  mo.default_window = window;
  MemoryService service(*store, retriever, model, engine.backend(), engine.blocks(), mo);
  service.encode_facts(kDefaultTenant, c.sample_id, ids, window);  // every fact resident: nothing encodes below

  std::vector<std::string> qs;
  for (const auto& q : c.qa)
    if (static_cast<int>(qs.size()) < questions && q.category != 5) qs.push_back(q.question);
  std::printf("\n## memory preparation on the host: LoCoMo %s, %zu facts, window %d, %zu questions a pass, median of "
              "%d passes (us a request)\n\n",
              c.sample_id.c_str(), ids.size(), window, qs.size(), rounds);
  std::printf("| k | ticket resolve | retriever search | store fetch | frame (encode) | encode after facts |\n");
  std::printf("|---|---|---|---|---|---|\n");
  const FactsBlock block{mo.header, mo.footer};
  for (int k : ks) {
    std::vector<double> resolve, search, fetch, frame, after;
    for (int r = 0; r < rounds; ++r) {
      // The whole preparation, as the engine runs it at admission: resolve until ready, then
      // release (the request's end).
      auto t0 = Clock::now();
      for (const auto& q : qs) {
        MemoryRequest req;
        req.user = c.sample_id;
        req.k = k;
        req.mode = MemoryMode::kInject;
        auto t = service.ticket(req, PromptSource::of_chat({{"user", q}}));
        MemoryPlan p = t->resolve(engine);
        if (p.state != MemoryPlan::State::kReady || !p.injected) {
          std::fprintf(stderr, "a ticket was not ready with its facts injected (state %d)\n", static_cast<int>(p.state));
          return 1;
        }
        t->release();
      }
      resolve.push_back(us(t0, Clock::now()) / qs.size());
      // The parts alone.
      std::vector<std::vector<ScoredFact>> hits;
      t0 = Clock::now();
      for (const auto& q : qs) hits.push_back(retriever.search(kDefaultTenant, c.sample_id, q, static_cast<size_t>(k)));
      search.push_back(us(t0, Clock::now()) / qs.size());
      t0 = Clock::now();
      for (const auto& h : hits) {
        std::vector<int64_t> want;
        for (const ScoredFact& s : h) want.push_back(s.id);
        if (store->get_existing(kDefaultTenant, c.sample_id, want).size() != want.size()) return 1;
      }
      fetch.push_back(us(t0, Clock::now()) / qs.size());
      t0 = Clock::now();
      for (const auto& q : qs) frame_prompt(PromptSource::of_chat({{"user", q}}), *model.tokenizer, model.chat_template, &block);
      frame.push_back(us(t0, Clock::now()) / qs.size());
      std::vector<std::string> rest;
      for (const auto& q : qs) rest.push_back(mo.footer + "[/INST]" + q);  // about the text after the facts
      t0 = Clock::now();
      for (const auto& s : rest) model.tokenizer->encode(s, {.add_special = false, .parse_special = true});
      after.push_back(us(t0, Clock::now()) / qs.size());
    }
    std::printf("| %d | %.1f | %.1f | %.1f | %.1f | %.1f |\n", k, median(resolve), median(search), median(fetch),
                median(frame), median(after));
  }
  store.reset();
  std::filesystem::remove_all(dir);
  return 0;
}
