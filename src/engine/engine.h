// The engine: owns the backend, the block manager, the scheduler and the requests. Single-threaded
// by design (the server runs it on one engine thread); callers add requests and call step().
//
// step(), in five phases (one step at a time; scheduling ahead interleaves them, below):
//   schedule   ask the memory connector about unresolved requests (all of them first where
//              nothing else is ready, or where the backend computes on the host), let it write
//              the KV its plans read from files (MemoryConnector::write_loads; when it did, plan
//              them all again), then the scheduler picks the step's tokens
//   prepare    prepare_step (step_batch.h): the memory injection and one ForwardBatch over every
//              scheduled token, captures and probes included (a probe's rows: ForwardBatch::probes)
//   execute    inject, launch the forward, plan unresolved requests' memory and take arrivals
//              while the device computes (work_beside_forward), wait
//   update     read_rows (sample, score), then per request: append, stream text (stop strings,
//              EOS, max tokens), finish and free; a probe's attention weights kept, and at its
//              last token summed into its ProbeResult (the connector reads it at its next plan)
//   save       the memory connector's captures_finished: the captures this forward completed
//              (their pool entries become servable; KV files are written)
//
// Scheduling a step ahead (EngineOptions::schedule_ahead, step_ahead.cpp): step() completes the
// forward launched before it (N) and leaves the next one (N+1) launched:
//   advance    while N computes: N's scheduler bookkeeping (finish_step), and each request N
//              samples from and that goes on gets a placeholder token (kPendingToken)
//   schedule,  step N+1 over those placeholders, then the memory plans and arrivals beside N
//   prepare    (work_beside_forward); arrivals run from N+2
//   wait       N ends; read_rows; KV read from files is written into the pool (write_loads:
//              none beside a forward), its requests planned from N+2
//   fill       the placeholders get N's sampled ids, in the requests and in N+1's batch
//   launch     N+1 (inject, launch_forward): the device waits only for fill and the launch
//   update     N's outputs (stream, stops, finish); a request that finished while N+1 computes
//              it, or was aborted, is `leaving` and leaves when that forward ends, its rows dropped
//   save       as above
// A step whose rows need logits on the host (logprobs) is not scheduled ahead: sampling there
// draws from the requests' rngs, which must be drawn in step order.
#pragma once
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "engine/block_manager.h"
#include "engine/memory_connector.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "engine/step_batch.h"
#include "engine/text_stream.h"
#include "tokenizer/tokenizer.h"

