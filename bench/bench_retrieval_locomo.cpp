// Evidence recall of our retrievers on LoCoMo: every conversation's turns go into a fact store (one
// user per sample_id, as `memory import-locomo` does), the retrievers are the ones `serve`, `chat`
// and `memory search` build (cli/memory_options.h: make_retriever with --retrieval and the
// --embedder options), and every non-adversarial question (categories 1-4; 5 is adversarial) is
// searched as it is asked. A question counts as found at k when any of its evidence turns
// (dia_ids) is among the top k; questions without a well-formed evidence id are left out (counted).
//
//   bench_retrieval_locomo --locomo ../shared/data/locomo/locomo10.json --retrieval bm25,dense,hybrid \
//       [--embedder DIR|demo|.gguf [--embedder-pooling mean ...]] [--convs conv-26,conv-30] \
//       [--device cpu|cuda] [--json out.json] [--md out.md]
// --device cuda: the embedder on the CUDA backend where it runs the model, the vector index on
// the GPU, as `serve` builds them with a GPU (a CUDA build only).
//
// Measured: recall@k (k in --k, default 5,10,20,50) per category and over all; query latency
// (one search call: the query's embedding plus the index search, wall clock, p50/p95/mean); and,
// with an embedder, the throughput of embedding every turn (turns/s, the store's missing vectors
// embedded in batches of 32 as at server start). bench/plot_retrieval.py draws the JSON;
// bench/retrieval_reference.py writes the same JSON from an independent Python implementation.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/memory_options.h"
#include "memory/store/fact_store.h"
#include "memory/formats/locomo.h"
#include "util/check.h"

using namespace inferscale;
using nlohmann::ordered_json;

namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kTenant = "default";

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const double pos = p * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(pos), hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

struct Question {
  std::string user;
  std::string text;
  int category = 0;
  std::set<std::string> evidence;  // dia_ids
};

