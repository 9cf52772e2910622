// AsyncEngine: one engine thread serving submissions from many threads.
#include <gtest/gtest.h>

#include <atomic>

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "server/api_error.h"
#include "memory/request_memory.h"
#include "server/async_engine.h"
#include "deferring_backend.h"
#include "engine_test_util.h"
#include "server_test_model.h"
#include "util/check.h"

using namespace inferscale;
using namespace inferscale::server;
using namespace std::chrono_literals;

namespace {

const test_support::TestModel& model() {
  static const test_support::TestModel m;
  return m;
}

constexpr int32_t kPoison = 7;  // a byte no other prompt here contains: the backend throws on it

// The CPU backend must be built on the thread that runs it (it sets that thread's OpenMP threads).
AsyncEngine::EngineFactory engine_factory() {
  return [] { return model().engine(); };
}

// Steps that take `ms` each: generations long enough to cancel or abort midway.
AsyncEngine::EngineFactory slow_engine_factory(int ms) {
  return [ms] {
    auto be = std::make_unique<test_support::ControlledBackend>(model().backend(), kPoison);
    be->delay_ms = ms;
    return model().engine(64, std::move(be));
  };
}

// Over a backend that overlaps its forwards with the host (the GPU's), each forward "running" for
// many polls: the engine thread spends its steps in the forward's window.
AsyncEngine::EngineFactory deferring_engine_factory() {
  return [] { return model().engine(64, std::make_unique<test_support::DeferringBackend>(model().backend(), 20000)); };
}

using test::greedy;

std::vector<int32_t> prompt(int seed, int n) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(32 + (seed * 31 + i * 7) % 90);
  return p;
}

struct Result {
  std::vector<int32_t> tokens;
  std::string text;
  FinishReason finish = FinishReason::kNone;
  std::exception_ptr error;
  bool accepted = false;
};

Result collect(RequestStream& s, std::chrono::seconds limit = 60s) {
  Result r;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    RequestStream::Poll p = s.poll(100ms);
    r.accepted = r.accepted || p.accepted;
    for (const RequestOutput& o : p.outputs) {
      r.tokens.insert(r.tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
      r.text += o.text;
      if (o.finished) r.finish = o.finish;
    }
    if (p.done) {
      r.error = p.error;
      return r;
    }
    if (std::chrono::steady_clock::now() > deadline) ADD_FAILURE() << "request did not end in time";
    if (std::chrono::steady_clock::now() > deadline) return r;
  }
}

// Waits until the engine thread has published stats satisfying `pred`.
template <class P>
bool wait_stats(const AsyncEngine& e, P pred, std::chrono::seconds limit = 30s) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred(e.stats())) return true;
    std::this_thread::sleep_for(5ms);
  }
  return false;
}

// A long request decoding, then `n` submissions 3 ms apart (prompt(i, 6 + i), 6 tokens each):
// most land inside a forward's window.
struct ArrivalsBesideADecode {
  std::shared_ptr<RequestStream> running;
  std::vector<std::shared_ptr<RequestStream>> streams;
};
ArrivalsBesideADecode submit_beside_a_decode(AsyncEngine& ae, int n) {
  ArrivalsBesideADecode a;
  a.running = ae.submit(Submission{prompt(20, 8), greedy(400), {}, {}});
  EXPECT_TRUE(wait_stats(ae, [](const AsyncEngineStats& s) { return s.engine.steps >= 2; }));
  for (int i = 0; i < n; ++i) {
    a.streams.push_back(ae.submit(Submission{prompt(i, 6 + i), greedy(6), {}, {}}));
    std::this_thread::sleep_for(3ms);
  }
  return a;
}

}  // namespace