namespace inferscale {

// Where the engine schedules a step ahead (step_ahead.cpp): while the device computes step N, the
// host plans and prepares step N+1, and launches it as soon as N's sampled tokens are known.
enum class ScheduleAhead {
  kWhereOverlapping,  // on backends that compute beside the host (Backend::overlaps_forward)
  kAlways,            // also on one that computes in launch_forward (the CPU's: tests, no overlap)
  kNever,             // one step at a time
};

struct EngineOptions {
  SchedulerOptions scheduler;
  int32_t max_model_len = 0;  // 0 = the model's max_position_embeddings
  // Background captures: tokens a step gives them sized so that a step of background work alone
  // takes about this long (a request arriving during one waits at most that; the scheduler's caps
  // still bound them), measured on the engine's own background steps; 0 = the fixed caps alone.
  // The CLI's default is 200 ms (serve --background-step-ms): SmolLM2 on two CPU cores took ~0.56 s
  // for the 256-token cap (a request arriving then waited 0.6 s at p50, and its decode steps beside
  // 64 background tokens took 190 ms), an H200 ~8 ms (unchanged). Smaller targets cost the CPU
  // much drain time: its forwards of 2+ tokens cost ~54 ms + 2.2 ms a token (OpenBLAS' small-M
  // GEMM), so 50 ms shrank the steps to 8 tokens and the drain took 4x as long.
  double background_step_seconds = 0;
  // Injected facts are read in place by attention where the backend can (Backend::
  // reads_facts_in_place) and the request recomputes none of them; false: always copied into the
  // request's blocks (the reference path, for comparisons).
  bool facts_in_place = true;
  ScheduleAhead schedule_ahead = ScheduleAhead::kWhereOverlapping;
};

// What one step produced for one request.
struct RequestOutput {
  int64_t id = 0;
  std::vector<int32_t> new_tokens;
  std::string text;                  // newly completed text (stop strings applied)
  bool finished = false;
  FinishReason finish = FinishReason::kNone;
  int32_t num_prompt_tokens = 0;
  int32_t num_output_tokens = 0;
  int32_t num_cached_tokens = 0;     // prompt tokens served from the prefix cache
  int32_t num_injected_tokens = 0;   // prompt tokens whose KV was injected from the memory pool
  double ttft_s = 0;                 // set with the first token
  // sampling.logprobs >= 0: one entry per new token, from the logits it was sampled from.
  std::vector<LogprobEntry> logprobs;
  // sampling.prompt_logprobs >= 0, in the request's first output only: [num_prompt_tokens], entry i
  // scoring prompt token i; empty entries where its predecessor was not computed (Request says when).
  std::vector<std::optional<LogprobEntry>> prompt_logprobs;
  // A request added with memory (add_memory_request) whose prompt resolved in this step: it will
  // be served. The output carries no tokens; it comes before the request's first token.
  bool admitted = false;
  // Set (with finished, kAbort) when a request with memory was rejected at admission: what its
  // memory plan or the checks of its prompt threw (add_request's errors). Nothing was computed.
  std::exception_ptr error;
};

struct EngineStats {
  int64_t steps = 0;
  int64_t tokens_computed = 0;
  int64_t tokens_injected = 0;   // copied into requests' blocks (the copy path)
  // Requests with injected facts by how they are read: in place from the pool, or copied (the
  // backend cannot read in place, or the request recomputes some of its facts' tokens).
  int64_t requests_facts_in_place = 0, requests_facts_copied = 0;
  int64_t prefix_hit_tokens = 0;
  int64_t preemptions = 0;
  int64_t captures = 0;          // capture sequences computed (memory facts encoded in steps)
  int64_t probes = 0;            // probes computed (ProbeSeq: attention-chosen recompute)
  int64_t tokens_captured = 0;   // their tokens (in tokens_computed too)
  int64_t memory_plans_overlapped = 0;  // memory plans asked while a forward ran on the device
  int64_t requests_taken_beside = 0;  // requests the intake added while a forward ran (set_intake)
  // Forwards by what they computed: every sequence one token (decode), one-token sequences beside
  // longer ones (mixed: arrivals' prefills beside running decodes), or none of one token
  // (prefill); with the wall time from the forward's launch to its end (memory planned beside it
  // included).
  int64_t decode_steps = 0, mixed_steps = 0, prefill_steps = 0;
  // KV entries the forwards' attention read: each sequence's entries up to its last token in the
  // forward (cached, injected or read in place), summed over sequences and forwards.
  int64_t kv_entries_attended = 0;
  double decode_step_seconds = 0, mixed_step_seconds = 0, prefill_step_seconds = 0;
  // The host's share of the steps that ran a forward, in three phases on the engine thread: before
  // the launch (memory planned first, scheduling, the injection's launch, the batch), inside the
  // launch (the backend's planning, uploads and kernel or graph launches), and after the forward
  // ended (sampling on the host, outputs, stop checks). The device can only be busy with this
  // step's work during the launch phase and the forward's time above. On a backend that computes
  // on the host (the CPU's), the launch is the whole forward.
  double host_before_seconds = 0, host_launch_seconds = 0, host_after_seconds = 0;
  // Forwards scheduled ahead and queued behind the one computing, their tokens fed from its ids
  // (engine/step_ahead.cpp): the device goes on to them without waiting on the host, so their
  // host phases above count 0.
  int64_t forwards_queued = 0;
};

class Engine {
 public:
  Engine(std::unique_ptr<Backend> backend, std::shared_ptr<const Tokenizer> tokenizer, EngineOptions opts);
  ~Engine();

