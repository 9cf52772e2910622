// Server metrics in the Prometheus text format (GET /metrics).
//
// Counters are updated by HTTP threads when a request ends (ServerMetrics::record_*), gauges come
// from the AsyncEngine's stats snapshot at scrape time. All methods are thread-safe.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "server/async_engine.h"

namespace inferscale::server {

class ServerMetrics {
 public:
  // Upper bounds (seconds) of the time-to-first-token histogram buckets; +Inf is implicit.
  static constexpr std::array<double, 14> kTtftBuckets = {0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
                                                          0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0};

  // A generation request that ended: endpoint "chat" | "completion", finish reason
  // ("stop", "length", "cancelled", "error").
  void record_request(const std::string& endpoint, const std::string& finish, int64_t prompt_tokens,
                      int64_t output_tokens, int64_t cached_tokens);
  void record_ttft(double seconds);
  // Any HTTP response, by status (errors included).
  void record_status(int status);

  // The full exposition text, gauges taken from `engine`.
  std::string render(const AsyncEngineStats& engine) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, std::string>, int64_t> requests_;  // (endpoint, finish) -> count
  std::map<int, int64_t> statuses_;
  int64_t prompt_tokens_ = 0;
  int64_t output_tokens_ = 0;
  int64_t cached_tokens_ = 0;
  std::array<int64_t, kTtftBuckets.size()> ttft_counts_{};  // per bucket, not cumulative
  int64_t ttft_count_ = 0;
  double ttft_sum_ = 0;
};

}  // namespace inferscale::server