TEST(ServerAsyncEngine, MatchesTheSynchronousEngine) {
  std::vector<std::vector<int32_t>> expected;
  {
    auto eng = model().engine();
    for (int i = 0; i < 4; ++i) eng->add_request(prompt(i, 5 + i * 9), greedy(12));
    for (const RequestOutput& o : eng->run_to_completion()) expected.push_back(o.new_tokens);
  }
  AsyncEngine ae(engine_factory());
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 4; ++i) streams.push_back(ae.submit(Submission{prompt(i, 5 + i * 9), greedy(12), {}, {}}));
  for (int i = 0; i < 4; ++i) {
    Result r = collect(*streams[static_cast<size_t>(i)]);
    EXPECT_FALSE(r.error);
    EXPECT_TRUE(r.accepted);
    EXPECT_EQ(r.finish, FinishReason::kLength);
    EXPECT_EQ(r.tokens, expected[static_cast<size_t>(i)]) << "request " << i;
  }
  EXPECT_TRUE(wait_stats(ae, [](const AsyncEngineStats& s) { return s.num_pending == 0 && s.kv_blocks_free == s.kv_blocks_total; }));
}

TEST(ServerAsyncEngine, ConcurrentSubmittersFromManyThreads) {
  AsyncEngine ae(engine_factory());
  std::vector<Result> results(8);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&, i] { results[static_cast<size_t>(i)] = collect(*ae.submit(Submission{prompt(1, 10), greedy(8), {}, {}})); });
  for (auto& t : threads) t.join();
  for (const Result& r : results) {
    EXPECT_FALSE(r.error);
    EXPECT_EQ(r.tokens, results[0].tokens);
    EXPECT_EQ(r.tokens.size(), 8u);
  }
}

// On a backend that overlaps its forwards (the GPU's; here one whose forward stays "running" for
// many polls), submissions that arrive while a forward runs are admitted beside it (the engine's
// intake) and served exactly as the synchronous engine
// serves them.
TEST(ServerAsyncEngine, SubmissionsArrivingDuringAForwardAreAdmittedBesideIt) {
  std::vector<std::vector<int32_t>> expected;
  {
    auto eng = model().engine();
    for (int i = 0; i < 10; ++i) eng->add_request(prompt(i, 6 + i), greedy(6));
    for (const RequestOutput& o : eng->run_to_completion()) expected.push_back(o.new_tokens);
  }
  AsyncEngine ae(deferring_engine_factory());
  auto [running, streams] = submit_beside_a_decode(ae, 10);
  for (int i = 0; i < 10; ++i) {
    Result r = collect(*streams[static_cast<size_t>(i)]);
    EXPECT_FALSE(r.error);
    EXPECT_TRUE(r.accepted);
    EXPECT_EQ(r.tokens, expected[static_cast<size_t>(i)]) << "request " << i;
  }
  running->cancel();
  collect(*running);
  EXPECT_TRUE(wait_stats(ae, [](const AsyncEngineStats& s) { return s.num_pending == 0; }));
  // Each lands inside a forward's window with high probability (the engine spends its steps
  // polling); that none of 10 does would mean the intake is not called.
  EXPECT_GE(ae.stats().engine.requests_taken_beside, 1);
}

TEST(ServerAsyncEngine, InvalidRequestIsRejectedAlone) {
  AsyncEngine ae(engine_factory());
  auto bad = ae.submit(Submission{{999999}, greedy(4), {}, {}});
  auto good = ae.submit(Submission{prompt(2, 6), greedy(4), {}, {}});
  Result rb = collect(*bad);
  ASSERT_TRUE(rb.error);
  EXPECT_FALSE(rb.accepted);
  EXPECT_EQ(api_error_from(rb.error).status, 400);
  Result rg = collect(*good);
  EXPECT_FALSE(rg.error);
  EXPECT_EQ(rg.tokens.size(), 4u);
}

