#include "server/metrics.h"

#include <fmt/format.h>

namespace inferscale::server {

void Histogram::record(double v) {
  for (size_t i = 0; i < bounds_.size(); ++i) {
    if (v <= bounds_[i]) {
      ++counts_[i];
      break;
    }
  }
  ++count_;
  sum_ += v;
}

void Histogram::render(std::string& out, const char* name) const {
  int64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[i], cum);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n", name, count_);
  out += fmt::format("{}_sum {}\n", name, sum_);
  out += fmt::format("{}_count {}\n", name, count_);
}

void ServerMetrics::record_request(const std::string& endpoint, const std::string& finish, int64_t prompt_tokens,
                                   int64_t output_tokens, int64_t cached_tokens) {
  std::lock_guard lk(mu_);
  ++requests_[{endpoint, finish}];
  prompt_tokens_ += prompt_tokens;
  output_tokens_ += output_tokens;
  cached_tokens_ += cached_tokens;
}

void ServerMetrics::record_ttft(double seconds) {
  std::lock_guard lk(mu_);
  ttft_.record(seconds);
}

void ServerMetrics::record_memory(const MemoryReport& r) {
  const std::string mode = memory_mode_name(r.mode);
  std::lock_guard lk(mu_);
  ++memory_requests_[mode];
  memory_facts_[mode] += static_cast<int64_t>(r.facts.size());
  memory_encoded_ += r.encoded;
  memory_loaded_ += r.loaded;
  memory_kv_seconds_ += r.kv_ms / 1000.0;
  if (!r.fallback.empty()) ++memory_fallbacks_;
  if (r.mode != MemoryMode::kOff) retrieve_.record(r.retrieve_ms / 1000.0);
}

void ServerMetrics::record_status(int status) {
  std::lock_guard lk(mu_);
  ++statuses_[status];
}

std::string ServerMetrics::render_background(const BackgroundEncoding& b) {
  return fmt::format(
      "# HELP inferscale_memory_background_queued Facts written and waiting for background KV encoding.\n"
      "# TYPE inferscale_memory_background_queued gauge\ninferscale_memory_background_queued {}\n"
      "# HELP inferscale_memory_background_encoded_total Facts whose KV was encoded in the background after a write.\n"
      "# TYPE inferscale_memory_background_encoded_total counter\ninferscale_memory_background_encoded_total {}\n",
      b.queued, b.encoded);
}

