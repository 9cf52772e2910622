// Where a request's memory preparation goes on the host: one request's memory planned to a ready prompt
// (every fact resident), back to back as the engine thread resolves a burst of admissions, and
// the parts it is made of timed alone. The preparation is host code, the same whichever backend
// runs the forward; here the CPU backend holds the pool (bench::RandomMemoryStack).
//
//   bench_memory_prepare --config C --tokenizer T --locomo locomo10.json [--k 5,50] [--rounds 20]
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "memory/formats/locomo.h"
#include "memory/compose/prompt_layout.h"
#include "memory_bench_setup.h"

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
  bench::StackArgs args;
  int conv = 0, rounds = 20, questions = 100;
  std::vector<int> ks{5, 50};
  CLI::App app{"host time of a request's memory preparation (the connector's plan), and its parts"};
  args.add_to(app);
  app.add_option("--conv", conv, "conversation index");
  app.add_option("--k", ks, "facts per request")->delimiter(',');
  app.add_option("--rounds", rounds, "passes over the questions (the median pass is reported)");
  app.add_option("--questions", questions, "questions a pass");
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);

  bench::RandomMemoryStack m(args, 8192);
  const auto convs = load_locomo(args.locomo);
  const LocomoConversation& c = convs.at(static_cast<size_t>(conv));
  const auto ids = m.store->add_turns(kDefaultTenant, c.sample_id, c.sample_id, locomo_turns(c));
  const Model& model = m.model;
  const MemoryOptions& mo = m.options;
  FactStore* store = m.store.get();
  const Bm25Retriever& retriever = *m.retriever;
  m.service->encode_facts(kDefaultTenant, c.sample_id, ids, args.window);  // every fact resident: nothing encodes below

  std::vector<std::string> qs;
  for (const auto& q : c.qa)
    if (static_cast<int>(qs.size()) < questions && q.category != 5) qs.push_back(q.question);
  std::printf("\n## memory preparation on the host: LoCoMo %s, %zu facts, window %d, %zu questions a pass, median of "
              "%d passes (us a request)\n\n",
              c.sample_id.c_str(), ids.size(), args.window, qs.size(), rounds);
  std::printf("| k | memory plan | retriever search | store fetch | frame (encode) | encode after facts |\n");
  std::printf("|---|---|---|---|---|---|\n");
  const FactsBlock block = FactsBlock::for_user(mo.header, mo.footer, c.sample_id);
  for (int k : ks) {
    std::vector<double> resolve, search, fetch, frame, after;
    for (int r = 0; r < rounds; ++r) {
      // The whole preparation, as the engine runs it at admission: plan until ready, then
      // release (the request's end).
      auto t0 = Clock::now();
      for (const auto& q : qs)
        if (!m.prepare_injected(c.sample_id, k, q)) return 1;
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
  return 0;
}