// found[category][k] over questions; category 0 = all.
struct Recall {
  std::map<int, std::map<size_t, size_t>> found;
  std::map<int, size_t> asked;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Evidence recall@k of bm25 / dense / hybrid retrieval on LoCoMo"};
  std::string locomo_path = "../shared/data/locomo/locomo10.json", modes_arg = "bm25", convs_arg, ks_arg = "5,10,20,50";
  std::string json_path, md_path, data_dir, device = "cpu";
  cli::EmbedderArgs emb;
  app.add_option("--locomo", locomo_path, "locomo10.json")->capture_default_str();
  app.add_option("--retrieval", modes_arg, "comma-separated: bm25, dense, hybrid")->capture_default_str();
  app.add_option("--convs", convs_arg, "comma-separated sample_ids (default: all)");
  app.add_option("--k", ks_arg, "comma-separated cut-offs")->capture_default_str();
  app.add_option("--json", json_path, "write the results as JSON");
  app.add_option("--md", md_path, "write the tables as markdown");
  app.add_option("--device", device, "cpu, or cuda: the embedder and the vector index on the GPU")
      ->capture_default_str()->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--data-dir", data_dir, "keep the fact store (and its vectors) here (default: a temp dir, removed)");
  cli::add_embedder_options(app, emb);
  app.add_option("--neighbours", emb.neighbours,
                 "the weight a retrieved turn lends the turns beside it, as --retrieval-neighbours; 0: off")
      ->capture_default_str()->check(CLI::Range(0.0, 1.0));
  CLI11_PARSE(app, argc, argv);
  try {
    const std::vector<std::string> modes = split_list(modes_arg);
    std::vector<size_t> ks;
    for (const auto& k : split_list(ks_arg)) ks.push_back(static_cast<size_t>(std::stoul(k)));
    IS_REQUIRE(!ks.empty() && !modes.empty(), kInvalidInput, "--k and --retrieval must not be empty");
    const size_t max_k = *std::max_element(ks.begin(), ks.end());
    const std::set<std::string> only = [&] {
      const auto v = split_list(convs_arg);
      return std::set<std::string>(v.begin(), v.end());
    }();

    // ---- the store: one user per conversation
    const bool temp_dir = data_dir.empty();
    if (temp_dir) data_dir = (std::filesystem::temp_directory_path() / ("inferscale-bench-retr-" + std::to_string(::getpid()))).string();
    std::filesystem::create_directories(data_dir);
    auto store = FactStore::open(data_dir);
    std::vector<Question> questions;
    size_t turns = 0, no_evidence = 0, adversarial = 0;
    std::map<std::string, std::map<int64_t, std::string>> dia_of;  // user -> fact id -> dia_id
    for (const LocomoConversation& c : load_locomo(locomo_path)) {
      if (!only.empty() && !only.count(c.sample_id)) continue;
      if (store->count(kTenant, c.sample_id) == 0) store->add_turns(kTenant, c.sample_id, c.sample_id, locomo_turns(c));
      for (ListOptions lo;;) {
        const auto page = store->list(kTenant, c.sample_id, lo);
        for (const Fact& f : page) dia_of[c.sample_id][f.id] = f.source.turn;
        if (page.size() < lo.limit) break;
        lo.after_id = page.back().id;
      }
      turns += dia_of[c.sample_id].size();
      for (const LocomoQa& q : c.qa) {
        if (q.category == 5) {
          ++adversarial;
          continue;
        }
        if (q.evidence_ids.empty()) {
          ++no_evidence;
          continue;
        }
        questions.push_back(Question{c.sample_id, q.question, q.category, {q.evidence_ids.begin(), q.evidence_ids.end()}});
      }
    }
    IS_REQUIRE(!questions.empty(), kInvalidInput, "no questions selected from {}", locomo_path);
    std::fprintf(stderr, "%zu conversations, %zu turns, %zu questions (%zu adversarial and %zu without evidence left out)\n",
                 dia_of.size(), turns, questions.size(), adversarial, no_evidence);

    ordered_json out;
    out["implementation"] = "inferscale (bench_retrieval_locomo)";
    out["reference"] = false;
    out["locomo"] = locomo_path;
    out["conversations"] = dia_of.size();
    out["turns"] = turns;
    out["questions"] = questions.size();
    out["left_out"] = {{"adversarial", adversarial}, {"no_evidence", no_evidence}};
    out["ks"] = ks;
    out["hardware_threads"] = std::thread::hardware_concurrency();
    out["device"] = device;
    out["embedder"] = emb.model;
    out["neighbours"] = emb.neighbours;
    out["modes"] = ordered_json::object();
    bool embedded = false;
    for (const std::string& mode : modes) {
      cli::EmbedderArgs args = emb;
      args.retrieval = mode;
      const auto retriever = cli::make_retriever(args, *store, device == "cuda");
      if (cli::retrieval_mode(args) != cli::RetrievalMode::kBm25 && !embedded) {
        const auto t0 = Clock::now();
        const size_t n = cli::embed_all_missing(*retriever, *store);
        const double s = std::chrono::duration<double>(Clock::now() - t0).count();
        out["embedding"] = {{"turns", n}, {"seconds", s}, {"turns_per_s", s > 0 ? static_cast<double>(n) / s : 0.0},
                            {"note", n < turns ? "vectors already in --data-dir were not re-embedded" : ""}};
        std::fprintf(stderr, "embedded %zu turns in %.2f s (%.1f turns/s)\n", n, s, s > 0 ? n / s : 0.0);
        embedded = true;
      }
      Recall r;
      std::vector<double> latency_ms;
      for (const Question& q : questions) {
        const auto t0 = Clock::now();
        const std::vector<ScoredFact> hits = retriever->search(kTenant, q.user, q.text, max_k);
        latency_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        size_t first = SIZE_MAX;  // rank (0-based) of the first evidence turn
        const auto& dia = dia_of.at(q.user);
        for (size_t i = 0; i < hits.size() && first == SIZE_MAX; ++i)
          if (q.evidence.count(dia.at(hits[i].id))) first = i;
        for (const int cat : {0, q.category}) {
          ++r.asked[cat];
          for (const size_t k : ks) r.found[cat][k] += first < k ? 1 : 0;
        }
      }
      ordered_json m;
      m["retriever"] = retriever->name();
      for (const auto& [cat, n] : r.asked) {
        ordered_json c;
        c["n"] = n;
        for (const size_t k : ks) c["recall@" + std::to_string(k)] = static_cast<double>(r.found[cat][k]) / static_cast<double>(n);
        m["recall"][cat == 0 ? "all" : std::to_string(cat)] = c;
      }
      double sum = 0;
      for (const double x : latency_ms) sum += x;
      m["latency_ms"] = {{"p50", percentile(latency_ms, 0.5)}, {"p95", percentile(latency_ms, 0.95)},
                         {"mean", sum / static_cast<double>(latency_ms.size())}};
      std::fprintf(stderr, "%-7s recall@10 %.3f  p50 %.3f ms\n", mode.c_str(), m["recall"]["all"]["recall@10"].get<double>(),
                   m["latency_ms"]["p50"].get<double>());
      out["modes"][mode] = m;
    }

    // ---- tables
    std::string md = "| retrieval | category | n |";
    for (const size_t k : ks) md += fmt::format(" R@{} |", k);
    md += "\n|---|---|---:|";
    for (size_t i = 0; i < ks.size(); ++i) md += "---:|";
    md += "\n";
    const std::map<std::string, std::string> cat_name{{"all", "all (1-4)"}, {"1", "1 multi-hop"}, {"2", "2 temporal"},
                                                      {"3", "3 open-domain"}, {"4", "4 single-hop"}};
    for (const auto& [mode, m] : out["modes"].items())
      for (const auto& [cat, c] : m["recall"].items()) {
        md += fmt::format("| {} | {} | {} |", mode, cat_name.count(cat) ? cat_name.at(cat) : cat, c["n"].get<size_t>());
        for (const size_t k : ks) md += fmt::format(" {:.3f} |", c["recall@" + std::to_string(k)].get<double>());
        md += "\n";
      }
    md += "\n| retrieval | retriever | query p50 ms | p95 ms | mean ms |\n|---|---|---:|---:|---:|\n";
    for (const auto& [mode, m] : out["modes"].items())
      md += fmt::format("| {} | `{}` | {:.3f} | {:.3f} | {:.3f} |\n", mode, m["retriever"].get<std::string>(),
                        m["latency_ms"]["p50"].get<double>(), m["latency_ms"]["p95"].get<double>(),
                        m["latency_ms"]["mean"].get<double>());
    if (out.contains("embedding"))
      md += fmt::format("\nEmbedding: {} turns in {:.2f} s = {:.1f} turns/s ({} hardware threads).\n",
                        out["embedding"]["turns"].get<size_t>(), out["embedding"]["seconds"].get<double>(),
                        out["embedding"]["turns_per_s"].get<double>(), std::thread::hardware_concurrency());
    std::printf("%s", md.c_str());
    if (!md_path.empty()) std::ofstream(md_path) << md;
    if (!json_path.empty()) std::ofstream(json_path) << out.dump(1) << "\n";
    store.reset();
    if (temp_dir) std::filesystem::remove_all(data_dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
