// A request inside the engine. There is no separate prefill or decode path: a request has
// `tokens` (prompt, then generated) and `num_computed_tokens` (a prefix whose KV is in the cache).
// Chunked prefill, prefix-cache hits and injected memory are all "tokens already computed".
//
//   tokens:  [ prefix | header | f_k ... f_1 | footer | question | generated ... ]
//                               ^ injected.start    ^ injected.end
// Injected tokens have their KV from the memory pool instead of being computed: read in place by
// attention (facts_in_place) or copied into the request's blocks; the scheduler skips them, and
// num_computed_tokens jumps from injected.start to injected.end.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "engine/logprobs.h"

namespace inferscale {

struct RequestMemory;  // engine/memory_connector.h
struct ProbeResult;    // engine/memory_connector.h

struct SamplingParams {
  float temperature = 1.0f;   // 0 = greedy
  int32_t top_k = 0;          // 0 = off
  float top_p = 1.0f;         // 1 = off
  float min_p = 0.0f;         // 0 = off; else ids below min_p x the top id's probability are dropped
  std::optional<uint64_t> seed;
  int32_t max_tokens = 256;
  std::vector<std::string> stop;         // stop strings: output ends before the first match
  std::vector<int32_t> stop_token_ids;   // besides the tokenizer's eos ids
  bool ignore_eos = false;
  // Log-probabilities (engine/logprobs.h), -1 = none; n in [0, kMaxLogprobs] = each scored token's
  // logprob, rank and the n most likely ids. `logprobs` scores the sampled tokens (RequestOutput::
  // logprobs); `prompt_logprobs` every prompt token after the first (RequestOutput::prompt_logprobs).
  int32_t logprobs = -1;
  int32_t prompt_logprobs = -1;
  // In process only (benchmarks; the HTTP API sets neither), with prompt_logprobs >= 0:
  // prompt_logprobs_tail > 0 scores only the last n prompt tokens (the others' positions need no
  // logits), and prompt_distributions keeps each scored entry's whole log-softmax row
  // (LogprobEntry::distribution) for divergences between two prompts' predictions.
  int32_t prompt_logprobs_tail = 0;
  bool prompt_distributions = false;
};

// Precomputed KV for a token range, copied from memory-pool slots at the range's positions.
//
//   tokens:     ... [ f_k          ][ f_k-1        ] ... [ f_1          ] ...
//   recompute:      [ 1 1 0 0 0 0 0 ][ 1 1 0 0 0 0 ] ... [ 1 1 0 0 0 0 ]     (EPIC-style, r = 2)
// Tokens marked in `recompute` are not injected: the forward computes them in place, attending to
// everything before them (injected or computed), so their KV sees the request's real context.
struct InjectedSpan {
  int32_t start = 0;
  int32_t end = 0;                    // exclusive; tokens after it must remain to be computed
  std::vector<int64_t> pool_slots;    // [end - start] memory-pool slot of each token
  std::vector<uint8_t> recompute;     // [end - start] or empty (nothing recomputed): 1 = computed
  uint64_t cache_key = 0;             // joins the prefix hash of every block from `start` on

  // True when token i's KV comes from the pool.
  bool injects(int32_t i) const {
    return i >= start && i < end && (recompute.empty() || recompute[static_cast<size_t>(i - start)] == 0);
  }
  // Tokens injected from the pool (end - start less the recomputed ones).
  int32_t num_injected() const;
};

enum class RequestStatus { kWaiting, kRunning, kFinished };
enum class FinishReason { kNone, kStop, kLength, kAbort };

const char* finish_reason_name(FinishReason r);

struct Request {
  using Clock = std::chrono::steady_clock;
  // tokens[i] of a request whose token i the forward in flight samples (scheduling a step ahead):
  // filled with the sampled id before any forward reads it.
  static constexpr int32_t kPendingToken = -1;

  int64_t id = 0;
  std::vector<int32_t> tokens;
  int32_t num_prompt_tokens = 0;
  int32_t num_computed_tokens = 0;
  SamplingParams sampling;
  std::optional<InjectedSpan> injected;
  bool injection_done = false;       // reset on preemption: the blocks are gone
  // The injected span is read in place from its pool slots by attention (ForwardBatch::fact_*),
  // not copied: its blocks wholly inside [injected.start, injected.end) are ForwardBatch::kNoBlock
  // (no cache block), the two it shares with computed tokens are the request's own. Set when the
  // prompt is known, where the backend reads facts in place and nothing is recomputed.
  bool facts_in_place = false;
  // Joins the prefix-cache hash of every block (prefix_hash.h): requests with other salts never
  // share cached blocks (the server salts with the tenant, as vLLM's cache_salt). 0: no salt.
  uint64_t cache_salt = 0;

