#include "engine/scheduler.h"

#include <algorithm>
#include <span>

#include "engine/prefix_hash.h"
#include "model/forward_batch.h"
#include "util/check.h"

namespace inferscale {

void Scheduler::add(Request* r, const Request* before) {
  r->status = RequestStatus::kWaiting;
  if (r->background) {
    background_waiting_.push_back(r);
    return;
  }
  auto at = before ? std::find(waiting_.begin(), waiting_.end(), before) : waiting_.end();
  waiting_.insert(at, r);
}

uint64_t Scheduler::extra_key(const Request* r, int32_t block_index) const {
  // Blocks from the injected span on hold (or follow) injected KV; every block carries the salt.
  // A request reading its facts in place keys them apart from one that copied them: its blocks
  // at the span's edges hold no KV at the facts' positions, which a copying request would read.
  const bool after_span = r->injected && (block_index + 1) * blocks_.block_size() > r->injected->start;
  const uint64_t span = !after_span ? 0 : r->facts_in_place ? in_place_span_key(r->injected->cache_key) : r->injected->cache_key;
  return prefix_block_extra(r->cache_salt, span);
}

void Scheduler::admit_prefix_hits(Request* r) {
  if (!r->block_table.empty()) return;
  if (!opts_.enable_prefix_caching || r->wants_prompt_logprobs() || r->is_internal()) {
    r->num_cached_tokens = 0;
    return;
  }
  const int32_t bs = blocks_.block_size();
  // At least the last token is always computed, so its logits exist.
  const int32_t max_blocks = (r->num_tokens() - 1) / bs;
  uint64_t h = 0, h_hit = 0;
  size_t hits = 0;  // the table up to its last real hit (holes after it are not counted as cached)
  for (int32_t b = 0; b < max_blocks; ++b) {
    std::span<const int32_t> toks(r->tokens.data() + b * bs, static_cast<size_t>(bs));
    h = prefix_block_hash(h, extra_key(r, b), toks);
    if (r->is_fact_hole(b, bs)) {  // its entries are the facts in the pool: the chain goes on through it
      r->block_table.push_back(ForwardBatch::kNoBlock);
      continue;
    }
    auto hit = blocks_.lookup(h, toks);
    if (!hit) break;
    r->block_table.push_back(*hit);
    hits = r->block_table.size();
    h_hit = h;
  }
  r->block_table.resize(hits);
  r->num_published_blocks = static_cast<int32_t>(hits);
  r->last_block_hash = h_hit;
  r->num_computed_tokens = r->num_published_blocks * bs;
  r->num_cached_tokens = r->num_computed_tokens;
  if (r->injected && r->num_computed_tokens >= r->injected->end) r->injection_done = true;
}

bool Scheduler::plan_chunk(Request* r, int32_t budget, ScheduledSeq& seq) {
  seq = ScheduledSeq{};
  seq.req = r;
  const InjectedSpan* inj = r->injected ? &*r->injected : nullptr;
  seq.inject = inj && !r->injection_done;
  const int32_t n = std::min(budget, r->num_remaining());
  if (n <= 0) return false;
  int32_t i = r->num_computed_tokens;
  while (static_cast<int32_t>(seq.positions.size()) < n) {
    if (inj && inj->injects(i)) {
      ++i;
      continue;
    }
    seq.positions.push_back(i++);
  }
  int32_t last = seq.positions.back();
  if (seq.inject) last = std::max(last, inj->end - 1);
  // Blocks up to `last`, but none for those wholly inside facts read in place (kNoBlock).
  const int32_t bs = blocks_.block_size(), have = static_cast<int32_t>(r->block_table.size());
  const auto want = static_cast<int32_t>(blocks_for(last + 1));
  int64_t need = 0;
  for (int32_t b = have; b < want; ++b) need += r->is_fact_hole(b, bs) ? 0 : 1;
  if (need > 0 && !blocks_.can_allocate(need)) return false;
  for (int32_t b = have; b < want; ++b) r->block_table.push_back(r->is_fact_hole(b, bs) ? ForwardBatch::kNoBlock : blocks_.allocate());
  seq.samples = seq.positions.back() == r->num_tokens() - 1;
  return true;
}

void Scheduler::release_blocks(Request* r) {
  for (auto it = r->block_table.rbegin(); it != r->block_table.rend(); ++it)
    if (*it != ForwardBatch::kNoBlock) blocks_.release(*it);
  r->block_table.clear();
  r->num_published_blocks = 0;
  r->last_block_hash = 0;
}

void Scheduler::reset(Request* r) {
  release_blocks(r);
  r->num_computed_tokens = 0;
  r->injection_done = false;
}

void Scheduler::requeue(Request* r, std::vector<Request*>& running, std::deque<Request*>& waiting) {
  reset(r);
  r->status = RequestStatus::kWaiting;
  running.erase(std::find(running.begin(), running.end(), r));
  waiting.push_front(r);
}

void Scheduler::preempt(Request* r) {
  ++r->num_preemptions;
  ++num_preemptions_;
  requeue(r, running_, waiting_);
}

void Scheduler::preempt_background(Request* r) { requeue(r, background_running_, background_waiting_); }

void Scheduler::promote_background() {
  for (Request* r : background_running_) {
    r->background = false;
    running_.push_back(r);
  }
  for (Request* r : background_waiting_) {
    r->background = false;
    waiting_.push_back(r);
  }
  background_running_.clear();
  background_waiting_.clear();
}

int32_t Scheduler::background_tokens(bool idle) const {
  const int32_t cap = idle ? opts_.background_tokens_idle : opts_.background_tokens_busy;
  if (background_cap_ <= 0) return cap;
  return std::min(cap, idle ? background_cap_ : std::max(1, background_cap_ / 4));
}

void Scheduler::schedule_background(int32_t tokens, SchedulerOutput& out) {
  for (size_t i = 0; i < background_running_.size() && tokens > 0; ++i) {
    if (background_running_[i]->num_remaining() == 0) continue;  // its last chunk is in flight
    ScheduledSeq seq;
    if (!plan_chunk(background_running_[i], tokens, seq)) return;
    tokens -= static_cast<int32_t>(seq.positions.size());
    out.seqs.push_back(std::move(seq));
  }
  while (tokens > 0 && !background_waiting_.empty()) {
    Request* r = background_waiting_.front();
    ScheduledSeq seq;
    if (!plan_chunk(r, tokens, seq)) return;  // no room: never at a request's expense
    background_waiting_.pop_front();
    r->status = RequestStatus::kRunning;
    background_running_.push_back(r);
    tokens -= static_cast<int32_t>(seq.positions.size());
    out.seqs.push_back(std::move(seq));
  }
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  int32_t budget = opts_.max_num_batched_tokens;
  // 1. Running requests, oldest first; preempt from the newest end when blocks run out.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Request* r = running_[i];
    // Scheduling a step ahead: a request whose last token the forward in flight computes and that
    // ends with it (max_tokens, a capture's last chunk), or that is leaving, has nothing to plan.
    if (r->leaving || r->num_remaining() == 0) {
      ++i;
      continue;
    }
    ScheduledSeq seq;
    if (plan_chunk(r, budget, seq)) {
      budget -= static_cast<int32_t>(seq.positions.size());
      out.seqs.push_back(std::move(seq));
      ++i;
      continue;
    }
    if (!background_running_.empty()) {  // background work gives its blocks back first
      preempt_background(background_running_.back());
      continue;
    }
    Request* victim = running_.back();
    out.preempted.push_back(victim);
    preempt(victim);  // r itself when it is the newest: the loop then ends at i == size
  }
  // 2. Waiting requests, in order, unless this step had to preempt; those whose memory is not
  // resolved are passed over.
  for (auto it = waiting_.begin(); out.preempted.empty() && it != waiting_.end() && budget > 0 &&
                                   static_cast<int32_t>(running_.size()) < opts_.max_num_seqs;) {
    Request* r = *it;
    if (!r->memory_ready || r->leaving) {
      ++it;
      continue;
    }
    admit_prefix_hits(r);
    ScheduledSeq seq;
    bool planned = plan_chunk(r, budget, seq);
    if (!planned && !background_running_.empty()) {
      // Background work gives its blocks back before a request waits for them.
      while (!background_running_.empty()) preempt_background(background_running_.back());
      planned = plan_chunk(r, budget, seq);
    }
    if (!planned) {
      reset(r);  // give back the prefix hits; retry next step
      break;
    }
    it = waiting_.erase(it);
    r->status = RequestStatus::kRunning;
    running_.push_back(r);
    budget -= static_cast<int32_t>(seq.positions.size());
    out.seqs.push_back(std::move(seq));
  }
  // 3. Background captures, in the budget left, capped.
  if (out.preempted.empty() && budget > 0 && num_background() > 0)
    schedule_background(std::min(budget, background_tokens(out.seqs.empty())), out);
  for (const ScheduledSeq& s : out.seqs) out.num_tokens += static_cast<int32_t>(s.positions.size());
  return out;
}

