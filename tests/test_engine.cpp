// Engine invariants on the built-in demo model (greedy): batched == alone, chunked prefill ==
// one-shot, prefix-cache hit == miss, preempted-and-resumed == uninterrupted, no leaked blocks.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "engine/engine.h"
#include "forwarding_backend.h"
#include "engine_test_util.h"
#include "model/model.h"
#include "util/check.h"

using namespace inferscale;

namespace {

const Model& demo() {
  static const Model m = load_model("demo");
  return m;
}

std::unique_ptr<Engine> make_engine(int64_t num_blocks = 256, int32_t budget = 2048, bool prefix_cache = true,
                                    int32_t block_size = 16) {
  BackendOptions bo;
  bo.block_size = block_size;
  bo.num_cache_blocks = num_blocks;
  EngineOptions eo;
  eo.scheduler.max_num_batched_tokens = budget;
  eo.scheduler.enable_prefix_caching = prefix_cache;
  return std::make_unique<Engine>(make_cpu_backend(demo().config, demo().weights, bo), demo().tokenizer, eo);
}

using test::greedy;
std::vector<int32_t> prompt(int n, uint32_t seed) { return test::byte_prompt(n, seed); }

std::vector<int32_t> run_alone(const std::vector<int32_t>& p, int max_tokens) {
  auto e = make_engine();
  e->add_request(p, greedy(max_tokens));
  auto out = e->run_to_completion();
  return out.at(0).new_tokens;
}

}  // namespace

TEST(Engine, BatchedEqualsAlone) {
  const std::vector<int> lens{1, 15, 16, 17, 40, 7};
  std::vector<std::vector<int32_t>> prompts, alone;
  for (size_t i = 0; i < lens.size(); ++i) {
    prompts.push_back(prompt(lens[i], static_cast<uint32_t>(i + 1)));
    alone.push_back(run_alone(prompts.back(), 10));
  }
  auto e = make_engine();
  std::vector<int64_t> ids;
  for (auto& p : prompts) ids.push_back(e->add_request(p, greedy(10)));
  auto out = e->run_to_completion();
  ASSERT_EQ(out.size(), prompts.size());
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_EQ(out[i].id, ids[i]);
    EXPECT_EQ(out[i].new_tokens, alone[i]) << "prompt " << i;
    EXPECT_EQ(out[i].finish, FinishReason::kLength);
  }
  EXPECT_EQ(e->blocks().num_free(), e->blocks().num_blocks());
}

// Greedy steps ask the backend for argmax ids only; a step with one sampling request gets the
// whole logits and samples on the host. Greedy tokens are the same either way.
TEST(Engine, GreedyTokensEqualWhetherTheStepReturnsIdsOrLogits) {
  const auto p = prompt(23, 5);
  const auto ids_path = run_alone(p, 12);
  auto e = make_engine();
  const int64_t g = e->add_request(p, greedy(12));
  SamplingParams hot;
  hot.temperature = 0.9f;
  hot.seed = 3;
  hot.max_tokens = 12;
  hot.ignore_eos = true;
  e->add_request(prompt(9, 6), hot);  // its rows make every step of the pair return logits
  for (const RequestOutput& o : e->run_to_completion())
    if (o.id == g) EXPECT_EQ(o.new_tokens, ids_path);
}

// A 20-token prompt in one sequence (blocks 0 and 1) with output rows at tokens 3, 11 and 19.
ForwardBatch three_row_batch() {
  ForwardBatch b;
  const auto toks = prompt(20, 8);
  for (int32_t i = 0; i < 20; ++i) {
    b.token_ids.push_back(toks[static_cast<size_t>(i)]);
    b.positions.push_back(i);
    b.slot_mapping.push_back(i);
  }
  b.q_indptr = {0, 20};
  b.kv_indptr = {0, 2};
  b.kv_indices = {0, 1};
  b.output_tokens = {3, 11, 19};
  return b;
}

