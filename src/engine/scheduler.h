// The scheduler: every step it picks, within a token budget, the next tokens of running requests
// (decodes and continued prefill chunks) and then admits waiting ones (with prefix-cache hits).
// When blocks run out it preempts the most recently admitted running request: its blocks are
// released (full ones stay cached) and it goes back to the front of the queue, to be recomputed.
// A waiting request whose memory is not resolved yet (memory_connector.h) is passed over, never
// waited for: the ready requests behind it are admitted. Background captures come last, in what
// budget is left (capped), and are the first to be preempted.
#pragma once
#include <algorithm>
#include <cstdint>
#include <deque>
#include <vector>

#include "engine/block_manager.h"
#include "engine/request.h"

namespace inferscale {

struct SchedulerOptions {
  int32_t max_num_batched_tokens = 2048;  // tokens computed per step, all requests together
  int32_t max_num_seqs = 64;
  bool enable_prefix_caching = true;
  // Background captures (Request::background): tokens a step gives them at most, in a step with
  // nothing else to do and in one beside other work. Small, so a request arriving while they run
  // waits at most one short step, and running decodes lose little.
  int32_t background_tokens_idle = 256;
  int32_t background_tokens_busy = 64;
};

struct ScheduledSeq {
  Request* req = nullptr;
  std::vector<int32_t> positions;  // token indices computed this step, increasing
  bool inject = false;             // copy the injected span's KV in before the forward
  bool samples = false;            // the chunk reaches the last token: sample from its logits
};

struct SchedulerOutput {
  std::vector<ScheduledSeq> seqs;
  std::vector<Request*> preempted;
  int32_t num_tokens = 0;
};

class Scheduler {
 public:
  Scheduler(BlockManager& blocks, SchedulerOptions opts) : blocks_(blocks), opts_(opts) {}

  // Queues a request at the back, or just before `before` (a waiting request: a capture runs
  // where the request it works for stands in the queue).
  void add(Request* r, const Request* before = nullptr);
  SchedulerOutput schedule();
  // After the forward: advance num_computed_tokens, publish newly full blocks to the prefix cache.
  void finish_step(const SchedulerOutput& out);
  // Removes a request (finished or aborted) and releases its blocks.
  void remove(Request* r);

  bool empty() const {
    return waiting_.empty() && running_.empty() && background_waiting_.empty() && background_running_.empty();
  }
  // Whether schedule() has anything to plan besides requests whose memory is unresolved.
  bool has_ready_work() const {
    return !running_.empty() || num_background() > 0 ||
           std::any_of(waiting_.begin(), waiting_.end(), [](const Request* r) { return r->memory_ready; });
  }
  // Background captures queued or running.
  size_t num_background() const { return background_waiting_.size() + background_running_.size(); }
  // Every background capture becomes ordinary work (a request waits for one of them), in order.
  void promote_background();
  // A bound on background tokens a step tighter than the options' caps (the engine's, from the time
  // its background steps take; Engine::adapt_background): `tokens` in a step with nothing else to
  // do, a quarter of it beside other work; 0 = the options' caps alone.
  void set_background_cap(int32_t tokens) { background_cap_ = tokens; }
  // The background tokens a step gives at most: `idle` = nothing else is scheduled.
  int32_t background_tokens(bool idle) const;
  // Requests waiting / running; captures (memory encodings, internal) are not counted.
  size_t num_waiting() const { return count_requests(waiting_); }
  size_t num_running() const { return count_requests(running_); }
  int64_t num_preemptions() const { return num_preemptions_; }
  // Blocks one request of `num_tokens` tokens needs at most.
  int64_t blocks_for(int64_t num_tokens) const { return (num_tokens + blocks_.block_size() - 1) / blocks_.block_size(); }

 private:
  // Plans the next chunk of at most `budget` tokens; allocates its blocks or returns false.
  bool plan_chunk(Request* r, int32_t budget, ScheduledSeq& seq);
  void admit_prefix_hits(Request* r);
  // A request back to its unstarted state: blocks released (full ones stay cached), nothing computed.
  void reset(Request* r);
  // reset, then from `running` to the front of `waiting`.
  void requeue(Request* r, std::vector<Request*>& running, std::deque<Request*>& waiting);
  void preempt(Request* r);
  void preempt_background(Request* r);
  // Step 3 of schedule(): background captures in at most `tokens` of the budget.
  void schedule_background(int32_t tokens, SchedulerOutput& out);
  void release_blocks(Request* r);
  uint64_t extra_key(const Request* r, int32_t block_index) const;

  template <class C>
  static size_t count_requests(const C& c) {
    return static_cast<size_t>(std::count_if(c.begin(), c.end(), [](const Request* r) { return !r->is_capture(); }));
  }

  BlockManager& blocks_;
  SchedulerOptions opts_;
  std::deque<Request*> waiting_;
  std::vector<Request*> running_;  // admission order: the last one is preempted first
  std::deque<Request*> background_waiting_;
  std::vector<Request*> background_running_;
  int64_t num_preemptions_ = 0;
  int32_t background_cap_ = 0;
};

}  // namespace inferscale
