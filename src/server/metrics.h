// Server metrics in the Prometheus text format (GET /metrics).
//
// Counters are updated by HTTP threads when a request ends (ServerMetrics::record_*), gauges come
// from the AsyncEngine's stats snapshot at scrape time. All methods are thread-safe.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "server/async_engine.h"
#include "server/memory_report.h"

namespace inferscale::server {

// A Prometheus histogram over fixed upper bounds (+Inf implicit). Not thread-safe on its own:
// ServerMetrics guards its histograms with its mutex.
class Histogram {
 public:
  explicit Histogram(std::span<const double> bounds) : bounds_(bounds.begin(), bounds.end()), counts_(bounds.size()) {}
  void record(double v);
  // The _bucket (cumulative), _sum and _count lines of `name` (HELP/TYPE are the caller's).
  void render(std::string& out, const char* name) const;

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bucket, not cumulative
  int64_t count_ = 0;
  double sum_ = 0;
};

class ServerMetrics {
 public:
  // Upper bounds (seconds) of the time-to-first-token histogram buckets; +Inf is implicit.
  static constexpr std::array<double, 14> kTtftBuckets = {0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
                                                          0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0};
  // Upper bounds (seconds) of the memory retrieval-time histogram.
  static constexpr std::array<double, 10> kRetrieveBuckets = {0.0001, 0.00025, 0.0005, 0.001, 0.0025,
                                                              0.005,  0.01,    0.025,  0.05,  0.1};

  ServerMetrics() : ttft_(kTtftBuckets), retrieve_(kRetrieveBuckets) {}

  // A generation request that ended: endpoint "chat" | "completion", finish reason
  // ("stop", "length", "cancelled", "error").
  void record_request(const std::string& endpoint, const std::string& finish, int64_t prompt_tokens,
                      int64_t output_tokens, int64_t cached_tokens);
  void record_ttft(double seconds);
  // A request with a memory object, once the engine accepted it (its report is complete).
  void record_memory(const MemoryReport& r);
  // Any HTTP response, by status (errors included).
  void record_status(int status);

  // The full exposition text, gauges taken from `engine`.
  std::string render(const AsyncEngineStats& engine) const;
  // The background-encoding samples (servers with memory).
  static std::string render_background(const BackgroundEncoding& b);

 private:
  // render()'s sections over this object's counters; mu_ held.
  void render_requests(std::string& out) const;
  void render_memory(std::string& out) const;
  mutable std::mutex mu_;
  std::map<std::pair<std::string, std::string>, int64_t> requests_;  // (endpoint, finish) -> count
  std::map<int, int64_t> statuses_;
  int64_t prompt_tokens_ = 0;
  int64_t output_tokens_ = 0;
  int64_t cached_tokens_ = 0;
  Histogram ttft_;
  // Memory, by mode name ("inject", "text", "off").
  std::map<std::string, int64_t> memory_requests_;
  std::map<std::string, int64_t> memory_facts_;  // facts placed in prompts
  int64_t memory_fallbacks_ = 0;                 // inject served as text
  int64_t memory_encoded_ = 0;
  int64_t memory_loaded_ = 0;
  double memory_kv_seconds_ = 0;
  Histogram retrieve_;  // seconds; only requests that retrieved (mode inject/text)
};

}  // namespace inferscale::server
