// How close `inject` comes to `text` on a real model and LoCoMo, exactly, in process: for every
// non-adversarial question of the chosen conversations, the gold answer is teacher-forced after the
// prompt the server builds (the engine's memory connector: MemoryService, the server's retrieval:
// cli::make_retriever, BM25 with neighbour expansion, or hybrid with --embedder,
// LoCoMo's short-answer prompt; the engine scores the answer as prompt logprobs with whole
// distributions), and over the answer tokens it compares the full next-token distributions of
//   text k          the k retrieved facts prefilled with the question (the reference p)
//   inject k w r    the same tokens, the facts' KV encoded after w preceding turns and injected,
//                   the first r tokens of each fact recomputed (memory.recompute), the last m
//                   facts recomputed whole (memory.recompute_last) and the fraction a of the facts'
//                   tokens the question attends to most (memory.recompute_attention)
//   off             no facts
// Prints, per configuration, mean KL(text || x) per answer token, top-1 agreement with text, and
// the gold answer's mean negative log-likelihood per token, as a markdown table; --json writes
// them with per-question values (rewritten after each conversation). A question's configurations
// run as one batch of requests. bench/locomo_eval.py measures F1 (and NLL) over HTTP instead.
// --reference-native (with an FP8 --memory-kv-dtype or --kv-cache-dtype, or --quantization fp8 on
// the GPU) also runs every configuration on a second engine whose pool, cache and weights are
// native, and adds KL(native || x) and top-1 agreement with it: the cost of FP8 alone, config by
// config.
//
//   bench_quality_locomo --model models/SmolLM2-135M-Instruct.Q4_1.gguf --locomo locomo10.json \
//       --convs conv-26 --k 5,10,20,50 --w 0,2,5 --recompute 0 [--device cuda] [--json out.json] [--seconds S] \
//       [--embedder models/all-MiniLM-L6-v2]   (hybrid retrieval, the default scripts/run.sh serves)
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "cli/memory_options.h"
#include "engine/engine.h"
#include "engine/memory_connector.h"
#include "memory/store/fact_store.h"
#include "memory/formats/locomo.h"
#include "memory/memory_service.h"
#include "model/model.h"
#include "util/progress.h"

#ifdef INFERSCALE_HAS_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

using namespace inferscale;

namespace {

// How the question is asked, as bench/locomo_eval.py's presets (keep the two equal; that file says
// why "memory" is the default).
const std::map<std::string, std::string> kPrompts{
    {"memory", "Use the memories above to answer.\nQuestion: {}\nAnswer in a few words:"},
    {"locomo",
     "Based on the above context, write an answer in the form of a short phrase for the following question. "
     "Answer with exact words from the context whenever possible.\n\nQuestion: {} Short answer:"}};

using Rows = std::vector<std::vector<double>>;  // [answer tokens][vocab] log-probabilities

// The engine's connector for one scoring request: its ready prompt is followed by the gold
// answer's tokens, scored only (max_tokens 0): the request computes the answer's likelihood after
// the composed prompt.
class GoldScoring final : public ForwardingConnector {
 public:
  GoldScoring(MemoryConnector& inner, const std::vector<int32_t>& gold) : ForwardingConnector(inner), gold_(gold) {}
  MemoryPlan plan(RequestMemory& m) override {
    MemoryPlan p = inner_.plan(m);
    if (p.state != MemoryPlan::State::kReady) return p;
    p.prompt.insert(p.prompt.end(), gold_.begin(), gold_.end());
    p.max_tokens = 0;
    return p;
  }

