// Logprobs through the engine on the demo model: sampled-token and prompt logprobs equal the
// log-softmax of the logits the backend produced (recomputed here in long double), the argmax-only
// output is left only when a step needs logits, and chunked prefill, preemption, the prefix cache
// and injected spans neither drop nor duplicate prompt logprobs.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <optional>
#include <tuple>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "engine/engine.h"
#include "forward_test_util.h"
#include "forwarding_backend.h"
#include "logprobs_test_util.h"
#include "model/model.h"
#include "util/check.h"
#include "kv_rows_test_util.h"

using namespace inferscale;

namespace {

const Model& demo() {
  static const Model m = load_model("demo");
  return m;
}

BackendOptions backend_options(int64_t num_blocks, int64_t pool_blocks = 0) {
  BackendOptions bo;
  bo.block_size = 16;
  bo.num_cache_blocks = num_blocks;
  bo.num_pool_blocks = pool_blocks;
  bo.num_threads = 1;
  return bo;
}

// Records what every forward asked for and returned.
class RecordingBackend final : public test_support::ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  struct Call {
    ForwardBatch::Output output;
    int32_t rows;
    ForwardOutput out;
  };
  std::vector<Call> calls;
  using ForwardingBackend::forward;
  void forward(const ForwardBatch& b, ForwardOutput& out) override {
    ForwardingBackend::forward(b, out);
    calls.push_back({b.output, static_cast<int32_t>(b.output_tokens.size()), out});
  }
};

std::unique_ptr<Engine> make_engine(int64_t num_blocks = 256, int32_t budget = 2048, std::unique_ptr<Backend> be = nullptr) {
  EngineOptions eo;
  eo.scheduler.max_num_batched_tokens = budget;
  if (!be) be = make_cpu_backend(demo().config, demo().weights, backend_options(num_blocks));
  return std::make_unique<Engine>(std::move(be), demo().tokenizer, eo);
}

std::vector<int32_t> prompt(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (auto& t : p) t = static_cast<int32_t>(rng() % 256);  // byte tokens
  return p;
}

SamplingParams scored(int max_tokens, int32_t logprobs, int32_t prompt_logprobs) {
  SamplingParams s;
  s.temperature = 0;
  s.max_tokens = max_tokens;
  s.ignore_eos = true;
  s.logprobs = logprobs;
  s.prompt_logprobs = prompt_logprobs;
  return s;
}

// The logits of every position of `tokens`, from one forward of a fresh backend: [n][V].
std::vector<std::vector<float>> full_logits(const std::vector<int32_t>& tokens) {
  auto be = make_cpu_backend(demo().config, demo().weights, backend_options(64));
  const int32_t n = static_cast<int32_t>(tokens.size());
  std::vector<int32_t> all(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) all[static_cast<size_t>(i)] = i;
  return inferscale::testing::run_sequence(*be, tokens, n, n, all);
}

// Checks an entry against log_softmax(row) in long double: value, rank and the top-N ids.
void expect_entry(const LogprobEntry& e, const float* row, int64_t V, int32_t token, int32_t top_n) {
  const std::vector<double> ref = inferscale::testing::reference_log_softmax(row, V);
  EXPECT_EQ(e.token, token);
  EXPECT_NEAR(e.logprob, ref[static_cast<size_t>(token)], 1e-12);
  EXPECT_EQ(e.rank, inferscale::testing::reference_rank(row, V, token));
  ASSERT_EQ(static_cast<int32_t>(e.top.size()), top_n);
  for (int32_t i = 0; i < top_n; ++i) {
    const int32_t id = e.top[static_cast<size_t>(i)].id;
    EXPECT_NEAR(e.top[static_cast<size_t>(i)].logprob, ref[static_cast<size_t>(id)], 1e-12);
    if (i > 0) EXPECT_GE(row[e.top[static_cast<size_t>(i - 1)].id], row[id]);
  }
  // No id outside the list beats its last entry.
  if (top_n > 0) EXPECT_LE(inferscale::testing::reference_rank(row, V, e.top.back().id), top_n);
}

// |a - b| over two prompt-logprob lists of the same shape (nullopt where both are nullopt).
double max_diff(const std::vector<std::optional<LogprobEntry>>& a, const std::vector<std::optional<LogprobEntry>>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    EXPECT_EQ(a[i].has_value(), b[i].has_value()) << "entry " << i;
    if (!a[i] || !b[i]) continue;
    EXPECT_EQ(a[i]->token, b[i]->token);
    EXPECT_EQ(a[i]->top.size(), b[i]->top.size());
    d = std::max(d, std::abs(a[i]->logprob - b[i]->logprob));
    for (size_t k = 0; k < std::min(a[i]->top.size(), b[i]->top.size()); ++k)
      d = std::max(d, std::abs(a[i]->top[k].logprob - b[i]->top[k].logprob));
  }
  return d;
}

