// Scheduling a step ahead (EngineOptions::schedule_ahead, engine/step_ahead.cpp): the outputs are
// those of steps taken one at a time, token for token (greedy and seeded sampling, stop tokens and
// strings met while the next step computes the request, max_tokens, logprobs, preemption, chunked
// prefill, the prefix cache), on the CPU backend (ScheduleAhead::kAlways) and on one that overlaps
// its forwards (tests/deferring_backend.h); a request that finishes or is aborted while a launched
// forward computes it leaves once that forward ends, and no block or request is left behind. A
// step planned ahead is queued behind the one computing, its tokens fed from that one's ids (the
// CPU backend's feed_tokens, the twin of the device's).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "deferring_backend.h"
#include "engine_test_util.h"
#include "engine/engine.h"
#include "model/model.h"

using namespace inferscale;

namespace {

const Model& demo() {
  static const Model m = load_model("demo");
  return m;
}

enum class Kind { kSync, kAheadOnCpu, kAheadOverlapping };

std::unique_ptr<Engine> make_engine(Kind kind, int64_t num_blocks, int32_t budget) {
  BackendOptions bo;
  bo.num_cache_blocks = num_blocks;
  EngineOptions eo;
  eo.scheduler.max_num_batched_tokens = budget;
  eo.schedule_ahead = kind == Kind::kSync ? ScheduleAhead::kNever : ScheduleAhead::kAlways;
  std::unique_ptr<Backend> be = make_cpu_backend(demo().config, demo().weights, bo);
  if (kind == Kind::kAheadOverlapping) {
    be = std::make_unique<test_support::DeferringBackend>(std::move(be), 2);
    eo.schedule_ahead = ScheduleAhead::kWhereOverlapping;
  }
  return std::make_unique<Engine>(std::move(be), demo().tokenizer, eo);
}

using test::greedy;
std::vector<int32_t> prompt(int n, uint32_t seed) { return test::byte_prompt(n, seed); }

struct Workload {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<SamplingParams> sampling;
};

// Requests of every kind the step ahead treats apart, all added before the first step.
Workload workload() {
  Workload w;
  auto add = [&](int len, uint32_t seed, SamplingParams s) {
    w.prompts.push_back(prompt(len, seed));
    w.sampling.push_back(std::move(s));
  };
  add(7, 1, greedy(1));    // ends with its first token: nothing planned ahead for it
  add(15, 2, greedy(2));
  add(17, 3, greedy(23));
  add(40, 4, greedy(12));  // chunked under a small budget
  SamplingParams seeded = greedy(19);
  seeded.temperature = 0.9f;
  seeded.top_p = 0.95f;
  seeded.seed = 1234;
  add(23, 5, seeded);
  seeded.seed = 99;
  seeded.top_k = 20;
  add(9, 6, seeded);
  SamplingParams lp = greedy(6);  // samples from logits on the host: its steps are not planned ahead
  lp.logprobs = 2;
  add(11, 7, lp);
  SamplingParams scored = greedy(0);  // scores its prompt only
  scored.prompt_logprobs = 1;
  add(13, 8, scored);
  add(15, 2, greedy(9));  // the prefix cache: the second request's prompt again
  return w;
}

std::vector<RequestOutput> run(Kind kind, const Workload& w, int64_t num_blocks, int32_t budget) {
  auto e = make_engine(kind, num_blocks, budget);
  for (size_t i = 0; i < w.prompts.size(); ++i) e->add_request(w.prompts[i], w.sampling[i]);
  auto out = e->run_to_completion();
  EXPECT_FALSE(e->has_unfinished());
  if (kind != Kind::kSync) EXPECT_GT(e->stats().forwards_queued, 0) << "steps queued behind the one computing";
  EXPECT_EQ(e->blocks().num_free(), e->blocks().num_blocks()) << "no block left behind";
  return out;
}

void expect_same(const std::vector<RequestOutput>& want, const std::vector<RequestOutput>& got) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    EXPECT_EQ(got[i].new_tokens, want[i].new_tokens);
    EXPECT_EQ(got[i].text, want[i].text);
    EXPECT_EQ(got[i].finish, want[i].finish);
    ASSERT_EQ(got[i].logprobs.size(), want[i].logprobs.size());
    for (size_t j = 0; j < want[i].logprobs.size(); ++j) EXPECT_EQ(got[i].logprobs[j].logprob, want[i].logprobs[j].logprob);
    EXPECT_EQ(got[i].prompt_logprobs.size(), want[i].prompt_logprobs.size());
  }
}

}  // namespace

TEST(EngineAhead, OutputsEqualStepsOneAtATime) {
  const Workload w = workload();
  for (const auto& [blocks, budget] : {std::pair<int64_t, int32_t>{256, 2048}, {256, 24}, {14, 64}}) {
    SCOPED_TRACE("cache blocks " + std::to_string(blocks) + ", budget " + std::to_string(budget));
    const auto want = run(Kind::kSync, w, blocks, budget);
    expect_same(want, run(Kind::kAheadOnCpu, w, blocks, budget));
    expect_same(want, run(Kind::kAheadOverlapping, w, blocks, budget));
  }
}

