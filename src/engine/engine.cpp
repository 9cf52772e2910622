#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <thread>

#include "engine/sampler.h"
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

Engine::~Engine() = default;

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
  return add_live(std::move(req)).req->id;
}

int64_t Engine::add_memory_request(std::shared_ptr<MemoryTicket> memory, const SamplingParams& sp, uint64_t cache_salt) {
  IS_CHECK(memory != nullptr, "add_memory_request with a null memory ticket");
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
  const ModelConfig& cfg = backend_->config();
  for (int32_t id : c.tokens)
    IS_CHECK(id >= 0 && id < cfg.vocab_size, "capture token id {} outside the vocabulary of {}", id, cfg.vocab_size);
  IS_REQUIRE(scheduler_.blocks_for(static_cast<int64_t>(c.tokens.size())) <= blocks_.num_blocks(), kResource,
             "a capture of {} tokens needs more KV blocks than the cache holds ({})", c.tokens.size(), blocks_.num_blocks());
  SamplingParams sp;
  sp.max_tokens = 0;
  auto req = new_request(next_id_++, sp, 0);
  set_prompt(*req, std::move(c.tokens), std::nullopt);
  req->capture_slots = std::move(c.capture_slots);
  req->capture_done = std::move(c.done);
  req->background = background;
  Request* r = req.get();
  captures_.emplace(r->id, std::move(req));
  scheduler_.add(r, before);
}