  // Validates and queues a request; returns its id. Throws kInvalidInput (empty prompt, token ids
  // outside the vocabulary, too long, bad sampling values) or kResource (can never fit the cache).
  // max_tokens 0 is allowed with prompt_logprobs: the request only scores its prompt and finishes
  // (kLength) with one output holding the prompt logprobs and no token. `cache_salt` (0: none)
  // keeps the request's prefix-cache blocks apart from those of requests with another salt.
  int64_t add_request(std::vector<int32_t> prompt, const SamplingParams& sampling,
                      std::optional<InjectedSpan> injected = std::nullopt, uint64_t cache_salt = 0);
  // The memory connector requests with memory go through (memory_connector.h); it must outlive
  // the engine's calls. Set it before the first add_memory_request.
  void set_memory(MemoryConnector* connector) { memory_ = connector; }
  MemoryConnector* memory() const { return memory_; }
  // A request with memory: its prompt comes from the connector's plan at admission
  // (memory_connector.h); the sampling checks run now, the prompt's when it resolves (a failure
  // then is an output's error).
  int64_t add_memory_request(std::shared_ptr<RequestMemory> memory, const SamplingParams& sampling,
                             uint64_t cache_salt = 0);
  void abort(int64_t id);
  // Low-priority capture work (background encoding of written facts): scheduled after every
  // request, in a capped share of the budget (SchedulerOptions::background_tokens_*); promoted to
  // ordinary work as soon as a request's memory waits for a fact being encoded.
  void add_background_capture(CaptureSeq c);
  size_t num_background() const { return scheduler_.num_background(); }
  // Drops every capture and probe not yet computed (the connector hears of them: captures_finished,
  // ProbeResult::kDropped): after
  // a failed step, so work that may have caused it is not retried. Requests waiting for them
  // resolve again.
  void drop_captures();
  std::vector<RequestOutput> step();
  bool has_unfinished() const { return !scheduler_.empty(); }
  // The least EngineOptions::background_step_seconds gives background work a step (and 4x that
  // before its first timing).
  static constexpr int32_t kMinBackgroundTokens = 8;

  // Runs every queued request to completion (CLI, tests, benchmarks).
  std::vector<RequestOutput> run_to_completion();