double max_diff(const std::vector<LogprobEntry>& a, const std::vector<LogprobEntry>& b) {
  std::vector<std::optional<LogprobEntry>> oa(a.begin(), a.end()), ob(b.begin(), b.end());
  return max_diff(oa, ob);
}

RequestOutput run_alone(const std::vector<int32_t>& p, const SamplingParams& sp) {
  auto e = make_engine();
  e->add_request(p, sp);
  return e->run_to_completion().at(0);
}

// Chunking and batching change the shapes of the CPU backend's GEMMs and attention panels, hence
// the last bits of the logits: logprobs computed under different schedules agree to this.
constexpr double kScheduleTolerance = 1e-5;

}  // namespace

TEST(EngineLogprobs, PromptAndFirstTokenEqualTheLogSoftmaxOfTheBackendsLogits) {
  const auto p = prompt(40, 3);
  const RequestOutput o = run_alone(p, scored(1, 5, 5));
  const auto ref = full_logits(p);  // the same single forward the engine ran
  const int64_t V = demo().config.vocab_size;
  ASSERT_EQ(o.prompt_logprobs.size(), p.size());
  EXPECT_FALSE(o.prompt_logprobs[0].has_value());
  for (size_t i = 1; i < p.size(); ++i) {
    ASSERT_TRUE(o.prompt_logprobs[i].has_value()) << i;
    expect_entry(*o.prompt_logprobs[i], ref[i - 1].data(), V, p[i], 5);
  }
  ASSERT_EQ(o.logprobs.size(), 1u);
  expect_entry(o.logprobs[0], ref.back().data(), V, o.new_tokens[0], 5);
  EXPECT_EQ(o.logprobs[0].rank, 1);  // greedy takes the best token
}

TEST(EngineLogprobs, SampledTokensAreScoredOnTheRawLogitsTheSamplerSaw) {
  const auto p = prompt(23, 5);
  SamplingParams sp = scored(12, 3, -1);
  sp.temperature = 1.3f;  // temperature, top-k and top-p shape sampling, not the reported logprobs
  sp.top_k = 40;
  sp.top_p = 0.9f;
  sp.seed = 99;
  auto rec = std::make_unique<RecordingBackend>(make_cpu_backend(demo().config, demo().weights, backend_options(64)));
  RecordingBackend* calls = rec.get();
  auto e = make_engine(64, 2048, std::move(rec));
  e->add_request(p, sp);
  const RequestOutput o = e->run_to_completion().at(0);
  const int64_t V = demo().config.vocab_size;
  ASSERT_EQ(o.logprobs.size(), 12u);
  ASSERT_EQ(calls->calls.size(), 12u);  // one step per token, one request: its row is the only one
  for (size_t t = 0; t < 12; ++t) {
    EXPECT_EQ(calls->calls[t].output, ForwardBatch::Output::kLogits);
    ASSERT_EQ(calls->calls[t].rows, 1);
    expect_entry(o.logprobs[t], calls->calls[t].out.values.data(), V, o.new_tokens[t], 3);
  }
  // Asking for logprobs does not change what is sampled.
  SamplingParams plain = sp;
  plain.logprobs = -1;
  EXPECT_EQ(run_alone(p, plain).new_tokens, o.new_tokens);
}

