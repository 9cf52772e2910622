// The engine on the CUDA backend scheduling a step ahead (its default there: the device computes
// step N while the host plans N+1) gives the tokens of steps taken one at a time: the built-in
// demo model (head_dim 32: the tiles), greedy and seeded sampling on the device, max_tokens from 1
// on, chunked prefill, stop tokens met while the next step computes the request, and an abort
// between steps. A step planned ahead is queued behind the one computing, its tokens fed on the
// device (cuda::feed_tokens) from that one's ids, through graphs and eagerly, as the host would
// write them.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "engine/engine.h"
#include "../engine_test_util.h"
#include "model/model.h"

namespace inferscale {
namespace {

const Model& demo() {
  static const Model m = load_model("demo");
  return m;
}

std::unique_ptr<Engine> cuda_engine(ScheduleAhead ahead, int32_t budget) {
  BackendOptions bo;
  bo.num_cache_blocks = 512;
  EngineOptions eo;
  eo.schedule_ahead = ahead;
  eo.scheduler.max_num_batched_tokens = budget;
  return std::make_unique<Engine>(make_cuda_backend(demo().config, demo().weights, bo), demo().tokenizer, eo);
}

using test::greedy;
std::vector<int32_t> prompt(int n, uint32_t seed) { return test::byte_prompt(n, seed); }

std::vector<RequestOutput> run(ScheduleAhead ahead, int32_t budget, const std::vector<std::vector<int32_t>>& prompts,
                               const std::vector<SamplingParams>& sampling) {
  auto e = cuda_engine(ahead, budget);
  for (size_t i = 0; i < prompts.size(); ++i) e->add_request(prompts[i], sampling[i]);
  auto out = e->run_to_completion();
  EXPECT_EQ(e->blocks().num_free(), e->blocks().num_blocks());
  if (ahead != ScheduleAhead::kNever) EXPECT_GT(e->stats().forwards_queued, 0) << "steps queued behind the one computing";
  return out;
}

void expect_same_tokens(const std::vector<RequestOutput>& want, const std::vector<RequestOutput>& got) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].new_tokens, want[i].new_tokens) << "request " << i;
    EXPECT_EQ(got[i].finish, want[i].finish) << "request " << i;
  }
}

TEST(CudaEngine, SchedulingAheadGivesTheTokensOfOneStepAtATime) {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<SamplingParams> sampling;
  for (int i = 0; i < 12; ++i) {
    prompts.push_back(prompt(5 + 7 * i, static_cast<uint32_t>(i + 1)));
    SamplingParams s = greedy(1 + 3 * i);
    if (i % 3 == 1) {  // sampled on the device from the request's seed
      s.temperature = 0.8f;
      s.top_p = 0.9f;
      s.seed = 100 + static_cast<uint64_t>(i);
    }
    sampling.push_back(s);
  }
  for (const int32_t budget : {2048, 40}) {
    SCOPED_TRACE("budget " + std::to_string(budget));
    expect_same_tokens(run(ScheduleAhead::kNever, budget, prompts, sampling),
                       run(ScheduleAhead::kWhereOverlapping, budget, prompts, sampling));
  }
}

TEST(CudaEngine, StopsAndAbortsWhileTheNextStepComputesTheRequest) {
  const auto p = prompt(12, 7);
  const std::vector<RequestOutput> whole = run(ScheduleAhead::kNever, 2048, {p}, {greedy(20)});
  ASSERT_EQ(whole.at(0).new_tokens.size(), 20u);
  SamplingParams by_token = greedy(20);
  by_token.ignore_eos = false;
  by_token.stop_token_ids = {whole[0].new_tokens[5]};
  const std::vector<RequestOutput> want = run(ScheduleAhead::kNever, 2048, {p}, {by_token});
  EXPECT_EQ(want.at(0).finish, FinishReason::kStop);
  expect_same_tokens(want, run(ScheduleAhead::kWhereOverlapping, 2048, {p}, {by_token}));

  auto e = cuda_engine(ScheduleAhead::kWhereOverlapping, 2048);
  const int64_t a = e->add_request(prompt(10, 8), greedy(30));
  const int64_t b = e->add_request(p, greedy(20));
  std::vector<int32_t> got;
  for (const RequestOutput& o : e->step())
    if (o.id == b) got.insert(got.end(), o.new_tokens.begin(), o.new_tokens.end());
  e->abort(a);  // the next step's forward, launched, computes it
  while (e->has_unfinished())
    for (const RequestOutput& o : e->step()) {
      EXPECT_NE(o.id, a);
      if (o.id == b) got.insert(got.end(), o.new_tokens.begin(), o.new_tokens.end());
    }
  EXPECT_EQ(got, whole[0].new_tokens);
  EXPECT_EQ(e->blocks().num_free(), e->blocks().num_blocks());
}

// The feed kernel against tokens the host writes, queued behind the forward whose ids it reads
// (launch_forward twice, then the waits), with graphs (a decode bucket) and eagerly; the GPU's
// idle time before a forward queued so is read from its events.
TEST(CudaEngine, FedTokensAreTheIdsOfTheForwardBefore) {
  for (const bool graphs : {true, false}) {
    SCOPED_TRACE(graphs ? "graphs" : "eager");
    BackendOptions bo;
    bo.num_cache_blocks = 4;
    bo.cuda_graphs = graphs;
    auto be = make_cuda_backend(demo().config, demo().weights, bo);
    ForwardBatch prompts = test::seqs_in_blocks({prompt(5, 31), prompt(3, 32)}, {0, 0});
    prompts.output = ForwardBatch::Output::kArgmax;
    ForwardBatch fed = test::seqs_in_blocks({{0}, {0}}, {5, 3});
    fed.token_src = {1, 0};  // crossed, so that the rows are told apart
    for (int round = 0; round < 3; ++round) {  // graphs: warm-up, capture, replay
      ForwardOutput first, got;
      be->launch_forward(prompts, first);
      be->launch_forward(fed, got);  // queued behind it
      be->wait_forward();
      ASSERT_EQ(first.ids.size(), 2u);
      be->wait_forward();
      EXPECT_GE(be->last_idle_ms(), 0.0f);

      ForwardOutput again, want;
      be->forward(prompts, again);
      EXPECT_EQ(again.ids, first.ids);
      be->forward(test::seqs_in_blocks({{first.ids[1]}, {first.ids[0]}}, {5, 3}), want);
      ASSERT_FALSE(want.values.empty());
      EXPECT_EQ(got.values, want.values) << "round " << round;
    }
    // A row outside the ids of the forward before is refused.
    ForwardOutput first, got;
    be->forward(prompts, first);
    ForwardBatch outside = fed;
    outside.token_src = {2, -1};
    EXPECT_THROW(be->forward(outside, got), Error);
  }
}

}  // namespace
}  // namespace inferscale
