// Scheduling a step ahead (engine.h): step() completes the forward launched before it and leaves
// the next one launched, planned and prepared while the device computed, and as a rule queued
// behind it before it ends, so that the device goes from one to the next without waiting on the
// host.
//
//   host:    plan N+1 | queue N+1 | intake ...... | wait N | read N, emit N | plan N+2 | queue N+2
//   device:  ... forward N ......................|  forward N+1 ..............................|
//
// The invariants this rests on:
// - At most two forwards are launched and not ended: cur, and the next one queued behind it
//   (ahead_ between steps). Their requests are `in_flight` (a count). A request in flight is
//   never removed (remove() marks it leaving) nor destroyed (retire() parks it in leaving_), so
//   the backend's batches and the scheduler's plans stay valid to their ends.
// - The forward after N is planned once N's scheduler bookkeeping is done (finish_step, before N
//   ends: it reads only tokens N's inputs hold), over one placeholder token a request that N
//   samples from and that goes on. A queued forward's placeholders are fed on the device from N's
//   ids (ForwardBatch::token_src); the host fills them once N ends (fill_pending), before any
//   forward it plans reads them. A request that ends with N's token (max_tokens, max_model_len, a
//   capture's last chunk) gets none, so the scheduler plans nothing for it.
// - Blocks a request frees while N computes (preemption in the plan ahead) are written by later
//   forwards only: the backend's stream orders them after N.
// - Tokens are the synchronous steps' (greedy and seeded sampling): rngs are drawn when a batch is
//   prepared, in step order, and a step whose rows sample on the host (logits) is not planned
//   ahead.
// - A forward that injects is launched after N ends, not queued (the backend's injection waits
//   for the forwards pending), and so is one planned while KV read from files waits to be written:
//   write_loads runs only when no forward is pending (a pool write would wait for the device).
#include <algorithm>
#include <chrono>
#include <unordered_map>

#include "engine/engine.h"
#include "util/check.h"

