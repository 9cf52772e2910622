#include "engine/step_batch.h"

#include <algorithm>
#include <exception>
#include <span>

#include "engine/batch_builder.h"
#include "engine/sampler.h"
#include "util/check.h"

namespace inferscale {
namespace {

// Memory injection: pool KV -> the request's slots of its injected span not computed yet, K
// rotated to their positions (positions the span recomputes are the forward's).
void add_injection(Request& r, int32_t block_size, InjectBatch& inj) {
  const InjectedSpan& span = *r.injected;
  const size_t before = inj.src_slots.size();
  for (int32_t i = std::max(span.start, r.num_computed_tokens); i < span.end; ++i) {
    if (!span.injects(i)) continue;
    inj.src_slots.push_back(span.pool_slots[static_cast<size_t>(i - span.start)]);
    inj.dst_slots.push_back(cache_slot(r.block_table, block_size, i));
    inj.positions.push_back(i);
  }
  r.num_injected_tokens = static_cast<int32_t>(inj.src_slots.size() - before);
}

// No row wants logprobs: the backend samples and only R ids leave it, not [R, vocab] logits.
// Greedy everywhere is kArgmax; otherwise kSample with each row's draw taken here from its
// request's rng (one per sampled token, as sample_token would take on the logits path).
void choose_output(StepBatch& b, int64_t sample_vocab) {
  ForwardBatch& fb = b.forward;
  if (b.rows.empty()) {
    fb.output = ForwardBatch::Output::kHidden;  // captures only: no row comes out
    return;
  }
  if (b.need_logits) return;  // kLogits
  fb.argmax_vocab = static_cast<int32_t>(sample_vocab);
  const bool all_greedy = std::all_of(b.rows.begin(), b.rows.end(), [](const OutputRow& w) { return is_greedy(w.req->sampling); });
  fb.output = all_greedy ? ForwardBatch::Output::kArgmax : ForwardBatch::Output::kSample;
  if (!all_greedy)
    for (const OutputRow& w : b.rows) fb.sampling.push_back(row_sampling(w.req->sampling, w.req->rng));
}

// A probe's rows among the positions this forward computes for it (those from probe_from on, the
// last ones of the sequence so far: bb's current sequence ends with them).
void add_probe(Request& r, const std::vector<int32_t>& positions, BatchBuilder& bb, std::vector<ProbedRows>& probes) {
  const auto first = std::lower_bound(positions.begin(), positions.end(), r.probe_from);
  if (first == positions.end()) return;
  const int32_t rows = static_cast<int32_t>(positions.end() - first);
  const InjectedSpan& span = *r.injected;
  bb.probe_last(rows, span.start, span.end, r.probe_first_layer);
  probes.push_back({&r, *first, rows, span.end - span.start});
}

}  // namespace

StepBatch prepare_step(const SchedulerOutput& plan, int32_t block_size, int64_t sample_vocab) {
  StepBatch b;
  BatchBuilder bb(block_size);
  size_t fact_slots = 0;
  for (const ScheduledSeq& s : plan.seqs)
    if (s.req->facts_in_place) fact_slots += s.req->injected->pool_slots.size();
  bb.reserve_fact_slots(fact_slots);
  for (const ScheduledSeq& s : plan.seqs) {
    Request* r = s.req;
    if (r->facts_in_place) {
      // Nothing is copied: every forward of the request reads its facts from their pool slots.
      if (s.inject) r->num_injected_tokens = r->injected->num_injected();
    } else if (s.inject) {
      add_injection(*r, block_size, b.inject);
    }
    for (int32_t p : s.positions) {
      const int64_t capture = r->is_capture() ? r->capture_slots[static_cast<size_t>(p)] : -1;
      const bool prompt_row = r->needs_prompt_row(p);
      if (prompt_row) {
        b.rows.push_back({r, p, false});
        b.need_logits = true;
      }
      bb.add_token(r->tokens[static_cast<size_t>(p)], p, r->block_table, capture, prompt_row);
    }
    if (s.samples && r->sampling.max_tokens > 0) {
      bb.output_last();
      b.rows.push_back({r, s.positions.back(), true});
      if (r->sampling.logprobs >= 0) b.need_logits = true;
    }
    if (r->facts_in_place) bb.read_facts_in_place(r->injected->start, r->injected->pool_slots);
    if (r->is_probe()) add_probe(*r, s.positions, bb, b.probes);
    bb.end_sequence(r->block_table);
  }
  b.forward = std::move(bb.batch());
  choose_output(b, sample_vocab);
  return b;
}

RowResults read_rows(const StepBatch& batch, ForwardOutput& out, int64_t vocab, int64_t sample_vocab) {
  const size_t R = batch.rows.size();
  RowResults res{std::vector<int32_t>(R, -1), std::vector<std::optional<LogprobEntry>>(R), std::move(out.probe_mass)};
  if (!batch.need_logits) {
    IS_CHECK(out.ids.size() == R, "the backend returned {} ids for {} rows", out.ids.size(), R);
    res.sampled = std::move(out.ids);
    return res;
  }
  const std::vector<float>& logits = out.values;
  std::exception_ptr error;
  // Rows are independent (a request has one sampled row per step, so no rng is shared).
#pragma omp parallel for schedule(dynamic) if (R > 1)
  for (size_t i = 0; i < R; ++i) {
    try {
      const OutputRow& row = batch.rows[i];
      const SamplingParams& sp = row.req->sampling;
      std::span<const float> lg(logits.data() + static_cast<int64_t>(i) * vocab, static_cast<size_t>(sample_vocab));
      if (row.sample) {
        res.sampled[i] = sample_token(lg, sp, row.req->rng);
        if (sp.logprobs >= 0) res.scored[i] = compute_logprobs(lg, res.sampled[i], sp.logprobs);
      } else {
        res.scored[i] = compute_logprobs(lg, row.req->tokens[static_cast<size_t>(row.position + 1)], sp.prompt_logprobs,
                                         sp.prompt_distributions);
      }
    } catch (...) {
#pragma omp critical(inferscale_engine_rows)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
  return res;
}

}  // namespace inferscale
