#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <exception>
#include <thread>

#include "engine/sampler.h"
#include "engine/step_batch.h"
#include "util/check.h"

namespace inferscale {

Engine::Engine(std::unique_ptr<Backend> backend, std::shared_ptr<const Tokenizer> tokenizer, EngineOptions opts)
    : backend_(std::move(backend)),
      tokenizer_(std::move(tokenizer)),
      opts_(opts),
      max_model_len_(opts.max_model_len > 0 ? opts.max_model_len
                                            : static_cast<int32_t>(backend_->config().max_position_embeddings)),
      blocks_(backend_->num_cache_blocks(), backend_->block_size()),
      scheduler_(blocks_, opts.scheduler) {
  IS_CHECK(tokenizer_ != nullptr, "engine needs a tokenizer");
  sample_vocab_ = std::min<int64_t>(backend_->config().vocab_size, tokenizer_->vocab_size());
  IS_REQUIRE(sample_vocab_ > 0, kInvalidInput, "empty vocabulary");
  eos_ = tokenizer_->eos_ids();
  for (int32_t id : backend_->config().eos_token_ids)
    if (std::find(eos_.begin(), eos_.end(), id) == eos_.end()) eos_.push_back(id);
  IS_REQUIRE(opts_.background_step_seconds >= 0, kInvalidInput, "background step time must be >= 0, got {}",
             opts_.background_step_seconds);
  // Until a background step has been timed, a few tokens a step (adapt_background grows them).
  if (opts_.background_step_seconds > 0) scheduler_.set_background_cap(kMinBackgroundTokens * 4);
}

Engine::~Engine() {
  if (ahead_) backend_->wait_forward();  // its batch and output live here
}

void Engine::check_sampling(const SamplingParams& sp) const {
  IS_REQUIRE(sp.logprobs >= -1 && sp.logprobs <= kMaxLogprobs, kInvalidInput, "logprobs must be in [-1, {}], got {}",
             kMaxLogprobs, sp.logprobs);
  IS_REQUIRE(sp.prompt_logprobs >= -1 && sp.prompt_logprobs <= kMaxLogprobs, kInvalidInput,
             "prompt_logprobs must be in [-1, {}], got {}", kMaxLogprobs, sp.prompt_logprobs);
  IS_REQUIRE(sp.prompt_logprobs_tail >= 0, kInvalidInput, "prompt_logprobs_tail must be >= 0, got {}",
             sp.prompt_logprobs_tail);
  IS_REQUIRE(sp.max_tokens >= 1 || (sp.max_tokens == 0 && sp.prompt_logprobs >= 0), kInvalidInput,
             "max_tokens must be at least 1 (0 only to score the prompt, with prompt_logprobs), got {}", sp.max_tokens);
  IS_REQUIRE(sp.temperature >= 0.0f, kInvalidInput, "temperature must be >= 0, got {}", sp.temperature);
  IS_REQUIRE(sp.top_p > 0.0f && sp.top_p <= 1.0f, kInvalidInput, "top_p must be in (0, 1], got {}", sp.top_p);
  IS_REQUIRE(sp.top_k >= 0, kInvalidInput, "top_k must be >= 0, got {}", sp.top_k);
  IS_REQUIRE(sp.min_p >= 0.0f && sp.min_p <= 1.0f, kInvalidInput, "min_p must be in [0, 1], got {}", sp.min_p);
}

void Engine::check_prompt(const std::vector<int32_t>& prompt, const SamplingParams& sp,
                          std::optional<InjectedSpan>& injected) const {
  const ModelConfig& cfg = backend_->config();
  IS_REQUIRE(!prompt.empty(), kInvalidInput, "the prompt is empty (no tokens)");
  for (int32_t id : prompt)
    IS_REQUIRE(id >= 0 && id < cfg.vocab_size, kInvalidInput, "token id {} is outside the vocabulary of {}", id, cfg.vocab_size);
  check_sampling(sp);
  if (sp.prompt_logprobs >= 0)
    for (int32_t id : prompt)
      IS_REQUIRE(id < sample_vocab_, kInvalidInput, "token id {} cannot be scored: the tokenizer knows {} ids", id, sample_vocab_);
  const int64_t n = static_cast<int64_t>(prompt.size());
  IS_REQUIRE(n < max_model_len_, kInvalidInput, "the prompt has {} tokens; this model takes at most {} in all", n, max_model_len_);
  if (injected) {
    const InjectedSpan& s = *injected;
    IS_REQUIRE(s.start >= 0 && s.start <= s.end && s.end < n, kInvalidInput,
               "injected span [{}, {}) must lie inside the prompt and leave its last token to compute", s.start, s.end);
    IS_REQUIRE(static_cast<int64_t>(s.pool_slots.size()) == s.end - s.start, kInvalidInput,
               "injected span has {} tokens but {} pool slots", s.end - s.start, s.pool_slots.size());
    // Once here, not in every step's batch: forward batches hold pool slots as int32.
    for (const int64_t slot : s.pool_slots)
      IS_REQUIRE(slot >= 0 && slot <= INT32_MAX, kInvalidInput, "pool slot {} of the injected span out of range", slot);
    IS_REQUIRE(s.recompute.empty() || static_cast<int64_t>(s.recompute.size()) == s.end - s.start, kInvalidInput,
               "injected span has {} tokens but a recompute mask of {}", s.end - s.start, s.recompute.size());
    if (s.start == s.end) injected.reset();
  }
  const int64_t total = std::min<int64_t>(max_model_len_, n + sp.max_tokens);
  IS_REQUIRE(scheduler_.blocks_for(total) <= blocks_.num_blocks(), kResource,
             "the request needs up to {} KV blocks but the cache holds {}", scheduler_.blocks_for(total), blocks_.num_blocks());
}

namespace {

// A request's prompt, once known (at add_request, or when its memory resolves).
void set_prompt(Request& r, std::vector<int32_t> prompt, std::optional<InjectedSpan> injected) {
  r.tokens = std::move(prompt);
  r.num_prompt_tokens = r.num_tokens();
  r.injected = std::move(injected);
  if (r.sampling.prompt_logprobs >= 0) r.prompt_logprobs.assign(static_cast<size_t>(r.num_prompt_tokens), std::nullopt);
}

std::unique_ptr<Request> new_request(int64_t id, const SamplingParams& sp, uint64_t cache_salt) {
  auto req = std::make_unique<Request>();
  req->id = id;
  req->sampling = sp;
  req->cache_salt = cache_salt;
  req->rng.seed(sp.seed ? *sp.seed : std::random_device{}());
  req->arrival = Request::Clock::now();
  return req;
}

}  // namespace

void Engine::choose_fact_reads(Request& r) {
  if (!r.injected) return;
  const std::vector<uint8_t>& rc = r.injected->recompute;
  const bool recomputes = std::find(rc.begin(), rc.end(), uint8_t{1}) != rc.end();
  r.facts_in_place = opts_.facts_in_place && backend_->reads_facts_in_place() && !recomputes;
  ++(r.facts_in_place ? stats_.requests_facts_in_place : stats_.requests_facts_copied);
}

Engine::Live& Engine::add_live(std::unique_ptr<Request> req) {
  Live live{std::move(req), nullptr};
  live.text = std::make_unique<TextStream>(*tokenizer_, live.req->sampling.stop);
  const int64_t id = live.req->id;
  scheduler_.add(live.req.get());
  return live_.emplace(id, std::move(live)).first->second;
}

int64_t Engine::add_request(std::vector<int32_t> prompt, const SamplingParams& sp, std::optional<InjectedSpan> injected,
                            uint64_t cache_salt) {
  check_prompt(prompt, sp, injected);
  auto req = new_request(next_id_++, sp, cache_salt);
  set_prompt(*req, std::move(prompt), std::move(injected));
  choose_fact_reads(*req);
  return add_live(std::move(req)).req->id;
}

int64_t Engine::add_memory_request(std::shared_ptr<RequestMemory> memory, const SamplingParams& sp, uint64_t cache_salt) {
  IS_CHECK(memory != nullptr, "add_memory_request without its memory");
  IS_CHECK(memory_ != nullptr, "add_memory_request on an engine without a memory connector");
  check_sampling(sp);
  auto req = new_request(next_id_++, sp, cache_salt);
  req->memory = std::move(memory);
  req->memory_ready = false;
  const int64_t id = add_live(std::move(req)).req->id;
  resolving_.push_back(id);
  return id;
}

void Engine::add_background_capture(CaptureSeq c) { add_capture(std::move(c), nullptr, true); }

void Engine::add_capture(CaptureSeq c, const Request* before, bool background) {
  IS_CHECK(!c.tokens.empty() && c.capture_slots.size() == c.tokens.size(), "capture of {} tokens with {} slots",
           c.tokens.size(), c.capture_slots.size());
  Request* r = add_internal(std::move(c.tokens), std::nullopt, before, background);
  r->capture_slots = std::move(c.capture_slots);
  r->capture_job = c.job;
}

void Engine::add_probe(ProbeSeq p, const Request* before) {
  const InjectedSpan& s = p.injected;
  const int32_t n = static_cast<int32_t>(p.tokens.size());
  IS_CHECK(p.result != nullptr && s.recompute.empty() && s.start < s.end && s.end <= p.score_from && p.score_from < n &&
               static_cast<int32_t>(s.pool_slots.size()) == s.end - s.start && p.first_layer >= 0 &&
               p.first_layer < backend_->config().num_layers,
           "probe of {} tokens: span [{}, {}), rows from {}, layers from {}", n, s.start, s.end, p.score_from,
           p.first_layer);
  const int32_t span = s.end - s.start;
  Request* r = add_internal(std::move(p.tokens), std::move(p.injected), before, false);
  r->probe = std::move(p.result);
  r->probe_from = p.score_from;
  r->probe_first_layer = p.first_layer;
  r->probe_rows.assign(static_cast<size_t>(n - p.score_from) * static_cast<size_t>(span), 0.0f);
}

Request* Engine::add_internal(std::vector<int32_t> tokens, std::optional<InjectedSpan> injected, const Request* before,
                              bool background) {
  const ModelConfig& cfg = backend_->config();
  for (int32_t id : tokens)
    IS_CHECK(id >= 0 && id < cfg.vocab_size, "internal token id {} outside the vocabulary of {}", id, cfg.vocab_size);
  IS_REQUIRE(scheduler_.blocks_for(static_cast<int64_t>(tokens.size())) <= blocks_.num_blocks(), kResource,
             "internal prefill work of {} tokens needs more KV blocks than the cache holds ({})", tokens.size(),
             blocks_.num_blocks());
  SamplingParams sp;
  sp.max_tokens = 0;
  auto req = new_request(next_id_++, sp, 0);
  set_prompt(*req, std::move(tokens), std::move(injected));
  req->background = background;
  Request* r = req.get();
  internal_.emplace(r->id, std::move(req));
  scheduler_.add(r, before);
  return r;
}

void Engine::resolve_memory(std::vector<RequestOutput>& outs, Resolve how, size_t from) {
  std::vector<int64_t> still(resolving_.begin(), resolving_.begin() + static_cast<std::ptrdiff_t>(from));
  bool waits = false;
  size_t i = from;
  for (; i < resolving_.size(); ++i) {
    if (i > from && how == Resolve::kWhileBusy && !backend_->forward_running()) break;
    if (how == Resolve::kWhileBusy) ++stats_.memory_plans_overlapped;
    auto it = live_.find(resolving_[i]);
    if (it == live_.end()) continue;  // aborted meanwhile
    Request* r = it->second.req.get();
    try {
      MemoryPlan plan = memory_->plan(*r->memory);
      if (plan.state == MemoryPlan::State::kReady) {
        if (plan.max_tokens) r->sampling.max_tokens = *plan.max_tokens;
        check_prompt(plan.prompt, r->sampling, plan.injected);
        set_prompt(*r, std::move(plan.prompt), std::move(plan.injected));
        choose_fact_reads(*r);
        r->memory_ready = true;
        RequestOutput o;
        o.id = r->id;
        o.admitted = true;
        o.num_prompt_tokens = r->num_prompt_tokens;
        outs.push_back(std::move(o));
        continue;
      }
      for (CaptureSeq& c : plan.encode) add_capture(std::move(c), r);
      if (plan.probe) add_probe(std::move(*plan.probe), r);
      waits = waits || plan.state == MemoryPlan::State::kWait;
      still.push_back(r->id);
    } catch (...) {
      RequestOutput o;
      o.id = r->id;
      o.finished = true;
      o.finish = FinishReason::kAbort;
      o.error = std::current_exception();
      r->finish = FinishReason::kAbort;
      remove(r);
      live_.erase(it);
      outs.push_back(std::move(o));
    }
  }
  // Those not asked keep their turn, ahead of those asked and still unresolved.
  still.insert(still.begin() + static_cast<std::ptrdiff_t>(from), resolving_.begin() + static_cast<std::ptrdiff_t>(i),
               resolving_.end());
  resolving_ = std::move(still);
  // A request waiting for facts that may be background work: that work is no longer low priority.
  if (waits && scheduler_.num_background() > 0) scheduler_.promote_background();
}

void Engine::drop_captures() {
  auto internal = std::move(internal_);
  internal_.clear();
  std::vector<int64_t> dropped;
  for (auto& [id, req] : internal) {
    scheduler_.remove(req.get());
    if (req->is_probe()) req->probe->state = ProbeResult::State::kDropped;
    else dropped.push_back(req->capture_job);
  }
  if (memory_ && !dropped.empty()) memory_->captures_finished({}, dropped);
}

void Engine::abort(int64_t id) {
  auto it = live_.find(id);
  if (it == live_.end()) return;
  remove(it->second.req.get());
  retire(id);
}

void Engine::remove(Request* r) {
  if (r->in_flight > 0) {
    r->leaving = true;
    return;
  }
  remove_now(r);
}

void Engine::remove_now(Request* r) {
  scheduler_.remove(r);
  if (!r->memory) return;
  std::shared_ptr<RequestMemory> m = std::move(r->memory);
  memory_->request_finished(*m);
}

const Request* Engine::find(int64_t id) const {
  auto it = live_.find(id);
  return it == live_.end() ? nullptr : it->second.req.get();
}

EngineStats Engine::stats() const {
  EngineStats s = stats_;
  s.preemptions = scheduler_.num_preemptions();
  return s;
}

void Engine::finish(Live& live, FinishReason reason, RequestOutput& out) {
  if (reason != FinishReason::kStop || !live.text->stopped()) out.text += live.text->finish();
  out.finished = true;
  out.finish = reason;
  live.req->finish = reason;
  remove(live.req.get());
}

RequestOutput Engine::emit(Live& live, std::optional<int32_t> token, std::optional<LogprobEntry> lp) {
  Request* r = live.req.get();
  RequestOutput o;
  o.id = r->id;
  if (!r->first_token_time) {
    r->first_token_time = Request::Clock::now();
    o.ttft_s = std::chrono::duration<double>(*r->first_token_time - r->arrival).count();
    stats_.prefix_hit_tokens += r->num_cached_tokens;
  }
  if (r->wants_prompt_logprobs()) {  // complete now: the last prompt position was just computed
    o.prompt_logprobs = std::move(r->prompt_logprobs);
    r->prompt_logprobs = {};
    r->prompt_logprobs_sent = true;
  }
  o.num_prompt_tokens = r->num_prompt_tokens;
  o.num_cached_tokens = r->num_cached_tokens;
  o.num_injected_tokens = r->num_injected_tokens;
  if (!token) {  // max_tokens 0: the prompt is scored, nothing is generated
    finish(live, FinishReason::kLength, o);
    return o;
  }
  const int32_t tok = *token;
  r->tokens.push_back(tok);
  o.new_tokens.push_back(tok);
  if (lp) o.logprobs.push_back(std::move(*lp));
  const bool is_eos = !r->sampling.ignore_eos &&
                      (std::find(eos_.begin(), eos_.end(), tok) != eos_.end() ||
                       std::find(r->sampling.stop_token_ids.begin(), r->sampling.stop_token_ids.end(), tok) !=
                           r->sampling.stop_token_ids.end());
  if (!is_eos) o.text = live.text->push(tok);
  o.num_output_tokens = r->num_output_tokens();
  if (is_eos || live.text->stopped()) {
    finish(live, FinishReason::kStop, o);
  } else if (r->num_output_tokens() >= r->sampling.max_tokens || r->num_tokens() >= max_model_len_) {
    finish(live, FinishReason::kLength, o);
  }
  return o;
}

// A step in five phases (engine.h); each forward's host time is split around its launch.
std::vector<RequestOutput> Engine::step() {
  if (schedules_ahead()) return step_ahead();
  StepClock clock;
  clock.started = StepClock::Clock::now();
  std::vector<RequestOutput> outs;
  std::optional<SchedulerOutput> plan = schedule(outs);
  if (!plan) return outs;
  StepBatch batch = prepare_step(*plan, blocks_.block_size(), sample_vocab_);
  ForwardOutput fo = execute(*plan, batch, outs, clock);
  update(*plan, batch, fo, outs);
  save_captures();
  stats_.host_after_seconds += std::chrono::duration<double>(StepClock::Clock::now() - clock.ended).count();
  return outs;
}

// Memory plans: a backend that overlaps its forward with the host gets them asked for while the
// device computes (execute), except when nothing else is ready to run: an idle engine resolves
// every waiting request first, so that a burst starts as one batch (on the H200, staggering a
// 100-request burst behind single-request forwards cost 3 steps more than the serial resolution
// it hid; bench_memory_serving's throughput run shows it).
std::optional<SchedulerOutput> Engine::schedule(std::vector<RequestOutput>& outs, bool write_loads) {
  const bool overlap = backend_->overlaps_forward();
  const bool before = !resolving_.empty() && (!overlap || !scheduler_.has_ready_work());
  if (before) resolve_memory(outs, Resolve::kAll);
  if (write_loads) this->write_loads(outs);
  SchedulerOutput plan = scheduler_.schedule();
  if (!plan.seqs.empty()) return plan;
  if (!before && !resolving_.empty()) resolve_memory(outs, Resolve::kAll);  // no forward to overlap
  return std::nullopt;
}

void Engine::write_loads(std::vector<RequestOutput>& outs) {
  if (memory_ && memory_->write_loads()) resolve_memory(outs, Resolve::kAll);  // their facts are resident now
}

void Engine::launch(const StepBatch& batch, ForwardOutput& fo, StepClock& clock) {
  if (!batch.inject.src_slots.empty()) backend_->inject(batch.inject);
  stats_.tokens_injected += static_cast<int64_t>(batch.inject.src_slots.size());
  clock.launched = StepClock::Clock::now();
  backend_->launch_forward(batch.forward, fo);
  clock.returned = StepClock::Clock::now();
}

ForwardOutput Engine::execute(const SchedulerOutput& plan, const StepBatch& batch, std::vector<RequestOutput>& outs,
                              StepClock& clock) {
  ForwardOutput fo;
  launch(batch, fo, clock);
  if (backend_->overlaps_forward()) {
    try {
      work_beside_forward(outs);
    } catch (...) {
      backend_->wait_forward();
      throw;
    }
  }
  backend_->wait_forward();
  scheduler_.finish_step(plan);
  clock.ended = StepClock::Clock::now();
  count_step(plan, batch.forward, clock);
  return fo;
}

// While the device computes: the plans of requests whose memory is unresolved, and the requests
// the intake adds meanwhile with theirs; all are scheduled from the next step on. Between
// schedule() and finish_step() this only adds waiting work (requests, captures) or removes
// unscheduled requests (rejected by their plan).
void Engine::work_beside_forward(std::vector<RequestOutput>& outs) {
  size_t asked = 0;  // resolving_[0, asked) were asked beside this forward (each once a step)
  for (;;) {
    if (resolving_.size() > asked) {
      resolve_memory(outs, Resolve::kWhileBusy, asked);
      asked = resolving_.size();  // all of them, unless the device is done (then the loop ends)
    }
    if (!intake_ || !backend_->forward_running()) return;
    const size_t live_before = live_.size();  // the intake only adds live requests
    const bool added = intake_();
    stats_.requests_taken_beside += static_cast<int64_t>(live_.size() - live_before);
    if (!added) std::this_thread::yield();
  }
}

// Sample and score each row, then store prompt logprobs, stream, finish; captures that went
// through end here.
void Engine::update(const SchedulerOutput& plan, const StepBatch& batch, ForwardOutput& fo,
                    std::vector<RequestOutput>& outs) {
  RowResults res = read_rows(batch, fo, backend_->config().vocab_size, sample_vocab_);
  emit_rows(plan, batch, res, outs);
}

void Engine::emit_rows(const SchedulerOutput& plan, const StepBatch& batch, RowResults& res,
                       std::vector<RequestOutput>& outs) {
  store_probe_rows(batch, res);
  const std::vector<OutputRow>& rows = batch.rows;
  size_t i = 0;
  for (const ScheduledSeq& s : plan.seqs) {
    Request* r = s.req;
    if (r->leaving) {  // finished or aborted while this forward computed it: its rows are dropped
      while (i < rows.size() && rows[i].req == r) ++i;
      continue;
    }
    for (; i < rows.size() && rows[i].req == r && !rows[i].sample; ++i)
      r->prompt_logprobs[static_cast<size_t>(rows[i].position + 1)] = std::move(res.scored[i]);
    if (!s.samples) continue;
    if (r->is_capture()) {
      finish_capture(r);
      continue;
    }
    if (r->is_probe()) {
      finish_probe(r);
      continue;
    }
    Live& live = live_.at(r->id);
    if (r->sampling.max_tokens == 0) {
      outs.push_back(emit(live, std::nullopt, std::nullopt));
    } else {
      outs.push_back(emit(live, res.sampled[i], std::move(res.scored[i])));
      ++i;
    }
    if (outs.back().finished) retire(outs.back().id);
  }
}

void Engine::retire(int64_t id) {
  auto it = live_.find(id);
  if (it == live_.end()) return;
  if (it->second.req->leaving) leaving_.push_back(std::move(it->second));
  live_.erase(it);
}

void Engine::finish_capture(Request* r) {
  ++stats_.captures;
  stats_.tokens_captured += r->num_tokens();
  captures_done_.push_back(r->capture_job);
  auto owned = internal_.extract(r->id);  // keeps *r alive to the end of this function
  scheduler_.remove(r);
}

// Probe p's rows are [rows][keys] floats of res.probe_mass, after the probes before it; its first
// row is the token at position first_position, row i of the request's probe_rows is position
// probe_from + i.
void Engine::store_probe_rows(const StepBatch& batch, const RowResults& res) {
  IS_CHECK(static_cast<int64_t>(res.probe_mass.size()) == batch.forward.probe_mass_size(),
           "the backend returned {} probe weights for {}", res.probe_mass.size(), batch.forward.probe_mass_size());
  size_t at = 0;
  for (const ProbedRows& p : batch.probes) {
    Request* r = p.req;
    const size_t n = static_cast<size_t>(p.rows) * static_cast<size_t>(p.keys);
    const size_t to = static_cast<size_t>(p.first_position - r->probe_from) * static_cast<size_t>(p.keys);
    IS_CHECK(to + n <= r->probe_rows.size(), "probe rows of request {} out of range", r->id);
    std::copy_n(res.probe_mass.begin() + static_cast<std::ptrdiff_t>(at), n, r->probe_rows.begin() + static_cast<std::ptrdiff_t>(to));
    at += n;
  }
}

void Engine::finish_probe(Request* r) {
  ++stats_.probes;
  const size_t keys = static_cast<size_t>(r->injected->end - r->injected->start);
  std::vector<float> mass(keys, 0.0f);
  for (size_t i = 0; i < r->probe_rows.size(); ++i) mass[i % keys] += r->probe_rows[i];
  r->probe->mass = std::move(mass);
  r->probe->state = ProbeResult::State::kDone;
  auto owned = internal_.extract(r->id);  // keeps *r alive to the end of this function
  scheduler_.remove(r);
}

void Engine::save_captures() {
  if (captures_done_.empty()) return;
  const std::vector<int64_t> done = std::move(captures_done_);
  captures_done_.clear();
  if (memory_) memory_->captures_finished(done, {});
}

void Engine::count_step(const SchedulerOutput& plan, const ForwardBatch& fb, const StepClock& clock) {
  ++stats_.steps;
  stats_.tokens_computed += plan.num_tokens;
  const double forward_s = std::chrono::duration<double>(clock.ended - clock.launched).count();
  stats_.host_before_seconds += std::chrono::duration<double>(clock.launched - clock.started).count();
  stats_.host_launch_seconds += std::chrono::duration<double>(clock.returned - clock.launched).count();
  for (int32_t s = 0; s < fb.num_seqs(); ++s)  // the entries up to each sequence's last token
    if (fb.q_indptr[s + 1] > fb.q_indptr[s])
      stats_.kv_entries_attended += fb.positions[fb.q_indptr[s + 1] - 1] + 1 - (fb.kv_start.empty() ? 0 : fb.kv_start[s]);
  count_step_kind(fb, forward_s);
  adapt_background(plan, forward_s);
}

void Engine::adapt_background(const SchedulerOutput& plan, double seconds) {
  if (opts_.background_step_seconds <= 0 || seconds <= 0) return;
  for (const ScheduledSeq& s : plan.seqs)
    if (!s.req->background) return;  // timed on background steps alone
  // n' = T n / t(n): with t(n) = a + b n the iteration converges to the n whose step takes T
  // (n' - n* = (n - n*) a / t(n)), from below or above.
  const double next = opts_.background_step_seconds * plan.num_tokens / seconds;
  scheduler_.set_background_cap(static_cast<int32_t>(std::clamp(next, double{kMinBackgroundTokens},
                                                                static_cast<double>(opts_.scheduler.background_tokens_idle))));
}

void Engine::count_step_kind(const ForwardBatch& fb, double seconds) {
  int32_t single = 0;
  for (int32_t s = 0; s < fb.num_seqs(); ++s) single += fb.q_indptr[s + 1] - fb.q_indptr[s] == 1;
  if (single == fb.num_seqs()) {
    ++stats_.decode_steps;
    stats_.decode_step_seconds += seconds;
  } else if (single > 0) {
    ++stats_.mixed_steps;
    stats_.mixed_step_seconds += seconds;
  } else {
    ++stats_.prefill_steps;
    stats_.prefill_step_seconds += seconds;
  }
}

std::vector<RequestOutput> Engine::run_to_completion() {
  std::unordered_map<int64_t, RequestOutput> acc;
  std::vector<int64_t> order;
  while (has_unfinished()) {
    for (RequestOutput& o : step()) {
      auto [it, fresh] = acc.try_emplace(o.id, RequestOutput{});
      if (fresh) order.push_back(o.id);
      RequestOutput& a = it->second;
      a.id = o.id;
      a.new_tokens.insert(a.new_tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
      a.text += o.text;
      a.finished = o.finished;
      a.finish = o.finish;
      a.num_prompt_tokens = o.num_prompt_tokens;
      a.num_output_tokens = o.num_output_tokens;
      a.num_cached_tokens = o.num_cached_tokens;
      a.num_injected_tokens = o.num_injected_tokens;
      if (o.ttft_s > 0) a.ttft_s = o.ttft_s;
      a.logprobs.insert(a.logprobs.end(), std::make_move_iterator(o.logprobs.begin()),
                        std::make_move_iterator(o.logprobs.end()));
      if (!o.prompt_logprobs.empty()) a.prompt_logprobs = std::move(o.prompt_logprobs);
      if (o.error) a.error = o.error;
    }
  }
  std::vector<RequestOutput> out;
  for (int64_t id : order) out.push_back(std::move(acc[id]));
  return out;
}

}  // namespace inferscale
