// End-to-end memory serving: the real Engine + MemoryService + BM25 over one LoCoMo conversation,
// on the CPU or CUDA backend with seeded random weights of a given HF config.
//   1. import the conversation's turns; encode every turn's KV (window w) into the memory pool
//   2. TTFT per LoCoMo question, k in --k: mode inject (facts' KV copied in, question prefilled)
//      vs mode text (the same prompt tokens prefilled), measured from retrieval to first token
//   3. throughput: --users requests at once (k = the largest --k), --max-tokens each, both modes,
//      with the most cache blocks held at once
// --facts-in-place 0: inject copies the facts into each request's blocks (the path before zero-copy
// memory), for A/B runs; 1 (the engine's default): attention reads them in place where it can.
// Random weights: the text is meaningless; token counts come from the real tokenizer, the times
// from the real model shapes. Prints markdown tables.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "engine/engine.h"
#include "memory/retrieval/bm25_retriever.h"
#include "memory/store/fact_store.h"
#include "memory/formats/locomo.h"
#include "memory/memory_service.h"
#include "model/model.h"
#include "tokenizer/load_tokenizer.h"

#ifdef INFERSCALE_HAS_CUDA
#include <cuda_runtime.h>

#include "backend/cuda/cuda_backend.h"
#include "cuda_bench_common.h"
#endif

using namespace inferscale;
using Clock = std::chrono::steady_clock;

namespace {

// The engine's connector, timing requests' memory: a request's *ms gets the time from its t0 to
// its prompt's being ready (its preparation: retrieval, residency, composition).
class TimedConnector final : public ForwardingConnector {
 public:
  using ForwardingConnector::ForwardingConnector;
  void time(const RequestMemory& m, Clock::time_point t0, double* ms) { timed_[&m] = {t0, ms}; }
  MemoryPlan plan(RequestMemory& m) override {
    MemoryPlan p = inner_.plan(m);
    auto it = timed_.find(&m);
    if (p.state == MemoryPlan::State::kReady && it != timed_.end()) {
      *it->second.second = std::chrono::duration<double, std::milli>(Clock::now() - it->second.first).count();
      timed_.erase(it);
    }
    return p;
  }