// Seeded sampling draws on the backend (kSample: only ids leave it) unless a row needs logits,
// and gives the same tokens both ways: one rng draw per token, one rule (model/sampling.h).
TEST(EngineLogprobs, SeededSamplingIsTheSameOnTheBackendAndTheLogitsPath) {
  const auto p = prompt(20, 8);
  for (auto [t, k, tp] : {std::tuple{0.9f, 0, 1.0f}, std::tuple{1.4f, 12, 1.0f}, std::tuple{1.0f, 40, 0.85f}}) {
    SamplingParams sp = scored(10, -1, -1);
    sp.temperature = t;
    sp.top_k = k;
    sp.top_p = tp;
    sp.seed = 1234;
    auto rec = std::make_unique<RecordingBackend>(make_cpu_backend(demo().config, demo().weights, backend_options(64)));
    RecordingBackend* calls = rec.get();
    auto e = make_engine(64, 2048, std::move(rec));
    e->add_request(p, sp);
    const auto on_backend = e->run_to_completion().at(0);
    for (const auto& c : calls->calls) EXPECT_EQ(c.output, ForwardBatch::Output::kSample);
    calls->calls.clear();
    SamplingParams lp = sp;
    lp.logprobs = 0;
    e->add_request(p, lp);
    const auto on_host = e->run_to_completion().at(0);
    for (const auto& c : calls->calls) EXPECT_EQ(c.output, ForwardBatch::Output::kLogits);
    EXPECT_EQ(on_host.new_tokens, on_backend.new_tokens) << "T " << t << " top_k " << k << " top_p " << tp;
    // Another seed draws something else (10 tokens at these temperatures).
    SamplingParams other = sp;
    other.seed = 99;
    e->add_request(p, other);
    EXPECT_NE(e->run_to_completion().at(0).new_tokens, on_backend.new_tokens);
  }
}

TEST(EngineLogprobs, GreedyStepsUseArgmaxUnlessARowNeedsLogits) {
  const auto p = prompt(20, 8);
  auto rec = std::make_unique<RecordingBackend>(make_cpu_backend(demo().config, demo().weights, backend_options(64)));
  RecordingBackend* calls = rec.get();
  auto e = make_engine(64, 2048, std::move(rec));
  e->add_request(p, scored(3, -1, -1));
  const auto plain = e->run_to_completion().at(0);
  for (const auto& c : calls->calls) EXPECT_EQ(c.output, ForwardBatch::Output::kArgmax);
  calls->calls.clear();
  e->add_request(p, scored(3, 0, -1));  // logprobs 0: the sampled token's logprob, no top list
  const auto with = e->run_to_completion().at(0);
  for (const auto& c : calls->calls) EXPECT_EQ(c.output, ForwardBatch::Output::kLogits);
  EXPECT_EQ(with.new_tokens, plain.new_tokens);
  ASSERT_EQ(with.logprobs.size(), 3u);
  for (const LogprobEntry& lp : with.logprobs) {
    EXPECT_TRUE(lp.top.empty());
    EXPECT_EQ(lp.rank, 1);
    EXPECT_LT(lp.logprob, 0.0);
  }
  EXPECT_TRUE(with.prompt_logprobs.empty());
  // A greedy neighbour without logprobs in a step that needs logits still gets its argmax.
  e->add_request(p, scored(3, -1, -1));
  e->add_request(prompt(9, 4), scored(3, -1, 2));
  const auto mixed = e->run_to_completion();
  EXPECT_EQ(mixed.at(0).new_tokens, plain.new_tokens);
  EXPECT_TRUE(mixed.at(0).logprobs.empty());
  EXPECT_EQ(mixed.at(1).prompt_logprobs.size(), 9u);
}

TEST(EngineLogprobs, ChunkedPrefillEqualsOneShot) {
  const auto p = prompt(61, 11);
  const RequestOutput one_shot = run_alone(p, scored(4, 2, 4));
  for (int32_t budget : {1, 7, 16, 33}) {
    auto e = make_engine(256, budget);
    e->add_request(p, scored(4, 2, 4));
    e->add_request(prompt(20, 12), scored(4, 1, 1));  // a neighbour competing for the budget
    const auto out = e->run_to_completion();
    const RequestOutput& o = out.at(0);
    EXPECT_EQ(o.new_tokens, one_shot.new_tokens) << "budget " << budget;
    EXPECT_LE(max_diff(o.prompt_logprobs, one_shot.prompt_logprobs), kScheduleTolerance) << "budget " << budget;
    EXPECT_LE(max_diff(o.logprobs, one_shot.logprobs), kScheduleTolerance) << "budget " << budget;
    EXPECT_EQ(out.at(1).prompt_logprobs.size(), 20u);
    EXPECT_EQ(e->blocks().num_free(), e->blocks().num_blocks());
  }
}