namespace {

// The Prometheus text format: a metric's HELP and TYPE lines, then its samples.
void header(std::string& out, const char* name, const char* type, const char* help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}
// A metric with one unlabeled sample.
template <typename V>
void metric(std::string& out, const char* name, const char* type, const char* help, V v) {
  header(out, name, type, help);
  out += fmt::format("{} {}\n", name, v);
}
// A counter with one label: a sample per key of `counts`.
template <typename Counts>
void by_label(std::string& out, const char* name, const char* help, const char* label, const Counts& counts) {
  header(out, name, "counter", help);
  for (const auto& [key, n] : counts) out += fmt::format("{}{{{}=\"{}\"}} {}\n", name, label, key, n);
}

// The engine's counters (EngineStats), forwards by kind and host time by phase.
void render_engine(std::string& out, const AsyncEngineStats& e) {
  metric(out, "inferscale_prefix_cache_hit_tokens_total", "counter", "Prompt tokens served from the prefix cache.", e.engine.prefix_hit_tokens);
  metric(out, "inferscale_injected_tokens_total", "counter", "Tokens whose KV was copied from memory into requests' caches.", e.engine.tokens_injected);
  // Requests with injected facts by how attention reads them: in place from the memory pool, or
  // copied into the request's blocks (the backend cannot read in place, or facts are recomputed).
  const std::pair<const char*, int64_t> reads[] = {{"in_place", e.engine.requests_facts_in_place},
                                                   {"copy", e.engine.requests_facts_copied}};
  by_label(out, "inferscale_memory_fact_reads_total", "Requests with injected facts, by how their KV is read.", "path", reads);
  metric(out, "inferscale_computed_tokens_total", "counter", "Tokens computed by forward passes.", e.engine.tokens_computed);
  metric(out, "inferscale_engine_steps_total", "counter", "Engine steps.", e.engine.steps);
  metric(out, "inferscale_engine_step_errors_total", "counter", "Engine steps that failed (their requests got an error).", e.step_errors);
  // Forwards by kind (EngineStats): decode (every sequence one token), mixed (prefills beside
  // decodes), prefill; and their wall time, launch to end.
  const std::pair<const char*, std::pair<int64_t, double>> kinds[] = {
      {"decode", {e.engine.decode_steps, e.engine.decode_step_seconds}},
      {"mixed", {e.engine.mixed_steps, e.engine.mixed_step_seconds}},
      {"prefill", {e.engine.prefill_steps, e.engine.prefill_step_seconds}}};
  header(out, "inferscale_engine_forwards_total", "counter", "Engine forwards by kind: decode (one token a sequence), mixed "
                                                              "(prefills beside decodes), prefill.");
  for (const auto& [kind, v] : kinds) out += fmt::format("inferscale_engine_forwards_total{{kind=\"{}\"}} {}\n", kind, v.first);
  header(out, "inferscale_engine_forward_seconds_total", "counter", "Wall time of engine forwards by kind, launch to end.");
  for (const auto& [kind, v] : kinds)
    out += fmt::format("inferscale_engine_forward_seconds_total{{kind=\"{}\"}} {:.6f}\n", kind, v.second);
  const std::pair<const char*, double> phases[] = {{"before", e.engine.host_before_seconds},
                                                   {"launch", e.engine.host_launch_seconds},
                                                   {"after", e.engine.host_after_seconds}};
  by_label(out, "inferscale_engine_host_seconds_total",
           "Host time of the engine steps that ran a forward, by phase: before the launch (scheduling, "
           "batch), launch (planning, uploads, launches), after the forward (sampling, outputs).",
           "phase", phases);
  metric(out, "inferscale_preemptions_total", "counter", "Requests preempted for lack of KV blocks.", e.engine.preemptions);
  metric(out, "inferscale_requests_admitted_beside_forward_total", "counter",
         "Requests admitted while a forward ran on the device (their memory planned beside it).",
         e.engine.requests_taken_beside);
  metric(out, "inferscale_memory_plans_beside_forward_total", "counter", "Memory plans asked of the connector while a forward ran.",
         e.engine.memory_plans_overlapped);
}

// The engine's state now: KV blocks and requests.
void render_occupancy(std::string& out, const AsyncEngineStats& e) {
  metric(out, "inferscale_kv_blocks_used", "gauge", "KV cache blocks held by requests.", e.kv_blocks_total - e.kv_blocks_free);
  metric(out, "inferscale_kv_blocks_free", "gauge", "KV cache blocks free (possibly holding a cached prefix).", e.kv_blocks_free);
  metric(out, "inferscale_requests_running", "gauge", "Requests running in the engine.", e.num_running);
  metric(out, "inferscale_requests_waiting", "gauge", "Requests waiting in the engine's scheduler.", e.num_waiting);
  metric(out, "inferscale_requests_pending", "gauge", "Requests submitted and not yet ended (the bounded queue).", e.num_pending);
}

}  // namespace

std::string ServerMetrics::render(const AsyncEngineStats& e) const {
  std::string out;
  std::lock_guard lk(mu_);
  render_requests(out);
  render_engine(out, e);
  header(out, "inferscale_time_to_first_token_seconds", "histogram", "Time from arrival in the engine to the first token.");
  ttft_.render(out, "inferscale_time_to_first_token_seconds");
  render_memory(out);
  render_occupancy(out, e);
  return out;
}

void ServerMetrics::render_requests(std::string& out) const {
  header(out, "inferscale_requests_total", "counter", "Generation requests that ended, by endpoint and finish reason.");
  for (const auto& [key, n] : requests_)
    out += fmt::format("inferscale_requests_total{{endpoint=\"{}\",finish_reason=\"{}\"}} {}\n", key.first, key.second, n);
  by_label(out, "inferscale_http_responses_total", "HTTP responses, by status code.", "code", statuses_);
  metric(out, "inferscale_prompt_tokens_total", "counter", "Prompt tokens of ended requests.", prompt_tokens_);
  metric(out, "inferscale_generation_tokens_total", "counter", "Generated tokens of ended requests.", output_tokens_);
}

void ServerMetrics::render_memory(std::string& out) const {
  by_label(out, "inferscale_memory_requests_total", "Generation requests with a memory object, by mode.", "mode", memory_requests_);
  by_label(out, "inferscale_memory_facts_total", "Facts placed in prompts, by mode (inject: KV copied; text: prefilled).",
           "mode", memory_facts_);
  metric(out, "inferscale_memory_facts_encoded_total", "counter", "Facts whose KV was encoded on demand by requests.", memory_encoded_);
  metric(out, "inferscale_memory_facts_loaded_total", "counter", "Facts whose KV was read from KV files by requests.", memory_loaded_);
  metric(out, "inferscale_memory_kv_seconds_total", "counter", "Time requests spent encoding and loading fact KV.", memory_kv_seconds_);
  metric(out, "inferscale_memory_inject_fallbacks_total", "counter",
         "Inject requests served as text because the facts' KV found no room (memory pool, KV cache, disk).", memory_fallbacks_);
  header(out, "inferscale_memory_retrieval_seconds", "histogram", "Time to retrieve a request's facts (modes inject and text).");
  retrieve_.render(out, "inferscale_memory_retrieval_seconds");
}

}  // namespace inferscale::server