 private:
  const std::vector<int32_t>& gold_;
};

// Every configuration of one question through the engine's memory connector, as the server sends
// requests: all are added at once and computed together in the engine's batches. For each, the
// service retrieves and composes the prompt (injected facts' KV copied from the pool, as for any
// request), GoldScoring appends the gold answer, and the engine scores the answer's tokens
// (prompt_logprobs over the tail, with whole distributions) without generating. Returns one
// Scored per request, in the order of `mrs`.
struct Scored {
  Rows rows;           // the gold answer's tokens
  MemoryPrompt served;  // the prompt as the service composed it
};
std::vector<Scored> score(Engine& engine, MemoryService& svc, const std::vector<MemoryRequest>& mrs,
                          const std::vector<ChatMessage>& msgs, const std::vector<int32_t>& gold) {
  GoldScoring connector(svc, gold);
  engine.set_memory(&connector);
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_tokens = 0;
  sp.prompt_logprobs = 0;
  sp.prompt_logprobs_tail = static_cast<int32_t>(gold.size());
  sp.prompt_distributions = true;
  std::vector<std::shared_ptr<RequestMemory>> memories;
  std::map<int64_t, size_t> slot;  // engine request id -> index in mrs
  for (const MemoryRequest& mr : mrs) {
    memories.push_back(std::make_shared<RequestMemory>(mr, PromptSource::of_chat(msgs)));
    slot[engine.add_memory_request(memories.back(), sp)] = memories.size() - 1;
  }
  std::vector<std::vector<std::optional<LogprobEntry>>> entries(mrs.size());
  while (engine.has_unfinished())
    for (RequestOutput& o : engine.step()) {
      if (o.error) std::rethrow_exception(o.error);
      if (!o.prompt_logprobs.empty()) entries.at(slot.at(o.id)) = std::move(o.prompt_logprobs);
    }
  engine.set_memory(nullptr);  // the connector goes with this call; the requests have ended
  std::vector<Scored> out(mrs.size());
  for (size_t r = 0; r < mrs.size(); ++r) {
    out[r].served = memories[r]->served;
    if (entries[r].size() < gold.size()) throw std::runtime_error("the engine returned no prompt logprobs");
    for (size_t i = entries[r].size() - gold.size(); i < entries[r].size(); ++i) {
      if (!entries[r][i] || entries[r][i]->distribution.empty()) throw std::runtime_error("an answer row was not computed");
      out[r].rows.push_back(std::move(entries[r][i]->distribution));
    }
  }
  return out;
}

struct Config {
  MemoryMode mode;
  int32_t k = 0, w = 0, r = 0, m = 0;
  double att = 0;  // memory.recompute_attention
  std::string name() const {
    if (mode == MemoryMode::kOff) return "off";
    if (mode == MemoryMode::kText) return fmt::format("text k={}", k);
    return fmt::format("inject k={} w={}{}{}{}", k, w, r ? fmt::format(" r={}", r) : "", m ? fmt::format(" m={}", m) : "",
                       att > 0 ? fmt::format(" a={:g}", att) : "");
  }
  // The request this configuration sends; the caller sets user and query.
  MemoryRequest request() const {
    MemoryRequest mr;
    mr.mode = mode;
    mr.k = k;
    mr.window = w;
    mr.recompute = r;
    mr.recompute_last = m;
    mr.recompute_attention = att;
    return mr;
  }
};

struct Acc {
  double kl = 0, nll = 0, kl_native = 0;
  int64_t tokens = 0, agree = 0, questions = 0, injected = 0, recomputed = 0, agree_native = 0;
};

struct Args {
  std::string model, device = "cpu", locomo, convs = "conv-26", json, prompt = "memory";
  std::vector<int> ks{5, 10, 20, 50}, ws{0, 2, 5}, rs{0}, ms{0};
  std::vector<double> atts{0};
  int max_questions = 0;
  double seconds = 0;  // > 0: no question starts after this many seconds
  int64_t kv_cache_mb = 1024, pool_mb = 2048;
  std::string memory_kv_dtype = "native";
  std::string kv_cache_dtype = "native";
  std::string quantization = "none";
  bool reference_native = false;
  cli::EmbedderArgs embedder;  // the server's retrieval options (--embedder, --retrieval, --retrieval-neighbours)
};

// Per configuration, the means over the questions measured so far (configs without any are left
// out). KL is against text at the same k; `off` has no k, so its KL is against no reference.
nlohmann::json table_of(const std::vector<Config>& configs, const std::map<std::string, Acc>& acc, bool native) {
  nlohmann::json table = nlohmann::json::array();
  for (const Config& cf : configs) {
    const auto it = acc.find(cf.name());
    if (it == acc.end() || it->second.tokens == 0) continue;
    const Acc& x = it->second;
    const auto tokens = static_cast<double>(x.tokens);
    const bool has_kl = cf.mode == MemoryMode::kInject;
    const double frac = x.injected + x.recomputed > 0
                            ? static_cast<double>(x.recomputed) / static_cast<double>(x.injected + x.recomputed)
                            : 0.0;
    const auto opt = [](bool has, double v) { return has ? nlohmann::json(v) : nlohmann::json(nullptr); };
    table.push_back({{"config", cf.name()}, {"mode", memory_mode_name(cf.mode)}, {"k", cf.k}, {"w", cf.w},
                     {"recompute", cf.r}, {"recompute_last", cf.m}, {"recompute_attention", cf.att},
                     {"questions", x.questions}, {"answer_tokens", x.tokens},
                     {"kl_per_token", opt(has_kl, x.kl / tokens)},
                     {"top1_agreement", opt(has_kl, static_cast<double>(x.agree) / tokens)},
                     {"nll_per_token", x.nll / tokens}, {"recomputed_fraction", frac},
                     {"kl_native_per_token", opt(native, x.kl_native / tokens)},
                     {"top1_agreement_native", opt(native, static_cast<double>(x.agree_native) / tokens)}});
  }
  return table;
}

void print_table(const Args& a, const Model& model, const Backend& be, const nlohmann::json& table, bool native) {
  std::printf("\n## LoCoMo %s, %s, %s backend, memory KV %s, KV cache %s, quantization %s, gold answers teacher-forced\n\n",
              a.convs.c_str(), model.name.c_str(), be.name().c_str(), a.memory_kv_dtype.c_str(),
              a.kv_cache_dtype.c_str(), a.quantization.c_str());
  std::printf("| config | questions | answer tokens | KL(text \\|\\| x) per token | top-1 agreement | NLL per token | "
              "recomputed / fact tokens |%s\n|---|---|---|---|---|---|---|%s\n",
              native ? " KL(native \\|\\| x) per token | top-1 agreement with native |" : "", native ? "---|---|" : "");
  for (const nlohmann::json& row : table) {
    const bool inject = row["mode"] == "inject";
    std::printf("| %s | %lld | %lld | %s | %s | %.4f | %s |%s\n", row["config"].get<std::string>().c_str(),
                row["questions"].get<long long>(), row["answer_tokens"].get<long long>(),
                inject ? fmt::format("{:.4f}", row["kl_per_token"].get<double>()).c_str() : "",
                inject ? fmt::format("{:.1f}%", 100 * row["top1_agreement"].get<double>()).c_str() : "",
                row["nll_per_token"].get<double>(),
                inject ? fmt::format("{:.1f}%", 100 * row["recomputed_fraction"].get<double>()).c_str() : "",
                native ? fmt::format(" {:.5f} | {:.1f}% |", row["kl_native_per_token"].get<double>(),
                                     100 * row["top1_agreement_native"].get<double>()).c_str()
                       : "");
  }
}

void write_json(const Args& a, const Model& model, const Backend& be, const nlohmann::json& table,
                const nlohmann::json& per_question) {
  std::ofstream f(a.json);
  f << nlohmann::json{{"model", model.name}, {"backend", be.name()}, {"convs", a.convs}, {"prompt", kPrompts.at(a.prompt)},
                      {"retrieval", a.embedder.retrieval}, {"embedder", a.embedder.model},
                      {"neighbours", a.embedder.neighbours}, {"configs", table}, {"questions", per_question}}
           .dump(1);
}

// KL(P || Q) summed over the answer tokens, and how many tokens' argmax agree.
std::pair<double, int64_t> kl_and_agreement(const Rows& P, const Rows& Q) {
  double kl = 0;
  int64_t agree = 0;
  for (size_t t = 0; t < P.size(); ++t) {
    for (size_t v = 0; v < P[t].size(); ++v) kl += std::exp(P[t][v]) * (P[t][v] - Q[t][v]);
    const auto ap = std::max_element(P[t].begin(), P[t].end()) - P[t].begin();
    const auto aq = std::max_element(Q[t].begin(), Q[t].end()) - Q[t].begin();
    agree += ap == aq;
  }
  return {kl, agree};
}

// One question's results, config by config, into the accumulators and into `qj` (its
// per-question values): the gold answer's NLL per token, and for a config with a k its KL and
// top-1 against text at that k (the configs list text before its injects); with `ref` (the same
// configs on native storage), KL and top-1 against it.
void add_question(const std::vector<Config>& configs, const std::vector<Scored>& got, const std::vector<Scored>* ref,
                  const std::vector<int32_t>& gold, std::map<std::string, Acc>& acc, nlohmann::json& qj) {
  const Rows* text_rows = nullptr;
  for (size_t i = 0; i < configs.size(); ++i) {
    const Config& cf = configs[i];
    const Rows& rows = got[i].rows;
    const MemoryPrompt& p = got[i].served;
    if (cf.mode == MemoryMode::kInject && !p.fallback.empty()) throw std::runtime_error("inject fell back: " + p.fallback);
    const auto n = static_cast<double>(rows.size());
    Acc& x = acc[cf.name()];
    double nll = 0, kl = 0;
    for (size_t t = 0; t < rows.size(); ++t) nll -= rows[t][static_cast<size_t>(gold[t])];
    ++x.questions;
    x.tokens += static_cast<int64_t>(rows.size());
    x.nll += nll;
    x.injected += p.injected ? p.injected->num_injected() : 0;
    x.recomputed += p.recomputed;
    if (ref != nullptr) {
      const auto [d, agree] = kl_and_agreement((*ref)[i].rows, rows);
      x.kl_native += d;
      x.agree_native += agree;
    }
    if (cf.mode == MemoryMode::kText) text_rows = &rows;
    if (cf.mode != MemoryMode::kText && text_rows != nullptr && cf.k > 0) {
      int64_t agree = 0;
      std::tie(kl, agree) = kl_and_agreement(*text_rows, rows);
      x.agree += agree;
      x.kl += kl;
    }
    qj[cf.name()] = {{"nll", nll / n}, {"kl", kl / n}};
  }
}

// A conversation's memory on one engine: its turns in a store of their own (fresh, so the same turns
// get the same ids), the server's retriever over them (with an embedder, every turn embedded now), and
// every turn encoded at each window into the engine's pool.
struct ConversationMemory {
  std::unique_ptr<FactStore> store;
  std::unique_ptr<Retriever> retriever;
  std::unique_ptr<MemoryService> svc;
  std::vector<int64_t> ids;
};
ConversationMemory open_memory(const std::filesystem::path& dir, const LocomoConversation& c, const Model& model,
                               Engine& engine, const std::vector<int>& windows, const cli::EmbedderArgs& emb, bool gpu) {
  ConversationMemory m;
  m.store = FactStore::open(dir);
  m.retriever = cli::make_retriever(emb, *m.store, gpu);
  m.ids = m.store->add_turns(kDefaultTenant, c.sample_id, c.sample_id, locomo_turns(c));
  cli::embed_all_missing(*m.retriever, *m.store);
  m.svc = std::make_unique<MemoryService>(*m.store, *m.retriever, model, engine.backend(), engine.blocks(), MemoryOptions{});
  for (int w : windows) m.svc->encode_facts(kDefaultTenant, c.sample_id, m.ids, w);  // the pool keeps them all
  return m;
}

std::vector<const LocomoConversation*> pick(const std::vector<LocomoConversation>& all, const std::string& names) {
  std::vector<const LocomoConversation*> out;
  for (const auto& c : all)
    if (names == "all" || ("," + names + ",").find("," + c.sample_id + ",") != std::string::npos) out.push_back(&c);
  if (out.empty()) throw std::runtime_error("no conversation named " + names);
  return out;
}

std::string render_prompt(const std::string& preset, const std::string& question) {
  std::string p = kPrompts.at(preset);
  return p.replace(p.find("{}"), 2, question);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"LoCoMo: KL(text || inject), top-1 agreement and gold-answer NLL on a real model, in process"};
  app.add_option("--model", a.model, "model (GGUF file or HF directory)")->required();
  app.add_option("--locomo", a.locomo, "locomo10.json")->required();
  app.add_option("--convs", a.convs, "comma-separated sample_ids, or all")->capture_default_str();
  app.add_option("--max-questions", a.max_questions, "per conversation (0: all non-adversarial)");
  app.add_option("--seconds", a.seconds,
                 "start no question after this many seconds (0: no limit); the results hold those measured")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--k", a.ks, "facts per request")->delimiter(',');
  app.add_option("--w", a.ws, "CWE windows")->delimiter(',');
  app.add_option("--recompute", a.rs, "memory.recompute values (first r tokens of each fact)")->delimiter(',');
  app.add_option("--recompute-last", a.ms, "memory.recompute_last values (the last m facts whole)")->delimiter(',');
  app.add_option("--recompute-attention", a.atts,
                 "memory.recompute_attention values (the fraction of fact tokens the question attends to most)")
      ->delimiter(',')->check(CLI::Range(0.0, 1.0));
  app.add_option("--device", a.device, "cpu | cuda")->capture_default_str();
  app.add_option("--kv-cache-mb", a.kv_cache_mb, "paged KV cache")->capture_default_str();
  app.add_option("--pool-mb", a.pool_mb, "memory pool")->capture_default_str();
  app.add_option("--json", a.json, "write the results here");
  app.add_option("--memory-kv-dtype", a.memory_kv_dtype, "the memory pool's storage: native | fp8")
      ->capture_default_str()
      ->check(CLI::IsMember({"native", "fp8"}));
  app.add_option("--kv-cache-dtype", a.kv_cache_dtype, "the paged KV cache's storage: native | fp8")
      ->capture_default_str()
      ->check(CLI::IsMember({"native", "fp8"}));
  app.add_option("--quantization", a.quantization, "CUDA: the layers' projections: none (bf16) | fp8 (E4M3)")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "fp8"}));
  app.add_flag("--reference-native", a.reference_native,
               "also score every config on native pool and cache: KL(native || x) per config");
  app.add_option("--prompt", a.prompt, "how the question is asked: memory | locomo")->capture_default_str()
      ->check(CLI::IsMember({"memory", "locomo"}));
  cli::add_embedder_options(app, a.embedder);
  cli::add_retrieval_option(app, a.embedder);
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);

  const auto t_start = std::chrono::steady_clock::now();
  Model model = load_model(a.model);
  const ModelConfig& cfg = model.config;
  const bool cuda = a.device == "cuda";
