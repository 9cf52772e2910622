// An engine step's model input and output, between the scheduler and the requests:
//
//   prepare_step(plan)        the memory injection (pool slots -> the requests' cache slots) and
//                             one ForwardBatch over every scheduled token, with its output rows
//   read_rows(batch, output)  each row's sampled token and logprobs, from the forward's output
//
// Output rows, request by request in plan order: its prompt rows (positions whose logits score
// the next prompt token, for prompt_logprobs), then its sampled row.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "backend/backend.h"
#include "engine/logprobs.h"
#include "engine/scheduler.h"

namespace inferscale {

struct OutputRow {
  Request* req;
  int32_t position;  // the token whose logits the row holds
  bool sample;       // the request's next token (else: a prompt row, scored only)
};

// A probe's rows in this forward (ForwardBatch::probes, in the same order): positions
// [first_position, first_position + rows), each measured over `keys` injected tokens.
struct ProbedRows {
  Request* req;
  int32_t first_position;
  int32_t rows;
  int32_t keys;
};

struct StepBatch {
  InjectBatch inject;
  ForwardBatch forward;
  std::vector<OutputRow> rows;
  std::vector<ProbedRows> probes;
  bool need_logits = false;  // some row needs the full logits, not just a sampled id
};

// Also sets each injecting request's num_injected_tokens. `sample_vocab`: the ids sampling may
// return (the backend samples them itself unless a row needs logits).
StepBatch prepare_step(const SchedulerOutput& plan, int32_t block_size, int64_t sample_vocab);

struct RowResults {
  std::vector<int32_t> sampled;                   // [rows] the token of a sampled row, else -1
  std::vector<std::optional<LogprobEntry>> scored;  // [rows] logprobs where the request asked
  std::vector<float> probe_mass;                  // ForwardOutput::probe_mass
};

// `vocab`: the model's (the width of a logits row); only the first `sample_vocab` ids are sampled
// or compete in the log-softmax. Draws from the sampled rows' requests' rngs.
RowResults read_rows(const StepBatch& batch, ForwardOutput& out, int64_t vocab, int64_t sample_vocab);

}  // namespace inferscale