// A CPU backend over the demo model, that batch, and the logits of its three rows ([3, vocab]).
struct ThreeRows {
  std::unique_ptr<Backend> backend;
  ForwardBatch batch;
  std::vector<float> logits;
};
ThreeRows three_rows() {
  BackendOptions bo;
  bo.num_cache_blocks = 16;
  ThreeRows t{make_cpu_backend(demo().config, demo().weights, bo), three_row_batch(), {}};
  t.backend->forward(t.batch, t.logits);
  return t;
}

// The backend's kArgmax output is the argmax of its kLogits output over the first argmax_vocab ids.
TEST(Engine, BackendArgmaxOutputIsTheLogitsArgmax) {
  auto [be, b, logits] = three_rows();
  ForwardOutput out;
  const std::vector<int32_t>& ids = out.ids;
  const int64_t V = demo().config.vocab_size;
  for (int32_t n : {0, 200, 7}) {
    ForwardBatch a = b;
    a.output = ForwardBatch::Output::kArgmax;
    a.argmax_vocab = n;
    be->forward(a, out);
    ASSERT_EQ(ids.size(), 3u);
    EXPECT_TRUE(out.values.empty());
    for (size_t r = 0; r < 3; ++r) {
      const float* row = logits.data() + r * static_cast<size_t>(V);
      const int64_t span = n == 0 ? V : n;
      EXPECT_EQ(static_cast<int64_t>(ids[r]), std::max_element(row, row + span) - row) << "row " << r << " n " << n;
    }
  }
}

// The backend's kSample output is sample_row (the CPU twin) on its kLogits output, row by row.
TEST(Engine, BackendSampleOutputIsTheRuleOnTheLogits) {
  auto [be, b, logits] = three_rows();
  ForwardOutput out;
  const std::vector<int32_t>& ids = out.ids;
  const int64_t V = demo().config.vocab_size;
  ForwardBatch a = b;
  a.output = ForwardBatch::Output::kSample;
  a.argmax_vocab = 200;
  a.sampling = {{0.0f, 0, 1.0f, 0.0f}, {5.0f, 0, 1.0f, 0.37f}, {2.0f, 30, 0.8f, 0.91f}};
  be->forward(a, out);
  ASSERT_EQ(ids.size(), 3u);
  for (size_t r = 0; r < 3; ++r)
    EXPECT_EQ(static_cast<int32_t>(ids[r]), sample_row(logits.data() + r * static_cast<size_t>(V), 200, a.sampling[r])) << "row " << r;
  a.sampling.pop_back();
  EXPECT_ANY_THROW(be->forward(a, out));  // one RowSampling per output row
  std::vector<float> values;
  EXPECT_THROW(be->forward(a, values), Error) << "ids come back as ids, not as floats";
}

TEST(Engine, ChunkedPrefillEqualsOneShot) {
  const auto p = prompt(61, 11);
  const auto one_shot = run_alone(p, 8);
  for (int32_t budget : {1, 7, 16, 33}) {
    auto e = make_engine(256, budget);
    e->add_request(p, greedy(8));
    e->add_request(prompt(20, 12), greedy(8));  // a neighbour competing for the budget
    auto out = e->run_to_completion();
    EXPECT_EQ(out.at(0).new_tokens, one_shot) << "budget " << budget;
    EXPECT_EQ(e->blocks().num_free(), e->blocks().num_blocks());
  }
}