TEST(ServerAsyncEngine, CancelFreesTheRequestsBlocks) {
  AsyncEngine ae(slow_engine_factory(5));
  auto s = ae.submit(Submission{prompt(3, 40), greedy(400), {}, {}});
  // Wait for the first tokens, then cancel mid-generation.
  size_t got = 0;
  while (got < 3) {
    RequestStream::Poll p = s->poll(1s);
    for (const RequestOutput& o : p.outputs) got += o.new_tokens.size();
    ASSERT_FALSE(p.done);
  }
  EXPECT_LT(ae.stats().kv_blocks_free, ae.stats().kv_blocks_total);
  s->cancel();
  Result r = collect(*s);
  EXPECT_FALSE(r.error);
  EXPECT_EQ(r.finish, FinishReason::kNone);  // ended without a finish: cancelled
  EXPECT_TRUE(wait_stats(ae, [](const AsyncEngineStats& st) {
    return st.num_pending == 0 && st.num_running == 0 && st.kv_blocks_free == st.kv_blocks_total;
  }));
}

TEST(ServerAsyncEngine, BoundedQueueRefusesWithResourceError) {
  AsyncEngineOptions o;
  o.max_pending = 2;
  AsyncEngine ae(slow_engine_factory(5), o);
  auto a = ae.submit(Submission{prompt(4, 8), greedy(200), {}, {}});
  auto b = ae.submit(Submission{prompt(5, 8), greedy(200), {}, {}});
  try {
    ae.submit(Submission{prompt(6, 8), greedy(2), {}, {}});
    FAIL() << "a third request must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kResource);
    EXPECT_EQ(api_error_from(std::current_exception()).status, 429);
  }
  a->cancel();
  b->cancel();
  collect(*a);
  collect(*b);
  EXPECT_TRUE(wait_stats(ae, [](const AsyncEngineStats& s) { return s.num_pending == 0; }));
  Result r = collect(*ae.submit(Submission{prompt(6, 8), greedy(2), {}, {}}));
  EXPECT_FALSE(r.error);
}

TEST(ServerAsyncEngine, StepExceptionFailsLiveRequestsAndKeepsServing) {
  AsyncEngine ae([] { return model().engine(64, std::make_unique<test_support::ControlledBackend>(model().backend(), kPoison)); });
  Result bad = collect(*ae.submit(Submission{{40, 41, kPoison, 42}, greedy(4), {}, {}}));
  ASSERT_TRUE(bad.error);
  EXPECT_TRUE(bad.accepted);
  EXPECT_EQ(api_error_from(bad.error).status, 500);
  EXPECT_TRUE(wait_stats(ae, [](const AsyncEngineStats& s) { return s.step_errors == 1 && s.kv_blocks_free == s.kv_blocks_total; }));
  Result good = collect(*ae.submit(Submission{prompt(7, 9), greedy(5), {}, {}}));
  EXPECT_FALSE(good.error);
  EXPECT_EQ(good.tokens.size(), 5u);
}

TEST(ServerAsyncEngine, ShutdownDrainsThenRefuses) {
  AsyncEngine ae(engine_factory());
  auto s = ae.submit(Submission{prompt(8, 10), greedy(6), {}, {}});
  ae.shutdown(30s);
  Result r = collect(*s, 1s);
  EXPECT_FALSE(r.error);
  EXPECT_EQ(r.tokens.size(), 6u);
  EXPECT_THROW(ae.submit(Submission{prompt(8, 10), greedy(6), {}, {}}), Error);
  ae.shutdown();  // idempotent
}

TEST(ServerAsyncEngine, ShutdownWithoutGraceAbortsLiveRequests) {
  AsyncEngine ae(slow_engine_factory(5));
  auto s = ae.submit(Submission{prompt(9, 10), greedy(480), {}, {}});
  while (!s->poll(1s).accepted) {
  }
  ae.shutdown();
  Result r = collect(*s, 5s);
  ASSERT_TRUE(r.error);
  EXPECT_EQ(api_error_from(r.error).status, 503);
}

TEST(ServerAsyncEngine, IdleEngineThreadSleeps) {
  AsyncEngine ae(engine_factory());
  Result r = collect(*ae.submit(Submission{prompt(10, 5), greedy(2), {}, {}}));
  ASSERT_FALSE(r.error);
  ASSERT_TRUE(wait_stats(ae, [](const AsyncEngineStats& st) { return st.num_pending == 0; }));
  const int64_t steps = ae.stats().engine.steps;
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(ae.stats().engine.steps, steps);  // no work, no steps
}