 private:
  std::unordered_map<const RequestMemory*, std::pair<Clock::time_point, double*>> timed_;
};

double ms(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Args {
  std::string config, tokenizer, locomo, device = "cpu";
  int conv = 0;
  std::vector<int> ks{5, 10, 20, 50};
  int window = 2;
  int questions = 20;
  int users = 100;
  int max_seqs = 256;
  int throughput_text = 1;
  bool profile_ttft = false;
  std::vector<int32_t> recompute_last;      // and with these memory.recompute_last (no probe pass)
  std::vector<double> recompute_attention;  // TTFT at the largest k with these memory.recompute_attention
  int max_tokens = 32;
  int64_t kv_cache_mb = 16384;
  int64_t pool_mb = 4096;
  bool no_pdl = false;
  int facts_in_place = 1;
  int schedule_ahead = 1;
  std::string memory_kv_dtype = "native";
  std::string kv_cache_dtype = "native";
  std::string quantization = "none";
#ifdef INFERSCALE_HAS_CUDA
  DecodeAttention decode_attention = kDefaultDecodeAttention;
#endif
};

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"end-to-end memory serving benchmark (LoCoMo, inject vs text)"};
  app.add_option("--config", a.config, "HF config.json (random weights of its shape)")->required();
  app.add_option("--tokenizer", a.tokenizer, "tokenizer file or directory")->required();
  app.add_option("--locomo", a.locomo, "locomo10.json")->required();
  app.add_option("--conv", a.conv, "conversation index");
  app.add_option("--device", a.device, "cpu | cuda");
  app.add_option("--k", a.ks, "facts per request")->delimiter(',');
  app.add_option("--window", a.window, "CWE window");
  app.add_option("--questions", a.questions, "questions per k");
  app.add_option("--recompute-attention", a.recompute_attention,
                 "TTFT of inject at the largest k with these memory.recompute_attention fractions (a probe pass, then "
                 "that share of the facts' tokens recomputed)")
      ->delimiter(',')->check(CLI::Range(0.0, 1.0));
  app.add_option("--recompute-last", a.recompute_last,
                 "the same table's rows with these memory.recompute_last values (the last m facts recomputed "
                 "whole, no probe pass): the recompute's cost alone")
      ->delimiter(',')->check(CLI::Range(0, MemoryRequest::kMaxRecomputeLast));
  app.add_option("--users", a.users, "concurrent requests in the throughput run");
  app.add_flag("--profile-ttft", a.profile_ttft,
               "CUDA: where one inject question's GPU time goes at each k, by op (eager, an event before each op)");
  app.add_option("--throughput-text", a.throughput_text, "1: the throughput run in text mode too (the default); 0: inject only")
      ->check(CLI::Range(0, 1));
  app.add_option("--max-seqs", a.max_seqs, "requests a step may run at most (the scheduler's max_num_seqs)")
      ->check(CLI::Range(1, 65536));
  app.add_option("--schedule-ahead", a.schedule_ahead,
                 "1: plan step N+1 while step N computes (the default on the GPU); 0: one step at a time")
      ->check(CLI::IsMember({0, 1}));
  app.add_option("--facts-in-place", a.facts_in_place, "1: read injected facts in place (the default); 0: copy them")
      ->check(CLI::Range(0, 1));
  app.add_option("--max-tokens", a.max_tokens, "tokens generated per request in the throughput run");
  app.add_option("--kv-cache-mb", a.kv_cache_mb, "paged KV cache");
  app.add_option("--pool-mb", a.pool_mb, "memory pool");
  app.add_flag("--no-programmatic-launch", a.no_pdl, "CUDA: plain stream order between kernels (no PDL)");
  app.add_option("--memory-kv-dtype", a.memory_kv_dtype, "the memory pool's storage: native | fp8")
      ->check(CLI::IsMember({"native", "fp8"}));
  app.add_option("--kv-cache-dtype", a.kv_cache_dtype, "the paged KV cache's storage: native | fp8")
      ->check(CLI::IsMember({"native", "fp8"}));
  app.add_option("--quantization", a.quantization, "CUDA: the layers' projections: none (bf16) | fp8 (E4M3)")
      ->check(CLI::IsMember({"none", "fp8"}));
#ifdef INFERSCALE_HAS_CUDA
  const std::map<std::string, DecodeAttention> decode_kernels{{"tiles", DecodeAttention::kTensorCore},
                                                              {"mma", DecodeAttention::kMma},
                                                              {"auto", DecodeAttention::kAuto}};
  app.add_option("--decode-attention", a.decode_attention,
                 "CUDA: the decode steps' attention kernel: tiles | mma | auto (the default)")
      ->transform(CLI::CheckedTransformer(decode_kernels));
#endif
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);

  Model model;
  model.config = ModelConfig::from_hf_file(a.config);
  LoadedTokenizer lt = load_tokenizer(a.tokenizer);
  model.tokenizer = lt.tokenizer;
  model.chat_template = lt.chat;
  model.name = std::filesystem::path(a.config).stem().string();
  model.fingerprint = "bench-random-" + model.config.fingerprint();
  model.random_weights = true;
  const ModelConfig& cfg = model.config;
  const bool cuda = a.device == "cuda";
  BackendOptions bo;
  bo.block_size = 16;
  bo.programmatic_launch = !a.no_pdl;
  bo.cache_fp8 = a.kv_cache_dtype == "fp8";
  bo.projections_fp8 = a.quantization == "fp8";
  bo.num_cache_blocks = (a.kv_cache_mb << 20) / (kv_store_bytes_per_token(cfg, cuda, bo.cache_fp8) * bo.block_size);
  bo.pool_fp8 = a.memory_kv_dtype == "fp8";
  bo.num_pool_blocks = (a.pool_mb << 20) / (kv_store_bytes_per_token(cfg, cuda, bo.pool_fp8) * bo.block_size);
  std::unique_ptr<Backend> backend;
#ifdef INFERSCALE_HAS_CUDA
  CudaBackend* gpu = nullptr;  // the engine owns it; the TTFT and throughput runs read its GPU times