// Stop tokens and stop strings taken from a request's own greedy output: it finishes in a step
// whose next step was already planned with it (its rows there are dropped), token for token as
// one step at a time.
TEST(EngineAhead, StopsMetWhileTheNextStepComputesTheRequest) {
  const auto p = prompt(12, 11);
  auto full = make_engine(Kind::kSync, 256, 2048);
  full->add_request(p, greedy(30));
  const RequestOutput whole = full->run_to_completion().at(0);
  ASSERT_GE(whole.new_tokens.size(), 10u);
  Workload w;
  SamplingParams by_token = greedy(30);
  by_token.stop_token_ids = {whole.new_tokens[6]};
  by_token.ignore_eos = false;
  w.prompts = {p, p, prompt(20, 12)};
  SamplingParams by_string = greedy(30);
  if (whole.text.size() >= 8) by_string.stop = {whole.text.substr(5, 2)};
  w.sampling = {by_token, by_string, greedy(30)};
  const auto want = run(Kind::kSync, w, 256, 2048);
  EXPECT_EQ(want[0].finish, FinishReason::kStop);
  EXPECT_LT(want[0].new_tokens.size(), 30u);
  expect_same(want, run(Kind::kAheadOnCpu, w, 256, 2048));
  expect_same(want, run(Kind::kAheadOverlapping, w, 256, 2048));
}

// An abort between steps of a request the launched forward computes: no output of it follows, it
// leaves (blocks, the scheduler) once that forward ends, and the others are served as alone.
TEST(EngineAhead, AnAbortedRequestLeavesOnceItsForwardEnds) {
  for (const Kind kind : {Kind::kAheadOnCpu, Kind::kAheadOverlapping}) {
    auto alone = make_engine(Kind::kSync, 256, 2048);
    alone->add_request(prompt(10, 22), greedy(12));
    const std::vector<int32_t> want = alone->run_to_completion().at(0).new_tokens;

    auto e = make_engine(kind, 256, 2048);
    const int64_t a = e->add_request(prompt(10, 21), greedy(40));
    const int64_t b = e->add_request(prompt(10, 22), greedy(12));
    std::vector<int32_t> got;
    for (const RequestOutput& o : e->step())
      if (o.id == b) got.insert(got.end(), o.new_tokens.begin(), o.new_tokens.end());
    e->abort(a);
    EXPECT_EQ(e->find(a), nullptr);
    EXPECT_LT(e->blocks().num_free(), e->blocks().num_blocks());
    while (e->has_unfinished()) {
      for (const RequestOutput& o : e->step()) {
        EXPECT_NE(o.id, a) << "no output after its abort";
        if (o.id == b) got.insert(got.end(), o.new_tokens.begin(), o.new_tokens.end());
      }
    }
    EXPECT_EQ(got, want);
    EXPECT_EQ(e->blocks().num_free(), e->blocks().num_blocks());
  }
}

// The CPU twin of the device's feed: a batch's fed tokens are the ids the forward before it
// returned, row for row, exactly as if the host had written them; a row outside those ids, or
// after a forward that returned logits, is an error, as are token_src arrays of the wrong shape.
TEST(EngineAhead, FedTokensAreTheIdsOfTheForwardBefore) {
  BackendOptions bo;
  bo.num_cache_blocks = 4;
  auto be = make_cpu_backend(demo().config, demo().weights, bo);
  ForwardBatch prompts = test::seqs_in_blocks({prompt(5, 31), prompt(3, 32)}, {0, 0});
  prompts.output = ForwardBatch::Output::kArgmax;
  ForwardOutput first;
  be->forward(prompts, first);
  ASSERT_EQ(first.ids.size(), 2u);

  ForwardBatch fed = test::seqs_in_blocks({{0}, {0}}, {5, 3});
  fed.token_src = {1, 0};  // crossed, so that the rows are told apart
  std::vector<float> fed_logits;
  be->forward(fed, fed_logits);

  be->forward(prompts, first);  // the same cache again
  const ForwardBatch written = test::seqs_in_blocks({{first.ids[1]}, {first.ids[0]}}, {5, 3});
  std::vector<float> want;
  be->forward(written, want);
  EXPECT_EQ(fed_logits, want);

  // The forward before returned logits: nothing to feed from.
  EXPECT_THROW(be->forward(fed, fed_logits), Error);
  be->forward(prompts, first);
  ForwardBatch outside = fed;
  outside.token_src = {2, -1};
  EXPECT_THROW(be->forward(outside, fed_logits), Error);
  ForwardBatch short_src = fed;
  short_src.token_src = {0};
  EXPECT_THROW(short_src.validate(64, 16), Error);
  short_src.token_src = {0, -2};
  EXPECT_THROW(short_src.validate(64, 16), Error);
}