// Low-priority work (AsyncEngineOptions::idle_work) runs at start and after request_idle_work(),
// one piece at a time while it says more remains, and never while a request waits or runs.
TEST(ServerAsyncEngine, IdleWorkRunsOnlyWhenNoRequestIsLive) {
  std::atomic<int> calls{0}, busy_calls{0}, remaining{3};
  AsyncEngineOptions o;
  o.idle_work = [&](Engine& e) {
    ++calls;
    if (e.has_unfinished()) ++busy_calls;
    return --remaining > 0;
  };
  AsyncEngine ae(slow_engine_factory(5), o);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (calls < 3 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(2ms);
  EXPECT_EQ(calls.load(), 3) << "at start, until it says it is done";
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(calls.load(), 3) << "then not again without a request for it";
  // Work asked for while a generation runs waits for the generation's end.
  remaining = 1;
  auto stream = ae.submit(Submission{prompt(11, 5), greedy(12), {}, {}});
  while (!stream->poll(1ms).accepted && std::chrono::steady_clock::now() < deadline) {
  }
  ae.request_idle_work();
  const Result r = collect(*stream);
  ASSERT_FALSE(r.error);
  while (calls < 4 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(2ms);
  EXPECT_EQ(calls.load(), 4);
  EXPECT_EQ(busy_calls.load(), 0) << "idle work ran beside a live request";
}

// The engine's memory connector, driven by the test: each request's memory (made by add) has a
// script that answers its plans (kWait while it returns nullopt); request_finished is counted.
class ScriptedConnector final : public MemoryConnector {
 public:
  using Script = std::function<std::optional<std::vector<int32_t>>(Engine&)>;
  struct Scripted {
    Script script;
    std::atomic<int> released{0};
  };
  // The AsyncEngine's options that make this the engine's connector.
  AsyncEngineOptions options() {
    AsyncEngineOptions o;
    o.on_start = [this](Engine& e) {
      engine_ = &e;
      e.set_memory(this);
    };
    return o;
  }
  std::shared_ptr<RequestMemory> add(Script f, std::shared_ptr<Scripted>* handle = nullptr) {
    auto m = std::make_shared<RequestMemory>(MemoryRequest{}, PromptSource{});
    auto s = std::make_shared<Scripted>();
    s->script = std::move(f);
    if (handle) *handle = s;
    std::lock_guard<std::mutex> lock(mu_);
    scripts_[m.get()] = std::move(s);
    return m;
  }
  MemoryPlan plan(RequestMemory& m) override {
    auto p = of(m).script(*engine_);
    if (!p) return MemoryPlan::wait();
    MemoryPlan plan;
    plan.prompt = std::move(*p);
    return plan;
  }
  void request_finished(RequestMemory& m) override { ++of(m).released; }
  bool write_loads() override { return false; }
  bool has_loads() const override { return false; }
  void captures_finished(std::span<const int64_t>, std::span<const int64_t>) override {}

 private:
  Scripted& of(const RequestMemory& m) {
    std::lock_guard<std::mutex> lock(mu_);
    return *scripts_.at(&m);
  }
  Engine* engine_ = nullptr;
  std::mutex mu_;
  std::map<const RequestMemory*, std::shared_ptr<Scripted>> scripts_;
};

Submission with_memory(std::shared_ptr<RequestMemory> m, int32_t max_tokens) {
  Submission s{{}, greedy(max_tokens), {}, {}};
  s.memory = std::move(m);
  return s;
}

// A request with memory is planned by the engine's connector at admission, inside its steps:
// while its memory is not ready the running requests go on stepping, its stream is not accepted,
// and once ready it is served as any other; the connector hears of its end once.
TEST(ServerAsyncEngine, MemoryIsPlannedInsideTheEnginesSteps) {
  ScriptedConnector connector;
  AsyncEngine ae(slow_engine_factory(2), connector.options());
  auto running = ae.submit(Submission{prompt(20, 5), greedy(60), {}, {}});
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (!running->poll(1ms).accepted && std::chrono::steady_clock::now() < deadline) {
  }
  std::vector<int64_t> steps_at_call;
  std::shared_ptr<ScriptedConnector::Scripted> scripted;
  auto memory = connector.add([&](Engine& e) -> std::optional<std::vector<int32_t>> {
    steps_at_call.push_back(e.stats().steps);
    if (steps_at_call.size() < 6) return std::nullopt;
    return prompt(21, 5);
  }, &scripted);
  const Result c = collect(*ae.submit(with_memory(memory, 4)));
  ASSERT_FALSE(c.error);
  EXPECT_TRUE(c.accepted);
  EXPECT_EQ(c.tokens.size(), 4u);
  ASSERT_EQ(steps_at_call.size(), 6u);
  for (size_t i = 1; i < steps_at_call.size(); ++i)
    EXPECT_GT(steps_at_call[i], steps_at_call[i - 1]) << "no step of the running request between calls " << i - 1 << " and " << i;
  EXPECT_EQ(scripted->released.load(), 1);
  EXPECT_FALSE(collect(*running).error);
}

// A request whose memory is ready at once is not queued behind one whose memory waits.
TEST(ServerAsyncEngine, ReadyMemoryIsNotQueuedBehindWaitingMemory) {
  ScriptedConnector connector;
  AsyncEngine ae(engine_factory(), connector.options());
  std::atomic<int> calls{0};
  std::shared_ptr<ScriptedConnector::Scripted> cold;
  auto cold_memory = connector.add([&](Engine&) -> std::optional<std::vector<int32_t>> {
    ++calls;
    std::this_thread::sleep_for(1ms);
    return std::nullopt;  // a very cold user: only the cancel below ends it
  }, &cold);
  auto cold_stream = ae.submit(with_memory(cold_memory, 2));
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (calls < 2 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
  auto hot = connector.add([](Engine&) -> std::optional<std::vector<int32_t>> { return prompt(26, 5); });
  const Result h = collect(*ae.submit(with_memory(hot, 3)));
  EXPECT_FALSE(h.error);
  EXPECT_EQ(h.tokens.size(), 3u);
  EXPECT_FALSE(cold_stream->poll(0ms).accepted) << "the cold one is still being planned";
  cold_stream->cancel();
  EXPECT_FALSE(collect(*cold_stream).accepted);
  ASSERT_TRUE(wait_stats(ae, [](const AsyncEngineStats& st) { return st.num_pending == 0; }));
  EXPECT_EQ(cold->released.load(), 1) << "the connector hears of a cancelled request's end";
}

// What a plan throws, and a ready prompt the engine refuses, reject that request alone, before
// acceptance; the engine serves on.
TEST(ServerAsyncEngine, MemoryErrorsRejectOnlyTheirRequest) {
  ScriptedConnector connector;
  AsyncEngine ae(engine_factory(), connector.options());
  std::shared_ptr<ScriptedConnector::Scripted> bad;
  auto bad_memory = connector.add(
      [](Engine&) -> std::optional<std::vector<int32_t>> { IS_THROW(kNotFound, "no such user"); }, &bad);
  const Result r = collect(*ae.submit(with_memory(bad_memory, 3)));
  ASSERT_TRUE(r.error);
  EXPECT_FALSE(r.accepted);
  EXPECT_THROW(std::rethrow_exception(r.error), Error);
  EXPECT_EQ(bad->released.load(), 1);
  auto outside = connector.add(
      [](Engine&) -> std::optional<std::vector<int32_t>> { return std::vector<int32_t>{40, 999999}; });
  const Result o = collect(*ae.submit(with_memory(outside, 3)));
  ASSERT_TRUE(o.error);
  EXPECT_FALSE(o.accepted);
  try {
    std::rethrow_exception(o.error);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidInput);
    EXPECT_NE(std::string(e.what()).find("outside the vocabulary"), std::string::npos) << e.what();
  }
  ASSERT_TRUE(wait_stats(ae, [](const AsyncEngineStats& st) { return st.num_pending == 0; }));
  EXPECT_FALSE(collect(*ae.submit(Submission{prompt(24, 5), greedy(2), {}, {}})).error) << "the engine serves on";
}

// What idle work throws is logged; the engine goes on serving.
TEST(ServerAsyncEngine, IdleWorkErrorsDoNotStopTheEngine) {
  AsyncEngineOptions o;
  o.idle_work = [](Engine&) -> bool { throw std::runtime_error("background work failed"); };
  AsyncEngine ae(engine_factory(), o);
  ae.request_idle_work();
  const Result r = collect(*ae.submit(Submission{prompt(12, 5), greedy(3), {}, {}}));
  EXPECT_FALSE(r.error);
  EXPECT_EQ(r.tokens.size(), 3u);
}

TEST(ServerAsyncEngine, FactoryErrorsReachTheConstructor) {
  EXPECT_THROW(AsyncEngine([]() -> std::unique_ptr<Engine> { IS_THROW(kInvalidInput, "no model"); }), Error);
  EXPECT_THROW(AsyncEngine([] { return std::unique_ptr<Engine>(); }), Error);
}

// A request's slot must be free by the time its end is visible, so a client that sends its next
// request as soon as it has the answer is never refused (the engine thread frees the slot before
// it hands over the last output).
TEST(ServerAsyncEngine, ASlotIsFreeOnceTheRequestsEndIsVisible) {
  AsyncEngineOptions o;
  o.max_pending = 1;
  AsyncEngine ae(engine_factory(), o);
  for (int i = 0; i < 3; ++i) {
    Result r = collect(*ae.submit(Submission{prompt(11 + i, 6), greedy(2)}));
    ASSERT_FALSE(r.error);
  }
  // The same for a request the engine rejects (its prompt is longer than the model takes).
  for (int i = 0; i < 2; ++i) {
    Result bad = collect(*ae.submit(Submission{prompt(20, ae.max_model_len() + 1), greedy(2)}));
    ASSERT_TRUE(bad.error);
  }
  EXPECT_FALSE(collect(*ae.submit(Submission{prompt(21, 6), greedy(2), {}, {}})).error);
}

// Refusals say when to come back: overload is a 429 (OpenAI clients retry it), shutdown a 503,
// both with a retry delay that becomes the Retry-After header.
TEST(ServerAsyncEngine, RefusalsAre429WhenOverloadedAnd503WhenShuttingDown) {
  AsyncEngineOptions o;
  o.max_pending = 1;
  AsyncEngine ae(slow_engine_factory(5), o);
  // The answer a refused submit becomes.
  auto refusal = [&ae](int seed) {
    try {
      ae.submit(Submission{prompt(seed, 8), greedy(2), {}, {}});
    } catch (const Error&) {
      return api_error_from(std::current_exception());
    }
    ADD_FAILURE() << "must be refused";
    return ApiError(0, "", "");
  };
  auto busy = ae.submit(Submission{prompt(30, 8), greedy(300), {}, {}});
  const ApiError overloaded = refusal(31);
  EXPECT_EQ(overloaded.status, 429);
  EXPECT_EQ(overloaded.code, "overloaded");
  EXPECT_GE(overloaded.retry_after_s, 1);
  ae.shutdown();
  Result r = collect(*busy, 5s);
  ASSERT_TRUE(r.error);
  const ApiError aborted = api_error_from(r.error);
  EXPECT_EQ(aborted.status, 503);
  EXPECT_EQ(aborted.code, "shutting_down");
  EXPECT_GE(aborted.retry_after_s, 1);
  const ApiError stopping = refusal(32);
  EXPECT_EQ(stopping.status, 503);
  EXPECT_EQ(stopping.code, "shutting_down");
  EXPECT_GE(stopping.retry_after_s, 1);
}
