#include "server/metrics.h"

#include <fmt/format.h>

namespace inferscale::server {

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
  for (size_t i = 0; i < kTtftBuckets.size(); ++i) {
    if (seconds <= kTtftBuckets[i]) {
      ++ttft_counts_[i];
      break;
    }
  }
  ++ttft_count_;
  ttft_sum_ += seconds;
}

void ServerMetrics::record_status(int status) {
  std::lock_guard lk(mu_);
  ++statuses_[status];
}

std::string ServerMetrics::render(const AsyncEngineStats& e) const {
  std::string out;
  auto header = [&](const char* name, const char* type, const char* help) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  };
  auto sample = [&](const char* name, int64_t v) { out += fmt::format("{} {}\n", name, v); };

  std::lock_guard lk(mu_);
  header("inferscale_requests_total", "counter", "Generation requests that ended, by endpoint and finish reason.");
  for (const auto& [key, n] : requests_)
    out += fmt::format("inferscale_requests_total{{endpoint=\"{}\",finish_reason=\"{}\"}} {}\n", key.first, key.second, n);
  header("inferscale_http_responses_total", "counter", "HTTP responses, by status code.");
  for (const auto& [status, n] : statuses_) out += fmt::format("inferscale_http_responses_total{{code=\"{}\"}} {}\n", status, n);
  header("inferscale_prompt_tokens_total", "counter", "Prompt tokens of ended requests.");
  sample("inferscale_prompt_tokens_total", prompt_tokens_);
  header("inferscale_generation_tokens_total", "counter", "Generated tokens of ended requests.");
  sample("inferscale_generation_tokens_total", output_tokens_);
  header("inferscale_prefix_cache_hit_tokens_total", "counter", "Prompt tokens served from the prefix cache.");
  sample("inferscale_prefix_cache_hit_tokens_total", e.engine.prefix_hit_tokens);
  header("inferscale_injected_tokens_total", "counter", "Tokens whose KV was injected from memory.");
  sample("inferscale_injected_tokens_total", e.engine.tokens_injected);
  header("inferscale_computed_tokens_total", "counter", "Tokens computed by forward passes.");
  sample("inferscale_computed_tokens_total", e.engine.tokens_computed);
  header("inferscale_engine_steps_total", "counter", "Engine steps.");
  sample("inferscale_engine_steps_total", e.engine.steps);
  header("inferscale_engine_step_errors_total", "counter", "Engine steps that failed (their requests got an error).");
  sample("inferscale_engine_step_errors_total", e.step_errors);
  header("inferscale_preemptions_total", "counter", "Requests preempted for lack of KV blocks.");
  sample("inferscale_preemptions_total", e.engine.preemptions);

  header("inferscale_time_to_first_token_seconds", "histogram", "Time from arrival in the engine to the first token.");
  int64_t cum = 0;
  for (size_t i = 0; i < kTtftBuckets.size(); ++i) {
    cum += ttft_counts_[i];
    out += fmt::format("inferscale_time_to_first_token_seconds_bucket{{le=\"{}\"}} {}\n", kTtftBuckets[i], cum);
  }
  out += fmt::format("inferscale_time_to_first_token_seconds_bucket{{le=\"+Inf\"}} {}\n", ttft_count_);
  out += fmt::format("inferscale_time_to_first_token_seconds_sum {}\n", ttft_sum_);
  out += fmt::format("inferscale_time_to_first_token_seconds_count {}\n", ttft_count_);

  header("inferscale_kv_blocks_used", "gauge", "KV cache blocks held by requests.");
  sample("inferscale_kv_blocks_used", e.kv_blocks_total - e.kv_blocks_free);
  header("inferscale_kv_blocks_free", "gauge", "KV cache blocks free (possibly holding a cached prefix).");
  sample("inferscale_kv_blocks_free", e.kv_blocks_free);
  header("inferscale_requests_running", "gauge", "Requests running in the engine.");
  sample("inferscale_requests_running", e.num_running);
  header("inferscale_requests_waiting", "gauge", "Requests waiting in the engine's scheduler.");
  sample("inferscale_requests_waiting", e.num_waiting);
  header("inferscale_requests_pending", "gauge", "Requests submitted and not yet ended (the bounded queue).");
  sample("inferscale_requests_pending", e.num_pending);
  return out;
}

}  // namespace inferscale::server