  Backend& backend() { return *backend_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  BlockManager& blocks() { return blocks_; }
  const Scheduler& scheduler() const { return scheduler_; }
  EngineStats stats() const;
  // A server's intake of requests that arrive while a forward runs (overlapping backends): step() calls it on the engine thread again and again until the device is done,
  // between the memory plans it asks for there. It may only add requests (add_request,
  // add_memory_request): their memory then resolves beside this forward and they run from the
  // next step, not one step later. Returns whether it added any (when not, the thread yields
  // before asking again: it polls the device and the intake for the length of the forward).
  using Intake = std::function<bool()>;
  void set_intake(Intake intake) { intake_ = std::move(intake); }
  int32_t max_model_len() const { return max_model_len_; }
  // The full token list of a live request (tests).
  const Request* find(int64_t id) const;

 private:
  struct Live {
    std::unique_ptr<Request> req;
    std::unique_ptr<TextStream> text;
  };
  void finish(Live& live, FinishReason reason, RequestOutput& out);
  // add_request's checks: of the sampling values alone, and of a prompt with them.
  void check_sampling(const SamplingParams& sp) const;
  void check_prompt(const std::vector<int32_t>& prompt, const SamplingParams& sp,
                    std::optional<InjectedSpan>& injected) const;
  // Whether r's injected facts are read in place or copied (Request::facts_in_place), counted.
  void choose_fact_reads(Request& r);
  Live& add_live(std::unique_ptr<Request> req);
  // Asks the connector to plan unresolved requests, in arrival order from the first not asked since; those
  // still unresolved go to the back. Rejected ones yield an error output. How many are asked:
  //   kAll        every one
  //   kWhileBusy  while the backend's forward runs (at least one): host work beside the device's
  enum class Resolve { kAll, kWhileBusy };
  // Plans resolving_[from ..) (those before were asked in this step already).
  void resolve_memory(std::vector<RequestOutput>& outs, Resolve how, size_t from = 0);
  // The phases of step().
  struct StepClock {
    using Clock = std::chrono::steady_clock;
    Clock::time_point started, launched, returned, ended;  // the step; the forward's launch, return, end
  };
  // write_loads false: while a forward is launched (a pool write would wait for the device).
  std::optional<SchedulerOutput> schedule(std::vector<RequestOutput>& outs, bool write_loads = true);
  // The KV the connector read from files, written into the pool (no forward may be launched), and
  // the plans that waited for it.
  void write_loads(std::vector<RequestOutput>& outs);
  // Scheduling a step ahead (step_ahead.cpp). A forward from its planning to its end: its batch
  // and output stay where the backend reads and fills them (never moved once launched).
  struct Launched {
    SchedulerOutput plan;
    StepBatch batch;
    ForwardOutput fo;
    StepClock clock;
  };
  // A request's token not known yet when the next step is planned: tokens[position].
  struct Pending {
    Request* req;
    int32_t position;
    int32_t row;  // the output row of the forward computing it that samples it
  };
  bool schedules_ahead() const;
  std::vector<RequestOutput> step_ahead();
  // `launched`: a forward is launched meanwhile (the pool is not written).
  std::unique_ptr<Launched> prepare_ahead(std::vector<RequestOutput>& outs, const StepClock& clock, bool launched);
  void start(Launched& f);  // inject, launch; its requests are in flight
  void ended(Launched& f);  // after its wait: its requests are no longer in flight, counted
  std::vector<Pending> advance_ahead(const Launched& f);
  void fill_pending(const std::vector<Pending>& pending, const RowResults& res, Launched* next);
  void feed_pending(const std::vector<Pending>& pending, Launched& next);
  // Removes the requests that are leaving and no longer in flight.
  void remove_left();
  // A finished or aborted request leaves live_ (parked in leaving_ while a forward computes it).
  void retire(int64_t id);
  void remove_now(Request* r);
  // Injection, then the forward's launch (`fo` is filled when it completes), timed in `clock`.
  void launch(const StepBatch& batch, ForwardOutput& fo, StepClock& clock);
  ForwardOutput execute(const SchedulerOutput& plan, const StepBatch& batch, std::vector<RequestOutput>& outs,
                        StepClock& clock);
  void work_beside_forward(std::vector<RequestOutput>& outs);
  void update(const SchedulerOutput& plan, const StepBatch& batch, ForwardOutput& fo, std::vector<RequestOutput>& outs);
  // update's second half: the outputs of rows already read (a leaving request's are dropped).
  void emit_rows(const SchedulerOutput& plan, const StepBatch& batch, RowResults& res, std::vector<RequestOutput>& outs);
  // A capture whose last token went through: it leaves the engine, its job to be saved.
  void finish_capture(Request* r);
  // Each probe's rows of this forward's attention weights (RowResults::probe_mass) into its request.
  void store_probe_rows(const StepBatch& batch, const RowResults& res);
  // A probe whose last token went through: its rows summed into its result; it leaves the engine.
  void finish_probe(Request* r);
  // The save phase: the connector hears of the captures this step finished.
  void save_captures();
  // Removes a live request or a capture from the scheduler; the connector hears of a request with
  // memory leaving. A request a launched forward still computes is marked leaving instead
  // (remove_left removes it once that forward ends).
  void remove(Request* r);
  // EngineStats after a forward: counts, host times, step kind, the background cap.
  void count_step(const SchedulerOutput& plan, const ForwardBatch& fb, const StepClock& clock);
  // EngineStats' step kinds: a finished forward over `fb` that took `seconds`.
  void count_step_kind(const ForwardBatch& fb, double seconds);
  // After a forward of background captures alone (`tokens` in `seconds`): the scheduler's
  // background cap for the next ones (EngineOptions::background_step_seconds).
  void adapt_background(const SchedulerOutput& plan, double seconds);
  void add_capture(CaptureSeq c, const Request* before, bool background = false);
  void add_probe(ProbeSeq p, const Request* before);
  // An internal request (a capture or a probe) of `tokens`, max_tokens 0, queued before `before`.
  Request* add_internal(std::vector<int32_t> tokens, std::optional<InjectedSpan> injected, const Request* before,
                        bool background);
  // One sampled (or, with max_tokens 0, scored-only) position of a request: the output it yields.
  RequestOutput emit(Live& live, std::optional<int32_t> token, std::optional<LogprobEntry> lp);

  std::unique_ptr<Backend> backend_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  EngineOptions opts_;
  int32_t max_model_len_;
  BlockManager blocks_;
  Scheduler scheduler_;
  std::unordered_map<int64_t, Live> live_;
  MemoryConnector* memory_ = nullptr;
  std::vector<int64_t> resolving_;  // requests whose memory has not resolved, in arrival order
  std::vector<int64_t> captures_done_;  // jobs of the captures this step finished (save phase)
  Intake intake_;
  std::unordered_map<int64_t, std::unique_ptr<Request>> internal_;  // captures and probes: not in live_
  std::vector<int32_t> eos_;
  int64_t sample_vocab_ = 0;  // min(model vocab, tokenizer vocab): the ids sampling may return
  int64_t next_id_ = 1;
  EngineStats stats_;
  std::unique_ptr<Launched> ahead_;  // scheduling ahead: the forward launched for the next step()
  std::vector<Live> leaving_;        // finished or aborted while a launched forward computes them
};

}  // namespace inferscale