TEST(Engine, PrefixCacheHitEqualsMiss) {
  const auto p = prompt(45, 21);
  auto e = make_engine();
  e->add_request(p, greedy(6));
  auto first = e->run_to_completion().at(0);
  EXPECT_EQ(first.num_cached_tokens, 0);
  e->add_request(p, greedy(6));
  auto second = e->run_to_completion().at(0);
  EXPECT_EQ(second.num_cached_tokens, 32);  // two full blocks; the last token is always computed
  EXPECT_EQ(second.new_tokens, first.new_tokens);
  // A prompt sharing only the first block hits one block and still matches its own miss.
  auto q = p;
  q[20] = (q[20] + 1) % 256;
  e->add_request(q, greedy(6));
  auto third = e->run_to_completion().at(0);
  EXPECT_EQ(third.num_cached_tokens, 16);
  EXPECT_EQ(third.new_tokens, run_alone(q, 6));
  auto nocache = make_engine(256, 2048, false);
  nocache->add_request(p, greedy(6));
  EXPECT_EQ(nocache->run_to_completion().at(0).new_tokens, first.new_tokens);
  EXPECT_EQ(e->blocks().num_free(), e->blocks().num_blocks());
}

// The cache salt (the server's tenant, as vLLM's cache_salt) joins every block's hash: a request
// hits only blocks published under its own salt, and salted blocks never serve unsalted requests.
TEST(Engine, CacheSaltSeparatesPrefixCacheBlocks) {
  const auto p = prompt(45, 22);
  auto e = make_engine();
  auto run = [&](uint64_t salt) {
    e->add_request(p, greedy(6), std::nullopt, salt);
    return e->run_to_completion().at(0);
  };
  const RequestOutput a = run(0xA);
  EXPECT_EQ(a.num_cached_tokens, 0);
  const RequestOutput b = run(0xB);  // the same tokens under another salt: no hit
  EXPECT_EQ(b.num_cached_tokens, 0);
  EXPECT_EQ(b.new_tokens, a.new_tokens);
  EXPECT_EQ(run(0).num_cached_tokens, 0);  // unsalted: no hit on salted blocks
  EXPECT_EQ(run(0xA).num_cached_tokens, 32);
  EXPECT_EQ(run(0xB).num_cached_tokens, 32);
  EXPECT_EQ(run(0).num_cached_tokens, 32);
  EXPECT_EQ(e->blocks().num_free(), e->blocks().num_blocks());
}

TEST(Engine, PreemptedAndResumedEqualsUninterrupted) {
  std::vector<std::vector<int32_t>> prompts, alone;
  for (uint32_t i = 0; i < 4; ++i) {
    prompts.push_back(prompt(30, 31 + i));
    alone.push_back(run_alone(prompts.back(), 40));
  }
  // 4 requests x up to 70 tokens = 5 blocks each; 12 blocks force preemption while decoding.
  auto e = make_engine(12);
  for (auto& p : prompts) e->add_request(p, greedy(40));
  auto out = e->run_to_completion();
  EXPECT_GT(e->stats().preemptions, 0);
  ASSERT_EQ(out.size(), prompts.size());
  for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i].new_tokens, alone[i]) << "request " << i;
  EXPECT_EQ(e->blocks().num_free(), e->blocks().num_blocks());
}

TEST(Engine, OddBlockSizeGivesTheSameTokens) {
  const auto p = prompt(37, 41);
  auto e = make_engine(256, 5, true, 3);
  e->add_request(p, greedy(9));
  EXPECT_EQ(e->run_to_completion().at(0).new_tokens, run_alone(p, 9));
}

TEST(Engine, StopsOnMaxTokensStopStringsAndAbort) {
  auto e = make_engine();
  auto s = greedy(5);
  e->add_request(prompt(10, 51), s);
  auto out = e->run_to_completion().at(0);
  EXPECT_EQ(out.new_tokens.size(), 5u);
  EXPECT_EQ(out.finish, FinishReason::kLength);
  // A stop string taken from the text the model produces ends the output right before it.
  auto s2 = greedy(30);
  e->add_request(prompt(10, 52), s2);
  const std::string full = e->run_to_completion().at(0).text;
  if (full.size() >= 6) {
    const std::string stop = full.substr(3, 2);
    s2.stop = {stop};
    e->add_request(prompt(10, 52), s2);
    auto stopped = e->run_to_completion().at(0);
    EXPECT_EQ(stopped.finish, FinishReason::kStop);
    EXPECT_EQ(stopped.text, full.substr(0, full.find(stop)));
  }
  const int64_t id = e->add_request(prompt(10, 53), greedy(100));
  e->step();
  e->abort(id);
  EXPECT_FALSE(e->has_unfinished());
  EXPECT_EQ(e->blocks().num_free(), e->blocks().num_blocks());
}