void Engine::resolve_memory(std::vector<RequestOutput>& outs, Resolve how, size_t from) {
  std::vector<int64_t> still(resolving_.begin(), resolving_.begin() + static_cast<std::ptrdiff_t>(from));
  bool waits = false;
  size_t i = from;
  for (; i < resolving_.size(); ++i) {
    if (i > from && how == Resolve::kWhileBusy && !backend_->forward_running()) break;
    if (how == Resolve::kWhileBusy) ++stats_.tickets_overlapped;
    auto it = live_.find(resolving_[i]);
    if (it == live_.end()) continue;  // aborted meanwhile
    Request* r = it->second.req.get();
    try {
      MemoryPlan plan = r->memory->resolve(*this);
      if (plan.state == MemoryPlan::State::kReady) {
        if (plan.max_tokens) r->sampling.max_tokens = *plan.max_tokens;
        check_prompt(plan.prompt, r->sampling, plan.injected);
        set_prompt(*r, std::move(plan.prompt), std::move(plan.injected));
        r->memory_ready = true;
        r->memory->admitted();
        continue;
      }
      for (CaptureSeq& c : plan.encode) add_capture(std::move(c), r);
      waits = waits || plan.state == MemoryPlan::State::kWait;
      still.push_back(r->id);
    } catch (...) {
      RequestOutput o;
      o.id = r->id;
      o.finished = true;
      o.finish = FinishReason::kAbort;
      o.error = std::current_exception();
      r->finish = FinishReason::kAbort;
      scheduler_.remove(r);  // releases the ticket
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
  auto captures = std::move(captures_);
  captures_.clear();
  for (auto& [id, req] : captures) {
    scheduler_.remove(req.get());
    if (req->capture_done) req->capture_done(false);
  }
}

void Engine::abort(int64_t id) {
  auto it = live_.find(id);
  if (it == live_.end()) return;
  scheduler_.remove(it->second.req.get());
  live_.erase(it);
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
  scheduler_.remove(live.req.get());
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

std::vector<RequestOutput> Engine::step() {
  using Clock = std::chrono::steady_clock;
  const auto started = Clock::now();
  std::vector<RequestOutput> outs;
  // Memory tickets: a backend that overlaps its forward with the host gets them resolved while the
  // device computes (below), except when nothing else is ready to run: an idle engine resolves
  // every waiting ticket first, so that a burst starts as one batch (measured on the H200, run 20:
  // staggering a 100-request burst behind single-request forwards cost 3 steps more than the
  // serial resolution it hid).
  const bool overlap = opts_.overlap_memory && backend_->overlaps_forward();
  const bool before = !resolving_.empty() && (!overlap || !scheduler_.has_ready_work());
  if (before) resolve_memory(outs, Resolve::kAll);
  SchedulerOutput plan = scheduler_.schedule();
  if (plan.seqs.empty()) {
    if (!before && !resolving_.empty()) resolve_memory(outs, Resolve::kAll);  // no forward to overlap
    return outs;
  }
  const int32_t bs = blocks_.block_size();
  auto slot_of = [bs](const Request* r, int32_t i) {
    return static_cast<int64_t>(r->block_table[static_cast<size_t>(i / bs)]) * bs + i % bs;
  };

  // 1. Memory injection: pool KV -> this request's slots, K rotated to its positions.
  InjectBatch inj;
  for (const ScheduledSeq& s : plan.seqs) {
    if (!s.inject) continue;
    Request* r = s.req;
    const InjectedSpan& span = *r->injected;
    const size_t before = inj.src_slots.size();
    for (int32_t i = std::max(span.start, r->num_computed_tokens); i < span.end; ++i) {
      if (!span.injects(i)) continue;  // recomputed by the forward
      inj.src_slots.push_back(span.pool_slots[static_cast<size_t>(i - span.start)]);
      inj.dst_slots.push_back(slot_of(r, i));
      inj.positions.push_back(i);
    }
    r->num_injected_tokens = static_cast<int32_t>(inj.src_slots.size() - before);
  }
  if (!inj.src_slots.empty()) backend_->inject(inj);
  stats_.tokens_injected += static_cast<int64_t>(inj.src_slots.size());

  // 2. One forward over every scheduled token. Output rows, request by request: the prompt rows
  // (positions whose logits score the next prompt token, for prompt_logprobs), then the sampled row.
  struct Row {
    Request* req;
    int32_t position;
    bool sample;
  };
  std::vector<Row> rows;
  bool need_logits = false;  // any row needs the full logits, not just its argmax
  ForwardBatch fb;
  fb.q_indptr.push_back(0);
  fb.kv_indptr.push_back(0);
  for (const ScheduledSeq& s : plan.seqs) {
    Request* r = s.req;
    for (int32_t p : s.positions) {
      if (r->is_capture() && r->capture_slots[static_cast<size_t>(p)] >= 0) {
        fb.capture_tokens.push_back(fb.num_tokens());
        fb.capture_slots.push_back(r->capture_slots[static_cast<size_t>(p)]);
      }
      if (r->needs_prompt_row(p)) {
        fb.output_tokens.push_back(fb.num_tokens());
        rows.push_back({r, p, false});
        need_logits = true;
      }
      fb.token_ids.push_back(r->tokens[static_cast<size_t>(p)]);
      fb.positions.push_back(p);
      fb.slot_mapping.push_back(slot_of(r, p));
    }
    if (s.samples && r->sampling.max_tokens > 0) {
      fb.output_tokens.push_back(fb.num_tokens() - 1);
      rows.push_back({r, s.positions.back(), true});
      if (r->sampling.logprobs >= 0) need_logits = true;
    }
    fb.q_indptr.push_back(fb.num_tokens());
    fb.kv_indices.insert(fb.kv_indices.end(), r->block_table.begin(), r->block_table.end());
    fb.kv_indptr.push_back(static_cast<int32_t>(fb.kv_indices.size()));
  }
  // No row wants logprobs: the backend samples and only R ids leave it, not [R, vocab] logits.
  // Greedy everywhere is kArgmax; otherwise kSample with each row's draw taken here from its
  // request's rng (one per sampled token, as sample_token would take on the logits path).
  if (rows.empty()) {
    fb.output = ForwardBatch::Output::kHidden;  // captures only: no row comes out
  } else if (!need_logits) {
    fb.argmax_vocab = static_cast<int32_t>(sample_vocab_);
    const bool all_greedy = std::all_of(rows.begin(), rows.end(), [](const Row& w) { return is_greedy(w.req->sampling); });
    fb.output = all_greedy ? ForwardBatch::Output::kArgmax : ForwardBatch::Output::kSample;
    if (!all_greedy)
      for (const Row& w : rows) fb.sampling.push_back(row_sampling(w.req->sampling, w.req->rng));
  }
  ForwardOutput fo;
  const auto launched = Clock::now();
  backend_->launch_forward(fb, fo);
  const auto returned = Clock::now();
  if (overlap) {
    // While the device computes: the tickets waiting, and the requests the intake adds meanwhile
    // with theirs; all are scheduled from the next step on. Between schedule() and finish_step()
    // this only adds waiting work (requests, captures) or removes unscheduled requests (rejected
    // tickets).
    try {
      size_t asked = 0;  // resolving_[0, asked) were asked beside this forward (each once a step)
      for (;;) {
        if (resolving_.size() > asked) {
          resolve_memory(outs, Resolve::kWhileBusy, asked);
          asked = resolving_.size();  // all of them, unless the device is done (then the loop ends)
        }
        if (!intake_ || !backend_->forward_running()) break;
        const size_t live_before = live_.size();  // the intake only adds live requests
        const bool added = intake_();
        stats_.requests_taken_beside += static_cast<int64_t>(live_.size() - live_before);
        if (!added) std::this_thread::yield();
      }
    } catch (...) {
      backend_->wait_forward();
      throw;
    }
  }
  backend_->wait_forward();
  const std::vector<float>& logits = fo.values;
  scheduler_.finish_step(plan);
  ++stats_.steps;
  stats_.tokens_computed += plan.num_tokens;
  const auto ended = Clock::now();
  const double forward_s = std::chrono::duration<double>(ended - launched).count();
  stats_.host_before_seconds += std::chrono::duration<double>(launched - started).count();
  stats_.host_launch_seconds += std::chrono::duration<double>(returned - launched).count();
  count_step_kind(fb, forward_s);
  adapt_background(plan, forward_s);

  // 3. Sample and score each row. Only ids the tokenizer knows are sampled or compete in the
  // log-softmax: a model's embedding is often padded past the tokenizer's vocabulary (Qwen: 152,064
  // rows for 151,665 tokens), and those rows have no text.
  const size_t R = rows.size();
  std::vector<int32_t> sampled(R, -1);
  std::vector<std::optional<LogprobEntry>> scored(R);
  if (need_logits) {
    const int64_t V = backend_->config().vocab_size;
    std::exception_ptr error;
    // Rows are independent (a request has one sampled row per step, so no rng is shared).
#pragma omp parallel for schedule(dynamic) if (R > 1)
    for (size_t i = 0; i < R; ++i) {
      try {
        const Row& row = rows[i];
        const SamplingParams& sp = row.req->sampling;
        std::span<const float> lg(logits.data() + static_cast<int64_t>(i) * V, static_cast<size_t>(sample_vocab_));
        if (row.sample) {
          sampled[i] = sample_token(lg, sp, row.req->rng);
          if (sp.logprobs >= 0) scored[i] = compute_logprobs(lg, sampled[i], sp.logprobs);
        } else {
          scored[i] = compute_logprobs(lg, row.req->tokens[static_cast<size_t>(row.position + 1)], sp.prompt_logprobs,
                                       sp.prompt_distributions);
        }
      } catch (...) {
#pragma omp critical(inferscale_engine_rows)
        if (!error) error = std::current_exception();
      }
    }
    if (error) std::rethrow_exception(error);
  } else {
    IS_CHECK(fo.ids.size() == R, "the backend returned {} ids for {} rows", fo.ids.size(), R);
    sampled = std::move(fo.ids);
  }

  // 4. Store prompt logprobs, stream, finish; captures that went through end here.
  size_t i = 0;
  for (const ScheduledSeq& s : plan.seqs) {
    Request* r = s.req;
    for (; i < R && rows[i].req == r && !rows[i].sample; ++i)
      r->prompt_logprobs[static_cast<size_t>(rows[i].position + 1)] = std::move(scored[i]);
    if (!s.samples) continue;
    if (r->is_capture()) {
      ++stats_.captures;
      stats_.tokens_captured += r->num_tokens();
      auto owned = captures_.extract(r->id);  // keeps *r alive to the end of this iteration
      scheduler_.remove(r);
      if (r->capture_done) r->capture_done(true);
      continue;
    }
    Live& live = live_.at(r->id);
    if (r->sampling.max_tokens == 0) {
      outs.push_back(emit(live, std::nullopt, std::nullopt));
    } else {
      outs.push_back(emit(live, sampled[i], std::move(scored[i])));
      ++i;
    }
    if (outs.back().finished) live_.erase(outs.back().id);
  }
  stats_.host_after_seconds += std::chrono::duration<double>(Clock::now() - ended).count();
  return outs;
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
