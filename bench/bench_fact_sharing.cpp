// How much of the injected KV that concurrent requests read is the same facts: for groups of G
// questions of one LoCoMo user served at once (the HTTP load's 100 clients over 10 users are
// groups of 10; bench_memory_serving's 100 requests over conv-26 one group of 100), the memory-
// pool slots each request's injected span reads, summed over the group, against the distinct
// slots of the group. A decode step's attention reads every request's injected tokens from its
// own copy in the paged cache; an attention that read each distinct fact once for every query
// that retrieved it would read the distinct share. Counts only, no timing: the retrieval is the
// engine's (BM25, the memory service as the engine's connector), the model random weights of --config's shape.
//
//   bench_fact_sharing --config C --tokenizer T --locomo locomo10.json [--k 5,50] [--groups 10,100]
//                      [--convs 10] [--answer-tokens 32]
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <string>
#include <unordered_set>
#include <vector>

#include "memory/formats/locomo.h"
#include "memory_bench_setup.h"

using namespace inferscale;

namespace {

// One request's reads: the pool slots of its injected tokens and its own tokens (the rest of
// the prompt, plus half an answer: the mean over its decode steps).
struct Reads {
  std::vector<int64_t> slots;
  int64_t own = 0;
};

struct Tally {
  int64_t requests = 0, injected = 0, distinct = 0, own = 0;
  void add_group(const std::vector<Reads>& g) {
    std::unordered_set<int64_t> seen;
    for (const Reads& r : g) {
      ++requests;
      injected += static_cast<int64_t>(r.slots.size());
      own += r.own;
      seen.insert(r.slots.begin(), r.slots.end());
    }
    distinct += static_cast<int64_t>(seen.size());
  }
};

}  // namespace

int main(int argc, char** argv) {
  bench::StackArgs args;
  int convs_n = 10, answer = 32;
  std::vector<int> ks{5, 50}, groups{10, 100};
  CLI::App app{"shared injected KV among concurrent requests of one user"};
  args.add_to(app);
  app.add_option("--convs", convs_n, "conversations (users), from the first");
  app.add_option("--k", ks, "facts per request")->delimiter(',');
  app.add_option("--groups", groups, "concurrent questions of one user (a group)")->delimiter(',');
  app.add_option("--answer-tokens", answer, "tokens an answer (half of them count as the request's own reads)");
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);

  const auto convs = load_locomo(args.locomo);
  if (convs_n < 1 || convs_n > static_cast<int>(convs.size())) {
    std::fprintf(stderr, "--convs must be 1..%zu\n", convs.size());
    return 2;
  }
  bench::RandomMemoryStack m(args, 32768);
  std::vector<std::vector<std::string>> questions;  // [user][question], non-adversarial
  int64_t facts = 0;
  for (int u = 0; u < convs_n; ++u) {
    const LocomoConversation& c = convs[static_cast<size_t>(u)];
    const auto ids = m.store->add_turns(kDefaultTenant, c.sample_id, c.sample_id, locomo_turns(c));
    m.service->encode_facts(kDefaultTenant, c.sample_id, ids, args.window);  // every fact resident
    facts += static_cast<int64_t>(ids.size());
    questions.emplace_back();
    for (const auto& q : c.qa)
      if (q.category != 5) questions.back().push_back(q.question);
  }
  std::printf("\n## injected KV shared among concurrent requests of one user: LoCoMo, %d users, %lld facts, "
              "window %d, BM25\n\n",
              convs_n, static_cast<long long>(facts), args.window);
  std::printf("| k | questions a group | groups | injected tokens a request | distinct / injected | "
              "attention reads, shared / as now |\n|---|---|---|---|---|---|\n");
  for (int k : ks) {
    // Each question's reads once; the groups are consecutive runs of a user's questions.
    std::vector<std::vector<Reads>> reads(questions.size());
    for (size_t u = 0; u < questions.size(); ++u) {
      for (const std::string& q : questions[u]) {
        const std::optional<MemoryPlan> p = m.prepare_injected(convs[u].sample_id, k, q);
        if (!p) return 1;
        const InjectedSpan& span = *p->injected;
        Reads r;
        for (int32_t i = span.start; i < span.end; ++i)
          if (span.injects(i)) r.slots.push_back(span.pool_slots[static_cast<size_t>(i - span.start)]);
        r.own = static_cast<int64_t>(p->prompt.size()) - static_cast<int64_t>(r.slots.size()) + answer / 2;
        reads[u].push_back(std::move(r));
      }
    }
    for (int g : groups) {
      if (g < 1) {
        std::fprintf(stderr, "--groups must be positive\n");
        return 2;
      }
      Tally t;
      int64_t n_groups = 0;
      for (const auto& user : reads)
        for (size_t at = 0; at + static_cast<size_t>(g) <= user.size(); at += static_cast<size_t>(g)) {
          t.add_group({user.begin() + static_cast<std::ptrdiff_t>(at), user.begin() + static_cast<std::ptrdiff_t>(at + g)});
          ++n_groups;
        }
      if (n_groups == 0) {
        std::printf("| %d | %d | 0 (no user has %d questions) | | | |\n", k, g, g);
        continue;
      }
      const double now = static_cast<double>(t.injected + t.own), shared = static_cast<double>(t.distinct + t.own);
      std::printf("| %d | %d | %lld | %.0f | %.3f | %.3f |\n", k, g, static_cast<long long>(n_groups),
                  static_cast<double>(t.injected) / static_cast<double>(t.requests),
                  static_cast<double>(t.distinct) / static_cast<double>(t.injected), shared / now);
    }
  }
  return 0;
}