#endif
  double copy_gbs = 0, gemm_tflops = 0;  // this card's limits, measured before the backend takes its memory
  if (cuda) {
#ifdef INFERSCALE_HAS_CUDA
    const bench::Ceilings limits = bench::measure_ceilings(10);
    copy_gbs = limits.copy_gbs;
    gemm_tflops = limits.gemm_tflops;
    std::printf("%s: D2D copy %.0f GB/s (read + write), bf16 GEMM 8192^3 %.0f TFLOP/s, measured now\n",
                bench::device_name().c_str(), copy_gbs, gemm_tflops);
    auto cb = make_cuda_backend_random(cfg, 1, bo);
    gpu = cb.get();
    cb->set_decode_attention(a.decode_attention);
    std::printf("decode attention: %s\n", decode_attention_name(a.decode_attention));
    backend = std::move(cb);
#else
    std::fprintf(stderr, "this build has no CUDA backend\n");
    return 2;
#endif
  } else {
    model.weights = make_random_weights(cfg, 1);
    backend = make_cpu_backend(cfg, model.weights, bo);
  }
  EngineOptions eo;
  eo.scheduler.max_num_batched_tokens = 8192;
  eo.scheduler.max_num_seqs = a.max_seqs;
  eo.facts_in_place = a.facts_in_place == 1;
  eo.schedule_ahead = a.schedule_ahead == 1 ? ScheduleAhead::kWhereOverlapping : ScheduleAhead::kNever;
  Engine engine(std::move(backend), model.tokenizer, eo);

  // 1. Import and encode.
  const auto convs = load_locomo(a.locomo);
  const LocomoConversation& c = convs.at(static_cast<size_t>(a.conv));
  const auto dir = std::filesystem::temp_directory_path() / ("inferscale-bench-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  // Removed when main returns, after the service, the retriever and the store (declared after it:
  // the service detaches from the store as it goes).
  struct RemoveDir {
    std::filesystem::path path;
    ~RemoveDir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  } remove_dir{dir};
  auto store = FactStore::open(dir);
  Bm25Retriever retriever(*store);
  const auto ids = store->add_turns(kDefaultTenant, c.sample_id, c.sample_id, locomo_turns(c));
  MemoryOptions mo;
  mo.default_window = a.window;
  MemoryService service(*store, retriever, model, engine.backend(), engine.blocks(), mo);
  TimedConnector timed(service);
  engine.set_memory(&timed);
  int64_t fact_tokens = 0;
  for (int64_t id : ids) fact_tokens += static_cast<int64_t>(service.fact_tokens(store->get(kDefaultTenant, c.sample_id, id)).size());
  const auto e0 = Clock::now();
  service.encode_facts(kDefaultTenant, c.sample_id, ids, a.window);
  const double encode_ms = ms(e0, Clock::now());
  std::printf("\n## %s shapes (random weights), %s backend, LoCoMo %s: %zu turns, %.1f tokens per fact, window %d\n\n",
              model.name.c_str(), a.device.c_str(), c.sample_id.c_str(), ids.size(),
              static_cast<double>(fact_tokens) / ids.size(), a.window);
  std::printf("Encoding (write path): %zu facts, %lld tokens through the model (window included) in %.1f ms: "
              "%.0f facts/s, %.0f tokens/s; %lld pool blocks held\n\n",
              ids.size(), static_cast<long long>(service.tokens_encoded()), encode_ms, ids.size() / (encode_ms / 1e3),
              service.tokens_encoded() / (encode_ms / 1e3),
              static_cast<long long>(service.pool().num_blocks() - service.pool().num_free_blocks()));

  // One request with memory through the engine's connector, as the server sends it: its memory
  // is planned (retrieval, composition, KV made resident) inside the next step. `prepare_ms`
  // gets the time from the add to the prompt being ready. Every request has a cache salt of its
  // own: no request is served from another's prefix-cache blocks (the runs below repeat prompts).
  uint64_t salt = 0;
  auto one = [&](const std::string& question, int k, MemoryMode mode, int max_tokens, double* prepare_ms,
                 std::shared_ptr<RequestMemory>* keep, double recompute_attention = -1, int32_t recompute_last = -1) {
    MemoryRequest r;
    r.user = c.sample_id;
    r.k = k;
    r.mode = mode;
    r.recompute_attention = recompute_attention;
    r.recompute_last = recompute_last;
    SamplingParams sp;
    sp.temperature = 0;
    sp.max_tokens = max_tokens;
    sp.ignore_eos = true;
    auto m = std::make_shared<RequestMemory>(r, PromptSource::of_chat({{"user", question}}));
    const auto t0 = Clock::now();
    if (prepare_ms) timed.time(*m, t0, prepare_ms);
    engine.add_memory_request(m, sp, ++salt);
    if (keep) *keep = std::move(m);
    return t0;
  };

  // The GPU time (events) of the last step's forward, and of its injection if it had one; 0 on the CPU.
  auto step_gpu_ms = [&](const EngineStats& before, const EngineStats& after) {
    double g = 0;
#ifdef INFERSCALE_HAS_CUDA
    if (gpu != nullptr && after.steps != before.steps) {
      g = gpu->last_gpu_ms();
      if (after.tokens_injected != before.tokens_injected) g += gpu->last_inject_gpu_ms();
    }
#endif
    (void)before;
    (void)after;
    return g;
  };
  // Steps until every request ended; a request the engine rejected stops the benchmark. Returns
  // the GPU ms of its forwards and injections.
  auto step_all = [&] {
    double g = 0;
    while (engine.has_unfinished()) {
      const EngineStats before = engine.stats();
      for (const RequestOutput& o : engine.step())
        if (o.error) std::rethrow_exception(o.error);
      g += step_gpu_ms(before, engine.stats());
    }
    return g;
  };

  // 2. TTFT per k, inject vs text, same questions.
  std::vector<std::string> qs;
  for (const auto& q : c.qa)
    if (static_cast<int>(qs.size()) < a.questions && q.category != 5) qs.push_back(q.question);
  for (int w = 0; w < 3; ++w) {  // warm-up
    one(qs[static_cast<size_t>(w) % qs.size()], a.ks.back(), MemoryMode::kInject, 1, nullptr, nullptr);
    step_all();
  }
  // prepare = the connector's plans: retrieval (the index search), residency (pins, pool lookups,
  // any encoding) and the rest (store refresh, fact fetch, tokens, composition). GPU = the
  // forward's and the injection's time between events (CUDA); the rest of TTFT is the host's.
  std::printf("| k | prompt tokens | injected | TTFT inject (ms) | TTFT text (ms) | text / inject | prepare (ms) | "
              "retrieval (ms) | residency (ms) | inject: GPU (ms) |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  std::vector<double> ttft_inject;  // median per k
  for (int k : a.ks) {
    std::vector<double> ti, tt, prep, retr, resid, gpu_ti;
    double prompt = 0, injected = 0;
    for (const auto& q : qs) {
      for (MemoryMode mode : {MemoryMode::kInject, MemoryMode::kText}) {
        double pm = 0;
        std::shared_ptr<RequestMemory> t;
        const auto t0 = one(q, k, mode, 1, &pm, &t);
        const double g = step_all();
        const MemoryPrompt& p = t->served;
        const double ttft = ms(t0, Clock::now());
        (mode == MemoryMode::kInject ? ti : tt).push_back(ttft);
        if (mode == MemoryMode::kInject) {
          gpu_ti.push_back(g);
          prep.push_back(pm);
          retr.push_back(p.retrieve_ms);
          resid.push_back(p.kv_ms);
          prompt += static_cast<double>(p.tokens.size());
          injected += p.injected ? p.injected->end - p.injected->start : 0;
        }
      }
    }
    const double mi = median(ti), mt = median(tt);
    ttft_inject.push_back(mi);
    std::printf("| %d | %.0f | %.0f | %.2f | %.2f | %.2fx | %.2f | %.2f | %.2f | %.2f |\n", k, prompt / qs.size(),
                injected / qs.size(), mi, mt, mt / mi, median(prep), median(retr), median(resid), median(gpu_ti));
  }

  // 2b. TTFT of inject at the largest k with the attention selector: its probe pass (the prompt
  // with every fact injected, computed to measure the question's attention), then the chosen
  // share of the facts' tokens recomputed with the question; "probe + recompute" is the cost over
  // none (attention 0). The last-m rows recompute whole facts without a probe: the recompute's
  // cost alone, at a comparable share.
  if (!a.recompute_attention.empty() || !a.recompute_last.empty()) {
    const int k = a.ks.back();
    struct Row {
      std::string selector;
      double attention = 0;
      int32_t last = 0;
    };
    std::vector<Row> rows{{"none"}};  // rows[0]: the baseline the others are timed against
    for (const double f : a.recompute_attention)
      if (f > 0) rows.push_back({fmt::format("attention {:g}", f), f, 0});
    for (const int32_t m : a.recompute_last)
      if (m > 0) rows.push_back({fmt::format("last {} facts", m), 0, m});
    std::printf("\n| k | selector | recomputed / fact tokens | TTFT inject (ms) | over none (ms) | inject: GPU (ms) |\n");
    std::printf("|---|---|---|---|---|---|\n");
    double none = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& row = rows[i];
      std::vector<double> t_all, gpu_all;
      double recomputed = 0, facts = 0;
      for (const auto& q : qs) {
        std::shared_ptr<RequestMemory> t;
        const auto t0 = one(q, k, MemoryMode::kInject, 1, nullptr, &t, row.attention, row.last);
        gpu_all.push_back(step_all());
        t_all.push_back(ms(t0, Clock::now()));
        recomputed += t->served.recomputed;
        facts += t->served.injected ? t->served.injected->end - t->served.injected->start : 0;
      }
      const double mt = median(t_all);
      if (i == 0) none = mt;
      std::printf("| %d | %s | %.1f%% | %.2f | %s | %.2f |\n", k, row.selector.c_str(),
                  facts > 0 ? 100 * recomputed / facts : 0.0, mt,
                  i > 0 ? fmt::format("{:+.2f}", mt - none).c_str() : "", median(gpu_all));
    }
  }

#ifdef INFERSCALE_HAS_CUDA
  // One inject question again per k, eager with an event before each op: where its GPU time goes.
  if (a.profile_ttft && gpu != nullptr) {
    gpu->set_cuda_graphs(false);
    for (int k : a.ks) {
      one(qs.front(), k, MemoryMode::kInject, 1, nullptr, nullptr);  // warm: its plans and buffers
      step_all();
      gpu->set_op_profile(true);
      one(qs.front(), k, MemoryMode::kInject, 1, nullptr, nullptr);
      step_all();
      std::vector<OpTime> ops = gpu->op_profile();
      gpu->set_op_profile(false);
      std::sort(ops.begin(), ops.end(), [](const OpTime& x, const OpTime& y) { return x.ms > y.ms; });
      double total = 0;
      for (const OpTime& o : ops) total += o.ms;
      std::printf("\nk = %d, one inject question eagerly, %.3f ms of GPU by op:\n", k, total);
      for (const OpTime& o : ops) std::printf("  %-40s %8.3f ms  %5lld calls\n", o.op.c_str(), o.ms, static_cast<long long>(o.calls));
    }
    gpu->set_cuda_graphs(true);
  }
#endif
  std::printf("\nTTFT inject at k = %d / at k = %d: %.3fx\n", a.ks.back(), a.ks.front(), ttft_inject.back() / ttft_inject.front());
  // The limits a forward has on this card: the weights read once (the weight-read floor), and a
  // step's weights, KV entries and FLOPs at the measured ceilings (the throughput roofline below).
  double weight_bytes = 0, kv_bytes_per_entry = 0, flops_per_token = 0;
#ifdef INFERSCALE_HAS_CUDA
  if (gpu != nullptr) {
    weight_bytes = static_cast<double>(gpu->weight_bytes());
    kv_bytes_per_entry = static_cast<double>(kv_store_bytes_per_token(cfg, true, bo.cache_fp8));
    const double H = cfg.hidden_size, D = cfg.head_dim, NH = cfg.num_heads, NKV = cfg.num_kv_heads, I = cfg.intermediate_size;
    flops_per_token = 2.0 * (cfg.num_layers * (H * (NH + 2 * NKV) * D + NH * D * H + 3 * H * I) + cfg.vocab_size * H);
    const double floor_ms = weight_bytes / (copy_gbs * 1e6);
    std::printf("weight-read floor %.2f ms (%.2f GB of weights at %.0f GB/s); TTFT inject / floor:", floor_ms,
                weight_bytes / 1e9, copy_gbs);
    for (size_t i = 0; i < a.ks.size(); ++i) std::printf(" k = %d %.2fx%s", a.ks[i], ttft_inject[i] / floor_ms, i + 1 < a.ks.size() ? "," : "\n");
  }
#endif

  // 3. Throughput: all users at once.
  const int kmax = a.ks.back();
  // Distinct questions per user (LoCoMo has 150+ per conversation), so no two requests share a
  // prompt and the prefix cache cannot serve one from another.
  std::vector<std::string> uq;
  for (const auto& q : c.qa)
    if (static_cast<int>(uq.size()) < a.users && q.category != 5) uq.push_back(q.question);
  for (size_t i = 0; static_cast<int>(uq.size()) < a.users; ++i) uq.push_back(uq[i] + " Please answer briefly.");
  std::printf("\nThroughput: %d requests at once (distinct questions), k = %d, %d tokens each\n\n", a.users, kmax,
              a.max_tokens);
  // An untimed pass first: the first batch of each size pays for its CUDA graphs' capture.
  for (int u = 0; u < a.users; ++u) one(uq[static_cast<size_t>(u)], kmax, MemoryMode::kInject, a.max_tokens, nullptr, nullptr);
  step_all();
  std::printf("| mode | wall (s) | requests/s | output tokens/s | mean TTFT (ms) |\n|---|---|---|---|---|\n");
  double rps[2] = {0, 0};
  std::string step_lines;  // per mode: a step's wall time against its GPU time (CUDA)
  int mi = 0;
  for (const MemoryMode mode : {MemoryMode::kInject, MemoryMode::kText}) {
    if (mode == MemoryMode::kText && a.throughput_text == 0) continue;
    const char* label = mode == MemoryMode::kText ? "text" : "inject";
    const auto t0 = Clock::now();
    const EngineStats start = engine.stats();  // the run's counts are differences from these
    for (int u = 0; u < a.users; ++u) one(uq[static_cast<size_t>(u)], kmax, mode, a.max_tokens, nullptr, nullptr);
    double ttft_sum = 0, gpu_ms = 0;
    int64_t out_tokens = 0, steps = 0, peak_blocks = 0, peak_running = 0;
    std::vector<double> idle_ms;  // the GPU's idle time before each decode forward (CUDA events)
    while (engine.has_unfinished()) {
      peak_blocks = std::max(peak_blocks, engine.blocks().num_blocks() - engine.blocks().num_free());
      peak_running = std::max(peak_running, static_cast<int64_t>(engine.scheduler().num_running()));
      const EngineStats before = engine.stats();
      for (const RequestOutput& o : engine.step()) {
        if (o.error) std::rethrow_exception(o.error);
        out_tokens += static_cast<int64_t>(o.new_tokens.size());
        if (o.ttft_s > 0) ttft_sum += o.ttft_s;
      }
      const EngineStats after = engine.stats();
      if (after.steps == before.steps) continue;  // nothing was scheduled: no forward ran
      ++steps;
      // Scheduling ahead, a forward is launched when step() returns: reading the GPU time would
      // wait for it (the backend's timer completes the forward first) and undo the overlap. The
      // device then idles between steps for the host's time before and inside the launch.
      if (a.schedule_ahead == 0) gpu_ms += step_gpu_ms(before, after);
#ifdef INFERSCALE_HAS_CUDA
      // The step completed one forward: a decode one's idle time before it (read without waiting).
      if (gpu != nullptr && after.decode_steps != before.decode_steps) idle_ms.push_back(gpu->last_idle_ms());
#endif
    }
    const double wall = ms(t0, Clock::now()) / 1e3;
    // Where a step's wall time goes: the GPU's forward (+ injection) between events, the rest is
    // the host's (scheduling, memory plans, batch building, planning, uploads, outputs) while
    // the GPU waits (memory planned beside a running forward is hidden in its GPU time).
    if (gpu_ms > 0 || (a.schedule_ahead == 1 && a.device == "cuda")) {
      const EngineStats& e = engine.stats();
      const double per = 1e3 / static_cast<double>(steps);
      char gpu_part[96] = "GPU not timed (scheduling ahead)";
      if (gpu_ms > 0)
        std::snprintf(gpu_part, sizeof gpu_part, "%.2f ms GPU (forward + injection), host %.1f%%", gpu_ms / steps,
                      100.0 * (1.0 - gpu_ms / (wall * 1e3)));
      char line[384];
      std::snprintf(line, sizeof line,
                    "%s: %lld forwards, %.2f ms a step wall, %s "
                    "(engine thread, ms a step: %.3f before the launch, %.3f in it, %.3f after the forward); "
                    "%lld memory plans beside a running forward (%d requests), %lld prefix-cache hit tokens\n",
                    label, static_cast<long long>(steps), wall * 1e3 / steps, gpu_part,
                    (e.host_before_seconds - start.host_before_seconds) * per,
                    (e.host_launch_seconds - start.host_launch_seconds) * per,
                    (e.host_after_seconds - start.host_after_seconds) * per,
                    static_cast<long long>(e.memory_plans_overlapped - start.memory_plans_overlapped), a.users,
                    static_cast<long long>(e.prefix_hit_tokens - start.prefix_hit_tokens));
      step_lines += line;
    }
    if (!idle_ms.empty()) {
      std::sort(idle_ms.begin(), idle_ms.end());
      const auto at = [&](double q) { return idle_ms[static_cast<size_t>(q * static_cast<double>(idle_ms.size() - 1))]; };
      char line[256];
      std::snprintf(line, sizeof line,
                    "%s: GPU idle before a decode forward (events, %zu forwards): mean %.1f us, p50 %.1f, p90 %.1f, max %.1f; "
                    "%lld forwards queued behind the one computing\n",
                    label, idle_ms.size(), std::accumulate(idle_ms.begin(), idle_ms.end(), 0.0) / static_cast<double>(idle_ms.size()) * 1e3,
                    at(0.5) * 1e3, at(0.9) * 1e3, idle_ms.back() * 1e3,
                    static_cast<long long>(engine.stats().forwards_queued - start.forwards_queued));
      step_lines += line;
    }
    if (weight_bytes > 0) {
      // Its roofline: every forward reads the weights, and attention the entries it attends; the
      // tokens computed take their FLOPs; each at this card's measured ceiling.
      const EngineStats& e = engine.stats();
      const double entries = static_cast<double>(e.kv_entries_attended - start.kv_entries_attended);
      const double roof_s = (static_cast<double>(steps) * weight_bytes + entries * kv_bytes_per_entry) / (copy_gbs * 1e9) +
                            static_cast<double>(e.tokens_computed - start.tokens_computed) * flops_per_token / (gemm_tflops * 1e12);
      char line[256];
      std::snprintf(line, sizeof line,
                    "%s: roofline %.1f req/s (%lld forwards' weights, %.0f M KV entries read, %lld tokens' FLOPs); "
                    "measured %.1f%% of it\n",
                    label, a.users / roof_s, static_cast<long long>(steps), entries / 1e6,
                    static_cast<long long>(e.tokens_computed - start.tokens_computed), 100.0 * roof_s / wall);
      step_lines += line;
    }
    rps[mi++] = a.users / wall;
    std::printf("| %s | %.2f | %.1f | %.0f | %.1f |\n", label, wall, a.users / wall, out_tokens / wall,
                ttft_sum / a.users * 1e3);
    step_lines += std::string(label) + ": at most " + std::to_string(peak_blocks) + " cache blocks held at once" +
                  (mode == MemoryMode::kInject ? (a.facts_in_place ? " (facts read in place)" : " (facts copied)") : "") +
                  ", at most " + std::to_string(peak_running) + " requests running at once, " +
                  std::to_string(engine.stats().preemptions - start.preemptions) + " preemptions\n";
  }
  if (rps[1] > 0) std::printf("\nThroughput inject / text: %.2fx", rps[0] / rps[1]);
  std::printf("\n%s", step_lines.c_str());
  return 0;
}