TEST(EngineLogprobs, PreemptionDuringPrefillNeitherDropsNorDuplicates) {
  // A decodes while B's 150-token prompt is prefilled 15 tokens a step; 11 blocks cannot hold both,
  // so B, the newest, is preempted while its prompt is being scored, and starts again from 0.
  std::vector<std::vector<int32_t>> prompts{prompt(20, 61), prompt(150, 62)};
  const std::vector<SamplingParams> sps{scored(80, 2, 3), scored(10, 1, 4)};
  std::vector<RequestOutput> alone;
  for (size_t i = 0; i < prompts.size(); ++i) alone.push_back(run_alone(prompts[i], sps[i]));
  auto e = make_engine(11, 16);
  std::vector<int64_t> ids;
  for (size_t i = 0; i < prompts.size(); ++i) ids.push_back(e->add_request(prompts[i], sps[i]));
  std::vector<RequestOutput> acc(ids.size());
  bool preempted_mid_prompt = false;
  while (e->has_unfinished()) {
    for (RequestOutput& o : e->step()) {
      RequestOutput& a = acc.at(static_cast<size_t>(o.id - ids[0]));
      a.new_tokens.insert(a.new_tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
      a.logprobs.insert(a.logprobs.end(), o.logprobs.begin(), o.logprobs.end());
      if (!o.prompt_logprobs.empty()) {
        EXPECT_TRUE(a.prompt_logprobs.empty()) << "prompt logprobs sent twice";
        a.prompt_logprobs = o.prompt_logprobs;
      }
    }
    for (int64_t id : ids)
      if (const Request* r = e->find(id); r && r->num_preemptions > 0 && !r->prompt_logprobs_sent) preempted_mid_prompt = true;
  }
  EXPECT_TRUE(preempted_mid_prompt) << "the schedule no longer preempts a request mid-prompt; retune the test";
  EXPECT_GT(e->stats().preemptions, 0);
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(acc[i].new_tokens, alone[i].new_tokens) << "request " << i;
    ASSERT_EQ(acc[i].logprobs.size(), acc[i].new_tokens.size());
    EXPECT_LE(max_diff(acc[i].prompt_logprobs, alone[i].prompt_logprobs), kScheduleTolerance) << "request " << i;
    EXPECT_LE(max_diff(acc[i].logprobs, alone[i].logprobs), kScheduleTolerance) << "request " << i;
  }
  EXPECT_EQ(e->blocks().num_free(), e->blocks().num_blocks());
}

TEST(EngineLogprobs, PromptLogprobsBypassThePrefixCache) {
  const auto p = prompt(45, 21);
  auto e = make_engine();
  e->add_request(p, scored(2, -1, -1));
  EXPECT_EQ(e->run_to_completion().at(0).num_cached_tokens, 0);
  e->add_request(p, scored(2, -1, 3));  // its two full blocks are cached, but have no logits
  const RequestOutput o = e->run_to_completion().at(0);
  EXPECT_EQ(o.num_cached_tokens, 0);
  ASSERT_EQ(o.prompt_logprobs.size(), p.size());
  for (size_t i = 1; i < p.size(); ++i) EXPECT_TRUE(o.prompt_logprobs[i].has_value()) << i;
  EXPECT_LE(max_diff(o.prompt_logprobs, run_alone(p, scored(2, -1, 3)).prompt_logprobs), 0.0);
  e->add_request(p, scored(2, -1, -1));  // and it published them like any request
  EXPECT_EQ(e->run_to_completion().at(0).num_cached_tokens, 32);
}

TEST(EngineLogprobs, TokensAfterInjectedPositionsHaveNoPromptLogprobs) {
  const auto p = prompt(40, 31);
  auto e = make_engine(64, 2048, make_cpu_backend(demo().config, demo().weights, backend_options(64, 4)));
  const ModelConfig& c = demo().config;
  const int64_t n_slots = 10;
  // Any KV is valid KV: the span's pool slots hold small deterministic values.
  std::vector<int64_t> slots;
  for (int64_t i = 0; i < n_slots; ++i) slots.push_back(i);
  const size_t per = static_cast<size_t>(c.num_layers * n_slots * c.num_kv_heads * c.head_dim);
  std::vector<float> k(per), v(per);
  for (size_t i = 0; i < per; ++i) {
    k[i] = 0.01f * static_cast<float>(i % 13);
    v[i] = 0.02f * static_cast<float>(i % 7);
  }
  test::write_pool_f32(e->backend(), slots, k, v);
  InjectedSpan span;
  span.start = 10;
  span.end = 20;
  span.pool_slots = slots;
  span.cache_key = 0x1234;
  e->add_request(p, scored(3, 1, 2), span);
  const RequestOutput o = e->run_to_completion().at(0);
  EXPECT_EQ(o.num_injected_tokens, 10);
  ASSERT_EQ(o.prompt_logprobs.size(), p.size());
  // Token i is scored from position i - 1: null at 0 and wherever i - 1 is injected.
  for (size_t i = 0; i < p.size(); ++i) {
    const bool after_injected = i >= 11 && i <= 20;
    EXPECT_EQ(o.prompt_logprobs[i].has_value(), i > 0 && !after_injected) << i;
    if (o.prompt_logprobs[i]) EXPECT_TRUE(std::isfinite(o.prompt_logprobs[i]->logprob));
  }
  ASSERT_EQ(o.logprobs.size(), 3u);
  for (const LogprobEntry& lp : o.logprobs) EXPECT_TRUE(std::isfinite(lp.logprob));
}