TEST(Engine, RejectsBadRequestsWithClearErrors) {
  auto e = make_engine(4);
  EXPECT_THROW(e->add_request({}, greedy(1)), Error);
  EXPECT_THROW(e->add_request({100000}, greedy(1)), Error);
  EXPECT_THROW(e->add_request(prompt(10, 1), greedy(0)), Error);
  auto s = greedy(1);
  s.top_p = 0;
  EXPECT_THROW(e->add_request(prompt(10, 1), s), Error);
  for (const int64_t slot : {int64_t{-1}, int64_t{1} << 32}) {  // a pool slot a forward batch cannot hold
    InjectedSpan span;
    span.start = 2;
    span.end = 3;
    span.pool_slots = {slot};
    EXPECT_THROW(e->add_request(prompt(10, 1), greedy(1), span), Error) << slot;
  }
  try {
    e->add_request(prompt(60, 1), greedy(10));  // 70 tokens > 4 blocks x 16
    FAIL();
  } catch (const Error& err) {
    EXPECT_EQ(err.kind(), ErrorKind::kResource);
  }
}

// EngineStats counts each forward by kind: a prefill alone, then decodes, then a prompt arriving
// beside a running decode (mixed), and their wall time.
TEST(Engine, ForwardsAreCountedByKind) {
  auto e = make_engine();
  e->add_request(prompt(20, 3), greedy(4));
  e->step();  // the prompt: a prefill
  EXPECT_EQ(e->stats().prefill_steps, 1);
  e->step();  // its first decode
  EXPECT_EQ(e->stats().decode_steps, 1);
  e->add_request(prompt(9, 4), greedy(2));
  e->step();  // the new prompt beside the running decode
  EXPECT_EQ(e->stats().mixed_steps, 1);
  e->run_to_completion();
  const EngineStats& s = e->stats();
  EXPECT_EQ(s.prefill_steps, 1);
  EXPECT_EQ(s.mixed_steps, 1);
  EXPECT_EQ(s.decode_steps + s.mixed_steps + s.prefill_steps, s.steps);
  EXPECT_GT(s.decode_step_seconds, 0.0);
  EXPECT_GT(s.mixed_step_seconds, 0.0);
  EXPECT_GT(s.prefill_step_seconds, 0.0);
}

namespace {

// A backend whose forwards take base_ms + per_token_ms a token longer (a slow device).
class SlowBackend : public test_support::ForwardingBackend {
 public:
  SlowBackend(std::unique_ptr<Backend> inner, double base_ms, double per_token_ms)
      : ForwardingBackend(std::move(inner)), base_ms_(base_ms), per_token_ms_(per_token_ms) {}
  using Backend::forward;
  void forward(const ForwardBatch& b, ForwardOutput& out) override {
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::duration<double, std::milli>(base_ms_ + per_token_ms_ * b.num_tokens());
    ForwardingBackend::forward(b, out);
    std::this_thread::sleep_until(until);
  }

 private:
  double base_ms_, per_token_ms_;
};

// Tokens computed by each step of `e` until it has nothing left, and the engine's own time of
// each step's forward (EngineStats: background captures are prefill forwards).
std::vector<std::pair<int64_t, double>> steps_until_idle(Engine& e) {
  std::vector<std::pair<int64_t, double>> steps;
  for (int guard = 0; guard < 1000 && e.has_unfinished(); ++guard) {
    const EngineStats before = e.stats();
    e.step();
    const EngineStats after = e.stats();
    // Every kind's time: a background step whose sequences have one token each (the ends of
    // chunked captures, when a loaded machine has shrunk the steps) counts as a decode step.
    const auto seconds = [](const EngineStats& s) {
      return s.decode_step_seconds + s.mixed_step_seconds + s.prefill_step_seconds;
    };
    steps.push_back({after.tokens_computed - before.tokens_computed, seconds(after) - seconds(before)});
  }
  return steps;
}

}  // namespace