#ifndef INFERSCALE_HAS_CUDA
  if (cuda) {
    std::fprintf(stderr, "this build has no CUDA backend\n");
    return 2;
  }
#endif
  if (a.reference_native && a.memory_kv_dtype == "native" && a.kv_cache_dtype == "native" && a.quantization == "none") {
    std::fprintf(stderr, "--reference-native compares FP8 with native: pass --memory-kv-dtype, --kv-cache-dtype or --quantization fp8\n");
    return 2;
  }
  // An engine over the model with the pool and cache in these dtypes.
  auto make_engine = [&](bool pool_fp8, bool cache_fp8, bool projections_fp8) {
    BackendOptions bo;
    bo.cache_fp8 = cache_fp8;
    bo.projections_fp8 = projections_fp8;
    bo.num_cache_blocks = (a.kv_cache_mb << 20) / (kv_store_bytes_per_token(cfg, cuda, bo.cache_fp8) * bo.block_size);
    bo.pool_fp8 = pool_fp8;
    bo.num_pool_blocks = (a.pool_mb << 20) / (kv_store_bytes_per_token(cfg, cuda, bo.pool_fp8) * bo.block_size);
    std::unique_ptr<Backend> backend;
#ifdef INFERSCALE_HAS_CUDA
    if (cuda) backend = make_cuda_backend(cfg, model.weights, bo);
#endif
    if (!cuda) backend = make_cpu_backend(cfg, model.weights, bo);
    EngineOptions eo;
    eo.scheduler.max_num_batched_tokens = 2048;
    return std::make_unique<Engine>(std::move(backend), model.tokenizer, eo);
  };
  std::unique_ptr<Engine> engine_ptr =
      make_engine(a.memory_kv_dtype == "fp8", a.kv_cache_dtype == "fp8", a.quantization == "fp8");
  std::unique_ptr<Engine> native = a.reference_native ? make_engine(false, false, false) : nullptr;
  Engine& engine = *engine_ptr;
  const Backend& be = engine.backend();
  const Tokenizer& tok = *model.tokenizer;

  std::vector<Config> configs{{MemoryMode::kOff}};
  for (int k : a.ks) {
    configs.push_back({MemoryMode::kText, k});
    for (int w : a.ws)
      for (int r : a.rs)
        for (int m : a.ms)
          for (double att : a.atts) configs.push_back({MemoryMode::kInject, k, w, r, m, att});
  }
  std::map<std::string, Acc> acc;
  nlohmann::json per_question = nlohmann::json::array();
  std::vector<MemoryRequest> mrs;
  for (const Config& cf : configs) mrs.push_back(cf.request());
  const auto out_of_time = [&] {
    return a.seconds > 0 && std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count() > a.seconds;
  };

  const auto convs = load_locomo(a.locomo);
  for (const LocomoConversation* c : pick(convs, a.convs)) {
    if (out_of_time()) break;
    const auto dir = std::filesystem::temp_directory_path() /
                     ("inferscale-quality-" + std::to_string(::getpid()) + "-" + c->sample_id);
    std::filesystem::remove_all(dir);
    ConversationMemory mem = open_memory(dir, *c, model, engine, a.ws, a.embedder, cuda);
    // The native reference: the same turns (so the same ids and retrievals) in its own store and pool.
    ConversationMemory ref;
    if (native) {
      ref = open_memory(dir / "native", *c, model, *native, a.ws, a.embedder, cuda);
      if (ref.ids != mem.ids) throw std::runtime_error("the reference store numbered the turns differently");
    }
    std::vector<const LocomoQa*> qs;
    for (const LocomoQa& q : c->qa)
      if (q.category >= 1 && q.category <= 4 && q.has_answer) qs.push_back(&q);
    if (a.max_questions > 0 && static_cast<int>(qs.size()) > a.max_questions) qs.resize(static_cast<size_t>(a.max_questions));
    for (MemoryRequest& mr : mrs) mr.user = c->sample_id;
    Progress::Options po;
    po.unit = "questions";
    Progress progress(c->sample_id, static_cast<int64_t>(qs.size()), po);
    for (const LocomoQa* q : qs) {
      if (out_of_time()) break;
      const std::vector<ChatMessage> msgs{{"user", render_prompt(a.prompt, q->question)}};
      const auto gold = tok.encode(q->answer, {.add_special = false, .parse_special = false});
      if (gold.empty()) continue;
      for (MemoryRequest& mr : mrs) mr.query = q->question;
      const std::vector<Scored> got = score(engine, *mem.svc, mrs, msgs, gold);
      const std::vector<Scored> ref_got = native ? score(*native, *ref.svc, mrs, msgs, gold) : std::vector<Scored>{};
      nlohmann::json qj = {{"conversation", c->sample_id}, {"question", q->question}, {"category", q->category}};
      add_question(configs, got, native ? &ref_got : nullptr, gold, acc, qj);
      per_question.push_back(std::move(qj));
      progress.add(1);
    }
    progress.finish();
    std::filesystem::remove_all(dir);
    if (!a.json.empty()) write_json(a, model, be, table_of(configs, acc, native != nullptr), per_question);
  }
  if (out_of_time()) std::printf("\nstopped after --seconds %g: the table holds the questions measured by then\n", a.seconds);

  const nlohmann::json table = table_of(configs, acc, native != nullptr);
  print_table(a, model, be, table, native != nullptr);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  std::printf("\n%.1f s in all\n", secs);
  if (!a.json.empty()) write_json(a, model, be, table, per_question);
  return 0;
}