TEST(EngineLogprobs, MaxTokensZeroOnlyScoresThePrompt) {
  const auto p = prompt(33, 41);
  auto e = make_engine();
  e->add_request(p, scored(0, -1, 1));
  const auto out = e->run_to_completion();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].finished);
  EXPECT_EQ(out[0].finish, FinishReason::kLength);
  EXPECT_TRUE(out[0].new_tokens.empty());
  EXPECT_EQ(out[0].num_output_tokens, 0);
  EXPECT_EQ(out[0].text, "");
  EXPECT_LE(max_diff(out[0].prompt_logprobs, run_alone(p, scored(2, -1, 1)).prompt_logprobs), 0.0);
  EXPECT_EQ(e->blocks().num_free(), e->blocks().num_blocks());
}

// In-process scoring (bench_quality_locomo): a tail scores only the last n prompt tokens, with the
// same entries as scoring the whole prompt, and distributions are each row's whole log-softmax.
TEST(EngineLogprobs, ATailScoresTheLastTokensWithTheirDistributions) {
  const auto p = prompt(37, 43);
  const int64_t V = demo().config.vocab_size;
  const RequestOutput all = run_alone(p, scored(0, -1, 2));
  SamplingParams sp = scored(0, -1, 2);
  sp.prompt_logprobs_tail = 6;
  sp.prompt_distributions = true;
  RecordingBackend* rec = nullptr;
  auto be = std::make_unique<RecordingBackend>(make_cpu_backend(demo().config, demo().weights, backend_options(256)));
  rec = be.get();
  auto e = make_engine(256, 2048, std::move(be));
  e->add_request(p, sp);
  const RequestOutput o = e->run_to_completion().at(0);
  ASSERT_EQ(o.prompt_logprobs.size(), p.size());
  const auto ref = full_logits(p);
  int32_t rows = 0;
  for (const auto& c : rec->calls) rows += c.rows;
  EXPECT_EQ(rows, 6) << "only the tail's positions leave the backend";
  for (size_t i = 0; i < p.size(); ++i) {
    if (i + 6 < p.size()) {
      EXPECT_FALSE(o.prompt_logprobs[i].has_value()) << i;
      continue;
    }
    ASSERT_TRUE(o.prompt_logprobs[i].has_value()) << i;
    EXPECT_NEAR(o.prompt_logprobs[i]->logprob, all.prompt_logprobs[i]->logprob, kScheduleTolerance) << i;
    const std::vector<double>& got = o.prompt_logprobs[i]->distribution;  // over the sampleable ids
    ASSERT_TRUE(!got.empty() && static_cast<int64_t>(got.size()) <= V);
    const std::vector<double> want =
        inferscale::testing::reference_log_softmax(ref[i - 1].data(), static_cast<int64_t>(got.size()));
    double d = 0;
    for (size_t v = 0; v < got.size(); ++v) d = std::max(d, std::abs(got[v] - want[v]));
    EXPECT_LE(d, kScheduleTolerance) << i;  // the LM head ran over 6 rows here, over all in `ref`
    EXPECT_NEAR(got[static_cast<size_t>(p[i])], o.prompt_logprobs[i]->logprob, 1e-12);
  }
  EXPECT_TRUE(all.prompt_logprobs.back()->distribution.empty()) << "distributions only when asked";
  sp.prompt_logprobs_tail = -1;
  EXPECT_THROW(e->add_request(p, sp), Error);
}

TEST(EngineLogprobs, RejectsBadCounts) {
  auto e = make_engine();
  const auto p = prompt(5, 1);
  EXPECT_THROW(e->add_request(p, scored(1, kMaxLogprobs + 1, -1)), Error);
  EXPECT_THROW(e->add_request(p, scored(1, -2, -1)), Error);
  EXPECT_THROW(e->add_request(p, scored(1, -1, kMaxLogprobs + 1)), Error);
  EXPECT_THROW(e->add_request(p, scored(0, 3, -1)), Error);  // max_tokens 0 needs prompt_logprobs
  EXPECT_FALSE(e->has_unfinished());
}