// EngineOptions::background_step_seconds sizes background steps by their time: each step's tokens
// are the last one's scaled to the target by the time the engine measured for it (n' = T n / t,
// within [kMinBackgroundTokens, the scheduler's cap]), starting from 32: on a slow device (5 ms +
// 0.5 ms a token, 40 ms target; near 70 tokens on an idle machine), on a fast one (where the cap
// bounds them), and 0, which keeps the fixed cap from the start.
TEST(Engine, BackgroundStepsAreSizedByTheirTime) {
  const auto run = [](double per_token_ms, double target_s, int32_t idle_cap) {
    BackendOptions bo;
    bo.num_cache_blocks = 256;
    bo.num_pool_blocks = 64;
    EngineOptions eo;
    eo.scheduler.background_tokens_idle = idle_cap;
    eo.background_step_seconds = target_s;
    auto be = std::make_unique<SlowBackend>(make_cpu_backend(demo().config, demo().weights, bo), 5.0 * (per_token_ms > 0),
                                            per_token_ms);
    Engine e(std::move(be), demo().tokenizer, eo);
    for (int c = 0; c < 6; ++c) {
      CaptureSeq cap;
      cap.tokens = prompt(150, 90 + static_cast<uint32_t>(c));  // a window of 50 tokens, then a fact of 100 kept
      for (int i = 0; i < 150; ++i) cap.capture_slots.push_back(i < 50 ? -1 : c * 100 + i - 50);
      e.add_background_capture(std::move(cap));
    }
    auto steps = steps_until_idle(e);
    EXPECT_EQ(e.num_background(), 0u);
    EXPECT_EQ(e.stats().captures, 6);
    EXPECT_EQ(e.blocks().num_free(), e.blocks().num_blocks());
    int64_t total = 0;
    for (const auto& [n, t] : steps) total += n;
    EXPECT_EQ(total, 6 * 150);
    // Every step but the last (which takes what is left) follows the rule from the one before.
    for (size_t i = 1; i + 1 < steps.size(); ++i) {
      const double want = target_s > 0 ? std::clamp(target_s * steps[i - 1].first / steps[i - 1].second,
                                                    double{Engine::kMinBackgroundTokens}, static_cast<double>(idle_cap))
                                       : idle_cap;
      EXPECT_NEAR(static_cast<double>(steps[i].first), std::floor(want), 1.0) << "step " << i;
    }
    return steps;
  };
  auto slow = run(0.5, 0.040, 256);
  ASSERT_GT(slow.size(), 4u);
  EXPECT_EQ(slow[0].first, 4 * Engine::kMinBackgroundTokens);  // nothing timed yet
  // (Where it settles is left to the rule: a loaded machine stretches the steps, and so shrinks the
  // next ones; the rule itself is checked step by step above.)
  auto fast = run(0.0, 1.0, 64);  // a target that even a loaded machine meets
  EXPECT_EQ(fast[0].first, 32);
  for (size_t i = 1; i + 1 < fast.size(); ++i) EXPECT_EQ(fast[i].first, 64) << "step " << i;
  auto fixed = run(0.5, 0.0, 64);
  for (size_t i = 0; i + 1 < fixed.size(); ++i) EXPECT_EQ(fixed[i].first, 64) << "step " << i;
}

TEST(Engine, RejectsANegativeBackgroundStepTime) {
  EngineOptions eo;
  eo.background_step_seconds = -1;
  BackendOptions bo;
  EXPECT_THROW(Engine(make_cpu_backend(demo().config, demo().weights, bo), demo().tokenizer, eo), Error);
}