namespace inferscale {

bool Engine::schedules_ahead() const {
  switch (opts_.schedule_ahead) {
    case ScheduleAhead::kWhereOverlapping: return backend_->overlaps_forward();
    case ScheduleAhead::kAlways: return true;
    case ScheduleAhead::kNever: return false;
  }
  return false;
}

std::vector<RequestOutput> Engine::step_ahead() {
  std::vector<RequestOutput> outs;
  std::unique_ptr<Launched> cur = std::move(ahead_);
  std::unique_ptr<Launched> next;
  std::vector<Pending> pending;
  try {
    if (!cur) {  // nothing launched: plan and launch this step's forward now
      StepClock clock;
      clock.started = StepClock::Clock::now();
      cur = prepare_ahead(outs, clock, false);
      if (!cur) return outs;
      start(*cur);
    }
    // While cur computes: the next step's plan and batch, queued behind it; then the memory
    // plans and arrivals.
    const bool advanced = !cur->batch.need_logits;
    if (advanced) {
      pending = advance_ahead(*cur);
      next = prepare_ahead(outs, StepClock{}, true);
    }
    // Queued behind cur unless something must run between them: an injection (it waits for the
    // pending forwards), or KV read from files beside an earlier forward, written once cur ends.
    const bool queued = next && next->batch.inject.src_slots.empty() && !(memory_ && memory_->has_loads());
    if (queued) {
      feed_pending(pending, *next);
      start(*next);
      ++stats_.forwards_queued;
    }
    if (backend_->overlaps_forward()) work_beside_forward(outs);
    backend_->wait_forward();
    ended(*cur);
    if (!queued) write_loads(outs);  // no forward runs now; files read beside cur wait for the next such moment
    if (!advanced) scheduler_.finish_step(cur->plan);
    RowResults res = read_rows(cur->batch, cur->fo, backend_->config().vocab_size, sample_vocab_);
    fill_pending(pending, res, queued ? nullptr : next.get());  // a queued batch's ids are fed
    if (queued) {  // the device went on from cur to it: no host time before or inside its launch
      StepClock& c = next->clock;
      c.started = c.launched = c.returned = std::max(c.returned, cur->clock.ended);
    } else if (next) {
      next->clock.started = cur->clock.ended;  // the device idles from here to the launch
      start(*next);
    }
    if (next) ahead_ = std::move(next);
    // emit() appends each sampled token itself: the filled placeholders make way for them.
    for (const Pending& p : pending) p.req->tokens.pop_back();
    emit_rows(cur->plan, cur->batch, res, outs);
  } catch (...) {
    // Nothing stays launched: the caller fails the live requests (AsyncEngine) or sees the error.
    backend_->wait_forwards();
    for (Launched* f : {cur.get(), next.get(), ahead_.get()})
      if (f != nullptr)
        for (const ScheduledSeq& s : f->plan.seqs) s.req->in_flight = 0;
    ahead_.reset();
    remove_left();
    throw;
  }
  save_captures();
  remove_left();
  if (!ahead_)  // the device idles after this step until the next one's launch
    stats_.host_after_seconds += std::chrono::duration<double>(StepClock::Clock::now() - cur->clock.ended).count();
  return outs;
}

// The schedule and prepare phases, into a forward not launched yet (nullptr: nothing to run).
std::unique_ptr<Engine::Launched> Engine::prepare_ahead(std::vector<RequestOutput>& outs, const StepClock& clock,
                                                         bool launched) {
  std::optional<SchedulerOutput> plan = schedule(outs, !launched);
  if (!plan) return nullptr;
  auto f = std::make_unique<Launched>();
  f->clock = clock;
  f->batch = prepare_step(*plan, blocks_.block_size(), sample_vocab_);
  f->plan = std::move(*plan);
  return f;
}

void Engine::start(Launched& f) {
  for (const ScheduledSeq& s : f.plan.seqs) ++s.req->in_flight;
  launch(f.batch, f.fo, f.clock);
}

void Engine::ended(Launched& f) {
  f.clock.ended = StepClock::Clock::now();
  for (const ScheduledSeq& s : f.plan.seqs) --s.req->in_flight;
  count_step(f.plan, f.batch.forward, f.clock);
}

// finish_step for a forward still computing, and a placeholder for each request it samples a
// token for that goes on after it (emit() finishes the others: max_tokens, max_model_len), with
// the output row that samples it (batch.rows: one sampling row a request).
std::vector<Engine::Pending> Engine::advance_ahead(const Launched& f) {
  scheduler_.finish_step(f.plan);
  std::unordered_map<const Request*, int32_t> row_of;
  const std::vector<OutputRow>& rows = f.batch.rows;
  for (size_t i = 0; i < rows.size(); ++i)
    if (rows[i].sample) row_of.emplace(rows[i].req, static_cast<int32_t>(i));
  std::vector<Pending> pending;
  for (const ScheduledSeq& s : f.plan.seqs) {
    Request* r = s.req;
    if (!s.samples || r->leaving || r->is_capture() || r->sampling.max_tokens == 0) continue;
    if (r->num_output_tokens() + 1 >= r->sampling.max_tokens || r->num_tokens() + 1 >= max_model_len_) continue;
    const auto it = row_of.find(r);
    IS_CHECK(it != row_of.end(), "request {} samples in a forward with no row for it", r->id);
    pending.push_back({r, r->num_tokens(), it->second});
    r->tokens.push_back(Request::kPendingToken);
  }
  return pending;
}

// Each placeholder gets the token its row sampled, in the request and, when `next` is not
// launched yet, wherever next's batch reads it (BatchBuilder adds tokens in plan order).
void Engine::fill_pending(const std::vector<Pending>& pending, const RowResults& res, Launched* next) {
  if (pending.empty()) return;
  for (const Pending& p : pending) {
    const int32_t id = res.sampled[static_cast<size_t>(p.row)];
    IS_CHECK(id >= 0, "no token sampled for request {}", p.req->id);
    p.req->tokens[static_cast<size_t>(p.position)] = id;
  }
  if (next == nullptr) return;
  std::vector<int32_t>& ids = next->batch.forward.token_ids;
  size_t t = 0;
  for (const ScheduledSeq& s : next->plan.seqs)
    for (const int32_t q : s.positions) ids[t++] = s.req->tokens[static_cast<size_t>(q)];
}

// A queued forward's placeholder tokens read, on the device, the row that samples them.
void Engine::feed_pending(const std::vector<Pending>& pending, Launched& next) {
  if (pending.empty()) return;
  std::unordered_map<const Request*, int32_t> row_of;
  for (const Pending& p : pending) row_of.emplace(p.req, p.row);
  ForwardBatch& fb = next.batch.forward;
  fb.token_src.assign(fb.token_ids.size(), -1);
  size_t t = 0;
  for (const ScheduledSeq& s : next.plan.seqs)
    for (const int32_t q : s.positions) {
      if (s.req->tokens[static_cast<size_t>(q)] == Request::kPendingToken) {
        const auto it = row_of.find(s.req);
        IS_CHECK(it != row_of.end(), "request {} reads a token no placeholder holds", s.req->id);
        fb.token_src[t] = it->second;
        fb.token_ids[t] = 0;  // a valid id until the device's replaces it
      }
      ++t;
    }
}

void Engine::remove_left() {
  for (auto it = leaving_.begin(); it != leaving_.end();) {
    Request* r = it->req.get();
    if (r->in_flight) {
      ++it;
      continue;
    }
    remove_now(r);
    it = leaving_.erase(it);
  }
}

}  // namespace inferscale