  RequestStatus status = RequestStatus::kWaiting;
  FinishReason finish = FinishReason::kNone;
  std::vector<int32_t> block_table;  // block ids; entry i holds tokens [i * bs, (i + 1) * bs) (or kNoBlock: facts_in_place)
  int32_t num_published_blocks = 0;  // full blocks already offered to the prefix cache
  uint64_t last_block_hash = 0;      // chain hash of block num_published_blocks - 1
  int32_t num_cached_tokens = 0;     // prefix-cache hit at the latest admission
  int32_t num_injected_tokens = 0;   // KV copied from the memory pool at the latest admission
  int32_t num_preemptions = 0;
  // sampling.prompt_logprobs >= 0: entry i scores prompt token i from the logits at position i - 1,
  // filled as chunks compute those positions and handed out with the first output. Entries stay
  // empty where position i - 1 is never computed (i = 0, and right after an injected position).
  // An entry is computed once: a preempted request recomputes only the ones it still lacks.
  std::vector<std::optional<LogprobEntry>> prompt_logprobs;  // [num_prompt_tokens] until sent
  bool prompt_logprobs_sent = false;
  std::mt19937_64 rng;

  // A request with memory (engine/memory_connector.h): until the connector's plan is ready,
  // `tokens` is empty and the scheduler does not admit it. The connector hears when the engine
  // removes the request (request_finished): its pins belong to the request.
  std::shared_ptr<RequestMemory> memory;
  bool memory_ready = true;
  // A capture (internal prefill work: CaptureSeq): [num_tokens] pool slot keeping each token's
  // pre-RoPE K/V, or -1. Never sampled, never offered to or served from the prefix cache.
  std::vector<int64_t> capture_slots;
  int64_t capture_job = 0;  // CaptureSeq::job
  // Low-priority capture work (background encoding): scheduled only in the budget the step's
  // other work leaves, capped (SchedulerOptions::background_tokens_*), and preempted first.
  bool background = false;
  // A probe (internal prefill work: ProbeSeq): the prompt computed with every injected token, and
  // the attention weights its rows from probe_from on pay to each injected token kept in
  // probe_rows [num_prompt_tokens - probe_from][injected span], each row as its latest forward
  // measured it (a preempted probe measures again). Never sampled, never offered to or served from
  // the prefix cache; `probe` gets their sum when the last row is computed.
  std::shared_ptr<ProbeResult> probe;
  int32_t probe_from = 0;
  int32_t probe_first_layer = 0;  // ProbeSeq::first_layer
  std::vector<float> probe_rows;

  // Scheduling a step ahead (Engine, EngineOptions::schedule_ahead): how many launched forwards
  // that have not ended compute this request (0-2; its blocks, its pins and *this stay until they
  // end), and `leaving`: the request finished or was aborted meanwhile, and leaves once they end
  // (the scheduler never plans it again; its rows in them are dropped).
  int32_t in_flight = 0;
  bool leaving = false;

  Clock::time_point arrival;
  std::optional<Clock::time_point> first_token_time;

  int32_t num_tokens() const { return static_cast<int32_t>(tokens.size()); }
  int32_t num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
  bool is_capture() const { return !capture_slots.empty(); }
  bool is_probe() const { return probe != nullptr; }
  // Internal work the connector asked for (a capture or a probe), not a client's request.
  bool is_internal() const { return is_capture() || is_probe(); }
  bool is_injected(int32_t i) const { return injected && injected->injects(i); }
  // The prompt's logprobs are still to be computed: its prefix must not come from the prefix cache
  // (a cached position has no logits), as in vLLM.
  bool wants_prompt_logprobs() const { return sampling.prompt_logprobs >= 0 && !prompt_logprobs_sent; }
  // The row at position p scores prompt token p + 1 and that entry is still missing.
  bool needs_prompt_row(int32_t p) const {
    const int32_t tail = sampling.prompt_logprobs_tail;
    return wants_prompt_logprobs() && p + 1 < num_prompt_tokens && (tail <= 0 || p + 1 >= num_prompt_tokens - tail) &&
           !prompt_logprobs[static_cast<size_t>(p + 1)];
  }
  // Tokens from num_computed_tokens on that still need a forward (injected ones do not).
  int32_t num_remaining() const;
  // Block b of the table holds no entry of the request's own: all its positions are facts read
  // in place.
  bool is_fact_hole(int32_t b, int32_t block_size) const {
    return facts_in_place && b * block_size >= injected->start && (b + 1) * block_size <= injected->end;
  }
};

}  // namespace inferscale