void Scheduler::finish_step(const SchedulerOutput& out) {
  const int32_t bs = blocks_.block_size();
  for (const ScheduledSeq& s : out.seqs) {
    Request* r = s.req;
    if (s.inject) r->injection_done = true;
    r->num_computed_tokens = s.positions.back() + 1;
    // Injected tokens right after the chunk are computed too (their KV is in the cache).
    if (r->injected && r->injection_done)
      while (r->num_computed_tokens < r->injected->end && r->injected->injects(r->num_computed_tokens))
        ++r->num_computed_tokens;
    if (!opts_.enable_prefix_caching || r->is_internal()) continue;
    // A hole of facts read in place (kNoBlock) is chained through, not published: a later
    // request reading the same facts in place passes it the same way (admit_prefix_hits).
    while ((r->num_published_blocks + 1) * bs <= r->num_computed_tokens) {
      const int32_t b = r->num_published_blocks;
      std::span<const int32_t> toks(r->tokens.data() + b * bs, static_cast<size_t>(bs));
      r->last_block_hash = prefix_block_hash(r->last_block_hash, extra_key(r, b), toks);
      if (const int32_t id = r->block_table[static_cast<size_t>(b)]; id != ForwardBatch::kNoBlock)
        blocks_.publish(id, r->last_block_hash, toks);
      ++r->num_published_blocks;
    }
  }
}

void Scheduler::remove(Request* r) {
  release_blocks(r);
  auto it = std::find(running_.begin(), running_.end(), r);
  if (it != running_.end()) running_.erase(it);
  auto wt = std::find(waiting_.begin(), waiting_.end(), r);
  if (wt != waiting_.end()) waiting_.erase(wt);
  std::erase(background_running_, r);
  std::erase(background_waiting_, r);
  r->status = RequestStatus::kFinished;
}

}  // namespace inferscale
