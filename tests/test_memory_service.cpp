// The memory read/write path on the built-in demo model (fp32 CPU): k = 0 and mode off are plain
// serving; text mode is an ordinary prompt holding the same rendered facts; inject mode shares
// text mode's tokens; a fact injected at position 0 matches the joint prefill; users are isolated;
// deletes free KV; KV files survive restarts and are rebuilt when corrupt or stale.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <memory>
#include <set>
#include <map>
#include <numeric>
#include <vector>

#include "backend/backend.h"
#include "engine/engine.h"
#include "memory/retrieval/bm25_retriever.h"
#include "memory/kv/fact_encoder.h"
#include "memory/compose/recompute.h"
#include "memory/memory_service.h"
#include "model/model.h"
#include "tokenizer/byte_tokenizer.h"
#include "server/prompt_builder.h"
#include "tensor/dtype.h"
#include "test_fact_store_util.h"
#include "kv_rows_test_util.h"
#include "deferring_backend.h"
#include "engine_test_util.h"

using namespace inferscale;
using inferscale::testing::expect_error;
using inferscale::testing::TempDir;

namespace {

const Model& demo() {
  static const Model m = load_model("demo");
  return m;
}

using test::greedy;

// One store + retriever + engine + memory service over a data directory.
struct Stack {
  explicit Stack(const std::filesystem::path& dir, MemoryOptions opts = {}, int64_t cache_blocks = 512,
                 int64_t pool_blocks = 256, const Model& model = demo(), bool pool_fp8 = false) {
    store = FactStore::open(dir);
    retriever = std::make_unique<Bm25Retriever>(*store);
    BackendOptions bo;
    bo.num_cache_blocks = cache_blocks;
    bo.num_pool_blocks = pool_blocks;
    bo.pool_fp8 = pool_fp8;
    engine = std::make_unique<Engine>(make_cpu_backend(model.config, model.weights, bo), model.tokenizer, EngineOptions{});
    if (opts.kv_dir.empty()) opts.kv_dir = dir / "kv";
    service = std::make_unique<MemoryService>(*store, *retriever, model, engine->backend(), engine->blocks(), opts);
    engine->set_memory(service.get());
  }
  std::vector<int32_t> run(const MemoryPrompt& p, int n = 8) {
    engine->add_request(p.tokens, greedy(n), p.injected);
    return engine->run_to_completion().at(0).new_tokens;
  }
  std::unique_ptr<FactStore> store;
  std::unique_ptr<Bm25Retriever> retriever;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<MemoryService> service;
};

// The stack's engine (with `eo`) and service again.
void with_engine(Stack& s, const EngineOptions& eo, MemoryOptions mo = {}, int64_t cache_blocks = 512) {
  s.service.reset();
  BackendOptions bo;
  bo.num_cache_blocks = cache_blocks;
  bo.num_pool_blocks = 256;
  s.engine = std::make_unique<Engine>(make_cpu_backend(demo().config, demo().weights, bo), demo().tokenizer, eo);
  s.service = std::make_unique<MemoryService>(*s.store, *s.retriever, demo(), s.engine->backend(), s.engine->blocks(), mo);
  s.engine->set_memory(s.service.get());
}

// The stack's engine and service again, the engine stepping at most `budget` tokens.
void with_budget(Stack& s, int32_t budget, MemoryOptions mo = {}, SchedulerOptions so = {}, int64_t cache_blocks = 512) {
  EngineOptions eo;
  eo.scheduler = so;
  eo.scheduler.max_num_batched_tokens = budget;
  with_engine(s, eo, std::move(mo), cache_blocks);
}

std::vector<int64_t> add_alice(FactStore& s) {
  std::vector<NewFact> facts{
      {"Alice adopted a cat named Miso in March", "2023-03-02", {"", "", "", "Alice"}, "", {}},
      {"Alice works as a nurse in Lisbon", "2023-04-10", {"", "", "", "Alice"}, "", {}},
      {"Alice's cat Miso hates the vacuum cleaner", "2023-05-01", {"", "", "", "Alice"}, "", {}},
      {"Alice is learning to play the cello", "2023-06-12", {"", "", "", "Alice"}, "", {}},
  };
  return s.add_facts(kDefaultTenant, "alice", facts);
}

// What the CPU pool's KV files hold of f32 values: their f16 rounding (kv_file.h).
std::vector<float> as_stored(std::vector<float> x) {
  for (float& v : x) v = f16_to_f32(f32_to_f16(v));
  return x;
}

// What a request was served from: how its facts' KV was made resident, and the K/V.
struct ServedKv {
  int32_t encoded = 0, loaded = 0;
  std::vector<float> k, v;
};

const std::vector<ChatMessage> kAsk{{"user", "What is the name of the cat Alice adopted?"}};

// The memory block's text around alice's facts (req()'s user), as the service renders it.
FactsBlock alices_block(const MemoryService& service) {
  return FactsBlock::for_user(service.options().header, service.options().footer, "alice");
}

MemoryRequest req(MemoryMode mode, int32_t k = 3, int32_t w = 0) {
  MemoryRequest r;
  r.user = "alice";
  r.mode = mode;
  r.k = k;
  r.window = w;
  return r;
}

// The prompt of a plain chat request (no memory), as the server builds it.
std::vector<int32_t> plain_tokens(const std::vector<ChatMessage>& msgs, const Model& m = demo()) {
  server::GenerateRequest g;
  g.messages = msgs;
  return server::build_prompt(g, *m.tokenizer, m.chat_template, nullptr).ids;
}

// A first run over `dir`: Alice's facts and one inject request of 4 facts (encoded, their KV
// written to files); `then` runs before the run ends. Returns the request (released) and the pool
// K/V it was served from.
struct FirstRun {
  MemoryPrompt prompt;
  std::vector<float> k, v;
};
FirstRun first_run(const std::filesystem::path& dir, const std::function<void(Stack&, const MemoryPrompt&)>& then = {}) {
  Stack s(dir);
  add_alice(*s.store);
  FirstRun r;
  r.prompt = s.service->prepare(req(MemoryMode::kInject, 4), kAsk);
  test::read_pool_f32(s.engine->backend(), r.prompt.injected->pool_slots, r.k, r.v);
  s.service->release(r.prompt);
  if (then) then(s, r.prompt);
  return r;
}

}  // namespace

namespace {

// Runs the service's queued facts' encodings through the engine as background captures, `max_facts`
// a piece; returns how many pieces had work.
int run_background(Stack& s, int32_t max_facts) {
  int pieces = 0;
  for (;;) {
    std::vector<CaptureSeq> caps = s.service->queued_captures(max_facts);
    if (caps.empty() && !s.service->has_queued()) return pieces;
    pieces += caps.empty() ? 0 : 1;
    for (CaptureSeq& c : caps) s.engine->add_background_capture(std::move(c));
    s.engine->run_to_completion();
  }
}

}  // namespace

// Background encoding (MemoryService::queued_captures): facts added while the service runs are
// queued and encoded as the engine's low-priority work, so the first request that retrieves them
// encodes none; what the store held when the service started is not queued, deleted facts are
// skipped.
TEST(MemoryService, FactsAddedWhileRunningAreEncodedInTheBackground) {
  TempDir dir;
  {
    Stack s(dir.path());
    const std::vector<NewFact> bob{{"Bob flies a plane to Rome", "2023-01-01", {"", "", "", "Bob"}, "", {}}};
    s.store->add_facts(kDefaultTenant, "bob", bob);
    EXPECT_EQ(s.service->num_queued(), 0u) << "off until enabled";
    s.service->enable_background({});
    const std::vector<int64_t> ids = add_alice(*s.store);
    EXPECT_EQ(s.service->num_queued(), ids.size());
    s.store->remove(kDefaultTenant, "alice", ids[3]);
    EXPECT_EQ(run_background(s, 2), 2) << "4 queued, 2 a piece (the deleted one skipped in the second)";
    EXPECT_EQ(s.service->num_queued(), 0u);
    EXPECT_EQ(s.engine->stats().captures, 3);
    EXPECT_EQ(s.service->background_encoded(), 3);
    EXPECT_EQ(s.service->background_skipped(), 1) << "the deleted fact";
    MemoryPrompt p = s.service->prepare(req(MemoryMode::kInject, 3, s.service->options().default_window), kAsk);
    EXPECT_EQ(p.facts.size(), 3u);
    EXPECT_EQ(p.encoded, 0) << "the first request found its facts encoded";
    s.service->release(p);
  }
  Stack again(dir.path());  // a restart: the store's facts are not new
  again.service->enable_background({});
  EXPECT_EQ(again.service->num_queued(), 0u);
}

// The memory connector (MemoryService as the engine's): a request with memory planned by the
// engine at admission, its cold facts encoded as capture work inside the engine's steps.
namespace {

struct MemoryRun {
  std::vector<int32_t> tokens;
  MemoryPrompt prompt;
  std::shared_ptr<RequestMemory> memory;
};

// Adds a request with memory to the stack's engine and runs the engine to completion.
MemoryRun run_with_memory(Stack& s, const MemoryRequest& r, int n = 8, const std::vector<ChatMessage>& msgs = kAsk) {
  MemoryRun out;
  out.memory = std::make_shared<RequestMemory>(r, PromptSource::of_chat(msgs));
  s.engine->add_memory_request(out.memory, greedy(n));
  const auto done = s.engine->run_to_completion();
  EXPECT_EQ(done.size(), 1u);
  if (!done.empty()) {
    EXPECT_FALSE(done[0].error);
    out.tokens = done[0].new_tokens;
  }
  out.prompt = out.memory->served;
  return out;
}

// The pool's pins, summed over the facts' entries for window w (0 once every request ended).
int32_t pins_of(Stack& s, const MemoryRequest& r, const std::vector<ChatMessage>& msgs = kAsk) {
  MemoryRequest text = r;
  text.mode = MemoryMode::kText;
  const MemoryPrompt p = s.service->prepare(text, msgs);
  int32_t pins = 0;
  for (const Fact& f : p.facts)
    if (const auto* e = s.service->pool().find(s.service->kv_key(f, s.service->window_of(r)))) pins += e->pins;
  return pins;
}

// What Alice's request is answered on a fresh stack of its own (nothing resident, no files).
std::vector<int32_t> alone_tokens(const MemoryRequest& r, int n) {
  TempDir other;
  Stack s(other.path());
  add_alice(*s.store);
  return run_with_memory(s, r, n).tokens;
}

}  // namespace

// The connector serves exactly what prepare() serves: the same prompt and span, the same tokens, KV
// equal to the FactEncoder's (captures batched in the engine's steps vs packed prefills), KV files
// a restart reloads; the pins go when the request ends.
TEST(MemoryService, TheConnectorServesWhatPrepareServes) {
  TempDir a_dir, b_dir;
  const MemoryRequest r = req(MemoryMode::kInject, 4, 2);
  std::vector<int32_t> sync_tokens;
  MemoryPrompt sync;
  std::vector<float> sk, sv;
  {
    Stack a(a_dir.path());
    add_alice(*a.store);
    sync = a.service->prepare(r, kAsk);
    EXPECT_EQ(sync.encoded, 4);
    test::read_pool_f32(a.engine->backend(), sync.injected->pool_slots, sk, sv);
    sync_tokens = a.run(sync, 12);
    a.service->release(sync);
  }
  {
    Stack b(b_dir.path());
    add_alice(*b.store);
    const MemoryRun t = run_with_memory(b, r, 12);
    EXPECT_EQ(t.prompt.encoded, 4);
    EXPECT_EQ(b.engine->stats().captures, 4) << "the facts were encoded as the engine's capture work";
    EXPECT_EQ(t.prompt.tokens, sync.tokens);
    ASSERT_TRUE(t.prompt.injected.has_value());
    EXPECT_EQ(t.prompt.injected->start, sync.injected->start);
    EXPECT_EQ(t.prompt.injected->end, sync.injected->end);
    EXPECT_EQ(t.tokens, sync_tokens);
    std::vector<float> tk, tv;
    test::read_pool_f32(b.engine->backend(), t.prompt.injected->pool_slots, tk, tv);
    ASSERT_EQ(tk.size(), sk.size());
    double worst = 0;
    for (size_t i = 0; i < tk.size(); ++i)
      worst = std::max({worst, std::fabs(double(tk[i]) - sk[i]), std::fabs(double(tv[i]) - sv[i])});
    EXPECT_LT(worst, 1e-4) << "captured KV differs from the encoder's";
    EXPECT_EQ(pins_of(b, r), 0) << "the request ended: its pins went";
    EXPECT_EQ(b.engine->blocks().num_free(), b.engine->blocks().num_blocks());
  }
  Stack again(b_dir.path());  // a restart: the captures' KV files are read back
  const MemoryRun t = run_with_memory(again, r, 12);
  EXPECT_EQ(t.prompt.encoded, 0);
  EXPECT_EQ(t.prompt.loaded, 4);
  EXPECT_EQ(again.engine->stats().captures, 0);
  EXPECT_EQ(t.tokens, sync_tokens);
}

// The invariant of the connector: while a cold user's facts encode, every running request decodes
// a token in every step (running requests are scheduled first; captures take only the budget they
// leave) and no step exceeds the token budget; the cold request is then served as if alone.
TEST(MemoryService, ColdEncodingNeverDelaysRunningDecodes) {
  TempDir dir;
  const MemoryRequest r = req(MemoryMode::kInject, 4, 2);
  const std::vector<int32_t> alone = alone_tokens(r, 6);
  Stack s(dir.path());
  add_alice(*s.store);
  constexpr int32_t kBudget = 20;
  MemoryOptions mo;
  mo.kv_dir = dir.path() / "kv";
  with_budget(s, kBudget, mo);
  std::vector<int64_t> running;
  for (int i = 0; i < 3; ++i) running.push_back(s.engine->add_request(plain_tokens({{"user", "Hello " + std::to_string(i)}}), greedy(400)));
  // Until every running request decodes (its prompt done, one token a step).
  for (int guard = 0; guard < 100; ++guard) {
    bool all_decoding = true;
    for (int64_t id : running) {
      const Request* q = s.engine->find(id);
      all_decoding = all_decoding && q && q->num_output_tokens() > 0;
    }
    if (all_decoding) break;
    s.engine->step();
  }
  auto t = std::make_shared<RequestMemory>(r, PromptSource::of_chat(kAsk));
  const int64_t cold = s.engine->add_memory_request(t, greedy(6));
  int steps = 0, steps_encoding = 0;
  std::vector<int32_t> cold_tokens;
  bool cold_done = false;
  while (!cold_done && steps < 400) {
    const EngineStats before = s.engine->stats();
    const auto outs = s.engine->step();
    ++steps;
    const EngineStats after = s.engine->stats();
    EXPECT_LE(after.tokens_computed - before.tokens_computed, kBudget);
    EXPECT_LE(s.engine->scheduler().num_waiting() + s.engine->scheduler().num_running(), 4u)
        << "captures are not counted as requests (the server's requests_waiting / _running)";
    if (cold_tokens.empty()) ++steps_encoding;  // steps until the cold request's first token
    for (int64_t id : running) {
      const auto it = std::find_if(outs.begin(), outs.end(), [&](const RequestOutput& o) { return o.id == id; });
      ASSERT_NE(it, outs.end()) << "running request " << id << " got no token in step " << steps;
      EXPECT_EQ(it->new_tokens.size(), 1u);
    }
    for (const RequestOutput& o : outs)
      if (o.id == cold) {
        cold_tokens.insert(cold_tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
        cold_done = o.finished;
      }
  }
  ASSERT_TRUE(cold_done);
  EXPECT_EQ(s.engine->stats().captures, 4);
  EXPECT_GT(steps_encoding, 3) << "a budget of 20 tokens beside 3 decodes spreads the encoding over steps";
  EXPECT_GT(s.engine->stats().tokens_captured, 4 * (kBudget - 3) / 2);
  EXPECT_EQ(cold_tokens, alone) << "batched with decodes and captures == alone";
  EXPECT_EQ(t->served.encoded, 4);
}

// The stack's engine and service again over a backend that overlaps its forwards with the host
// (memory is then planned beside them); returns it.
test_support::DeferringBackend* with_overlap(Stack& s, int busy_polls, MemoryOptions mo = {},
                                             ScheduleAhead ahead = ScheduleAhead::kWhereOverlapping) {
  s.service.reset();
  BackendOptions bo;
  bo.num_cache_blocks = 512;
  bo.num_pool_blocks = 256;
  auto be = std::make_unique<test_support::DeferringBackend>(make_cpu_backend(demo().config, demo().weights, bo), busy_polls);
  test_support::DeferringBackend* out = be.get();
  EngineOptions eo;
  eo.schedule_ahead = ahead;
  s.engine = std::make_unique<Engine>(std::move(be), demo().tokenizer, eo);
  s.service = std::make_unique<MemoryService>(*s.store, *s.retriever, demo(), s.engine->backend(), s.engine->blocks(), mo);
  s.engine->set_memory(s.service.get());
  return out;
}

// The engine's connector, counting in `count` the plans that became ready while `backend` had a
// forward pending.
class ReadyBesideForward final : public ForwardingConnector {
 public:
  ReadyBesideForward(MemoryConnector& inner, const test_support::DeferringBackend& backend, int& count)
      : ForwardingConnector(inner), backend_(backend), count_(count) {}
  MemoryPlan plan(RequestMemory& m) override {
    MemoryPlan p = inner_.plan(m);
    if (p.state == MemoryPlan::State::kReady && backend_.pending()) ++count_;
    return p;
  }

 private:
  const test_support::DeferringBackend& backend_;
  int& count_;
};

// With a backend that overlaps its forward (the GPU's), requests with memory arriving at a busy
// engine are planned while its forward runs, as many as the device's time covers (here: one more per poll
// that finds it busy), the rest in the next steps, first in line. Each request is still served
// exactly as alone: cold ones (their facts encoded as captures), warm ones, text ones, a request
// that is refused.
TEST(MemoryService, MemoryPlannedBesideTheForwardServesAsAlone) {
  const std::vector<std::vector<ChatMessage>> asks{
      kAsk, {{"user", "Where does Alice work?"}}, {{"user", "What instrument is Alice learning?"}}, kAsk};
  const std::vector<MemoryRequest> reqs{req(MemoryMode::kInject, 4, 2), req(MemoryMode::kInject, 2, 2),
                                        req(MemoryMode::kText, 3, 2), req(MemoryMode::kInject, 3, 0)};
  std::vector<std::vector<int32_t>> alone;
  for (size_t i = 0; i < asks.size(); ++i) {
    TempDir other;
    Stack a(other.path());
    add_alice(*a.store);
    alone.push_back(run_with_memory(a, reqs[i], 6, asks[i]).tokens);
  }
  TempDir dir;
  Stack s(dir.path());
  add_alice(*s.store);
  constexpr int kBusyPolls = 1;
  test_support::DeferringBackend* be = with_overlap(s, kBusyPolls);
  std::vector<int64_t> running;
  for (int i = 0; i < 2; ++i) running.push_back(s.engine->add_request(plain_tokens({{"user", "Hi " + std::to_string(i)}}), greedy(60)));
  s.engine->step();
  s.engine->step();
  // Every request at once, and one refused at its plan (k past the limit).
  std::vector<int64_t> ids;
  int ready_beside_a_forward = 0;
  ReadyBesideForward counting(*s.service, *be, ready_beside_a_forward);
  s.engine->set_memory(&counting);
  for (size_t i = 0; i < asks.size(); ++i)
    ids.push_back(s.engine->add_memory_request(std::make_shared<RequestMemory>(reqs[i], PromptSource::of_chat(asks[i])), greedy(6)));
  MemoryRequest bad = req(MemoryMode::kInject);
  bad.k = MemoryRequest::kMaxK + 1;
  const int64_t refused = s.engine->add_memory_request(std::make_shared<RequestMemory>(bad, PromptSource::of_chat(kAsk)), greedy(6));
  std::map<int64_t, std::vector<int32_t>> got;
  std::set<int64_t> done;
  bool refused_seen = false;
  for (int guard = 0; guard < 300 && s.engine->has_unfinished(); ++guard) {
    const int64_t asked = s.engine->stats().memory_plans_overlapped;
    for (const RequestOutput& o : s.engine->step()) {
      if (o.id == refused) {
        refused_seen = true;
        EXPECT_TRUE(o.error) << "the refused request ends with its error";
        continue;
      }
      EXPECT_FALSE(o.error);
      got[o.id].insert(got[o.id].end(), o.new_tokens.begin(), o.new_tokens.end());
      if (o.finished) done.insert(o.id);
    }
    EXPECT_LE(s.engine->stats().memory_plans_overlapped - asked, kBusyPolls + 1) << "asked only while the forward ran";
  }
  EXPECT_TRUE(refused_seen);
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_TRUE(done.count(ids[i])) << "request " << i;
    EXPECT_EQ(got[ids[i]], alone[i]) << "request " << i << " served beside others and a forward == alone";
  }
  for (int64_t id : running) EXPECT_EQ(got[id].size(), 58u) << "running requests decoded throughout";
  EXPECT_GE(s.engine->stats().memory_plans_overlapped, 5);
  EXPECT_EQ(ready_beside_a_forward, 4) << "every request's memory became ready while a forward was pending";
  for (const MemoryRequest& r : reqs) EXPECT_EQ(pins_of(s, r), 0);
  EXPECT_EQ(s.engine->blocks().num_free(), s.engine->blocks().num_blocks());
}

// A server's intake (Engine::set_intake) adds the requests that arrive while a forward runs: their
// memory is planned beside that forward, each asked once a step however often the intake is
// polled, and they run from the next step (scheduling ahead: the one after, the next one being
// planned before them), served exactly as alone (a warm request, a cold one whose facts encode as
// captures, a plain request).
void requests_taken_beside_a_forward(ScheduleAhead ahead) {
  SCOPED_TRACE(ahead == ScheduleAhead::kNever ? "one step at a time" : "scheduling ahead");
  const int later = ahead == ScheduleAhead::kNever ? 0 : 1;
  const MemoryRequest warm = req(MemoryMode::kInject, 4, 2), cold = req(MemoryMode::kInject, 3, 0);
  const std::vector<ChatMessage> cold_ask{{"user", "Where does Alice work?"}};
  std::vector<int32_t> alone_warm, alone_cold, alone_plain;
  {
    TempDir other;
    Stack a(other.path());
    add_alice(*a.store);
    alone_warm = run_with_memory(a, warm, 6).tokens;
    alone_cold = run_with_memory(a, cold, 6, cold_ask).tokens;
    a.engine->add_request(plain_tokens({{"user", "Hello"}}), greedy(6));
    alone_plain = a.engine->run_to_completion().at(0).new_tokens;
  }
  TempDir dir;
  Stack s(dir.path());
  add_alice(*s.store);
  constexpr int kBusyPolls = 6;
  with_overlap(s, kBusyPolls, {}, ahead);
  run_with_memory(s, warm, 1);  // warm's facts resident
  const int64_t running = s.engine->add_request(plain_tokens({{"user", "Hi"}}), greedy(40));
  size_t running_tokens = s.engine->step().at(0).new_tokens.size();
  std::vector<int64_t> ids;  // warm, cold, plain, added by the intake of step 2
  int polls = 0;
  s.engine->set_intake([&] {
    ++polls;
    if (!ids.empty()) return false;
    ids.push_back(s.engine->add_memory_request(std::make_shared<RequestMemory>(warm, PromptSource::of_chat(kAsk)), greedy(6)));
    ids.push_back(s.engine->add_memory_request(std::make_shared<RequestMemory>(cold, PromptSource::of_chat(cold_ask)), greedy(6)));
    ids.push_back(s.engine->add_request(plain_tokens({{"user", "Hello"}}), greedy(6)));
    return true;
  });
  const int64_t asked0 = s.engine->stats().memory_plans_overlapped;
  for (const RequestOutput& o : s.engine->step()) running_tokens += o.id == running ? o.new_tokens.size() : 0;
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_GT(polls, 1) << "polled for the length of the forward";
  EXPECT_EQ(s.engine->stats().requests_taken_beside, 3);
  EXPECT_EQ(s.engine->stats().memory_plans_overlapped - asked0, 2) << "each request planned once beside the forward";
  std::map<int64_t, std::vector<int32_t>> got;
  std::map<int64_t, int> first_step;
  for (int step = 3; step < 200 && s.engine->has_unfinished(); ++step) {
    const int64_t asked = s.engine->stats().memory_plans_overlapped;
    for (const RequestOutput& o : s.engine->step()) {
      EXPECT_FALSE(o.error);
      if (!o.new_tokens.empty() && !first_step.count(o.id)) first_step[o.id] = step;
      got[o.id].insert(got[o.id].end(), o.new_tokens.begin(), o.new_tokens.end());
    }
    EXPECT_LE(s.engine->stats().memory_plans_overlapped - asked, 1) << "the cold request planned at most once a step";
  }
  EXPECT_EQ(first_step[ids[0]], 3 + later) << "a warm request planned beside step 2 runs in step 3";
  EXPECT_EQ(first_step[ids[2]], 3 + later) << "a plain request added beside step 2 runs in step 3";
  EXPECT_EQ(got[ids[0]], alone_warm);
  EXPECT_EQ(got[ids[1]], alone_cold);
  EXPECT_EQ(got[ids[2]], alone_plain);
  EXPECT_EQ(running_tokens + got[running].size(), 40u) << "the running request decoded throughout";
  EXPECT_EQ(pins_of(s, warm), 0);
  EXPECT_EQ(pins_of(s, cold, cold_ask), 0);
  EXPECT_EQ(s.engine->blocks().num_free(), s.engine->blocks().num_blocks());
}

TEST(MemoryService, RequestsTakenBesideAForwardRunFromTheNextStep) {
  requests_taken_beside_a_forward(ScheduleAhead::kNever);
  requests_taken_beside_a_forward(ScheduleAhead::kWhereOverlapping);
}

// What `r` is answered on a stack in `dir` of its own, which leaves the facts' KV files there.
std::vector<int32_t> answered_leaving_kv_files(const std::filesystem::path& dir, const MemoryRequest& r) {
  Stack s(dir);
  add_alice(*s.store);
  return run_with_memory(s, r, 6).tokens;
}

// A stack whose facts' KV is only in KV files (a stack before it encoded them), over a backend
// that overlaps its forwards; `alone` is what `r` was answered there.
struct FilesOnly {
  explicit FilesOnly(ScheduleAhead ahead = ScheduleAhead::kWhereOverlapping)
      : be(with_overlap(s, 3, MemoryOptions{.kv_dir = dir.path() / "kv"}, ahead)) {}
  TempDir dir;
  MemoryRequest r = req(MemoryMode::kInject, 4, 2);
  std::vector<int32_t> alone = answered_leaving_kv_files(dir.path(), r);
  Stack s{dir.path()};
  test_support::DeferringBackend* be;
};

// An idle engine does not wait a step for a request's memory: it plans it before its first
// forward, so a lone request's first token comes in the first step, as with a backend that does not overlap;
// facts loaded from KV files there (a pool write) are written before the forward reads them.
TEST(MemoryService, AnIdleEngineResolvesBeforeItsFirstForward) {
  FilesOnly f;
  auto t = std::make_shared<RequestMemory>(f.r, PromptSource::of_chat(kAsk));
  const int64_t id = f.s.engine->add_memory_request(t, greedy(6));
  const auto first = f.s.engine->step();
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0].id, id);
  EXPECT_TRUE(first[0].admitted) << "the step says the request was admitted, before its first token";
  EXPECT_TRUE(first[0].new_tokens.empty());
  EXPECT_EQ(first[0].num_prompt_tokens, static_cast<int32_t>(t->served.tokens.size()));
  EXPECT_EQ(first[1].id, id);
  EXPECT_FALSE(first[1].admitted);
  EXPECT_EQ(first[1].new_tokens.size(), 1u) << "the first step computed the prompt";
  EXPECT_EQ(f.s.engine->stats().memory_plans_overlapped, 0);
  EXPECT_EQ(t->served.loaded, 4);
  std::vector<int32_t> tokens = first[1].new_tokens;
  for (const RequestOutput& o : f.s.engine->run_to_completion()) tokens.insert(tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
  EXPECT_EQ(tokens, f.alone);
  EXPECT_GT(f.be->launches, 0);
}

// A request whose facts are in KV files, arriving at a busy engine: the files are read while the
// forward runs (host work) and written into the pool before the next step's scheduling (scheduling
// ahead: the step after, whose forward is not queued behind the running one, once that one ends),
// never beside a forward (a pool write would have to wait for the device), also when a warm
// request planned after it beside the same forward composes its prompt there; the request runs
// from the next step (scheduling ahead: admitted in the step after the one it was read beside,
// run from two steps later), and is served exactly as alone.
void kv_files_written_between_forwards(ScheduleAhead ahead) {
  SCOPED_TRACE(ahead == ScheduleAhead::kNever ? "one step at a time" : "scheduling ahead");
  const bool sync = ahead == ScheduleAhead::kNever;
  FilesOnly f(ahead);
  const std::vector<NewFact> bobs{{"Bob plays chess on Sundays", "2023-01-05", {"", "", "", "Bob"}, "", {}},
                                  {"Bob has a dog named Rex", "2023-02-11", {"", "", "", "Bob"}, "", {}}};
  f.s.store->add_facts(kDefaultTenant, "bob", bobs);
  MemoryRequest warm = req(MemoryMode::kInject, 2, 2);
  warm.user = "bob";
  run_with_memory(f.s, warm, 1);  // bob's facts resident (and in files of their own)
  const int64_t running = f.s.engine->add_request(plain_tokens({{"user", "Hi"}}), greedy(30));
  f.s.engine->step();
  auto t = std::make_shared<RequestMemory>(f.r, PromptSource::of_chat(kAsk));
  const int64_t id = f.s.engine->add_memory_request(t, greedy(6));
  auto w = std::make_shared<RequestMemory>(warm, PromptSource::of_chat(kAsk));
  f.s.engine->add_memory_request(w, greedy(3));
  std::vector<int32_t> tokens;
  int step = 0, admitted_at = -1, first_token_at = -1;
  while (f.s.engine->has_unfinished()) {
    ++step;
    for (const RequestOutput& o : f.s.engine->step()) {
      EXPECT_FALSE(o.error);
      if (o.id != id) continue;
      if (o.admitted) admitted_at = step;
      if (!o.new_tokens.empty() && first_token_at < 0) first_token_at = step;
      tokens.insert(tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
    }
  }
  EXPECT_EQ(t->served.loaded, 4);
  EXPECT_TRUE(w->served.injected && w->served.loaded == 0 && w->served.encoded == 0) << "the warm one was resident";
  EXPECT_EQ(f.be->pool_writes_beside_forward, 0);
  EXPECT_EQ(admitted_at, 2) << "read beside step 1's forward, written and planned again before the next scheduling";
  EXPECT_EQ(first_token_at, sync ? 2 : 4);
  EXPECT_EQ(tokens, f.alone);
  EXPECT_TRUE(f.s.engine->find(running) == nullptr);
  EXPECT_EQ(pins_of(f.s, f.r), 0);
  EXPECT_EQ(pins_of(f.s, warm), 0);
}

TEST(MemoryService, KvFilesAreWrittenToThePoolBetweenForwards) {
  kv_files_written_between_forwards(ScheduleAhead::kNever);
  kv_files_written_between_forwards(ScheduleAhead::kWhereOverlapping);
}

// Two requests that need the same cold facts share one encoding: the second waits for the
// first's captures (pending entries are never injected) and both are served injected.
TEST(MemoryService, TwoRequestsShareOneEncoding) {
  TempDir dir;
  Stack s(dir.path());
  add_alice(*s.store);
  const MemoryRequest r = req(MemoryMode::kInject, 4, 2);
  auto a = std::make_shared<RequestMemory>(r, PromptSource::of_chat(kAsk));
  auto b = std::make_shared<RequestMemory>(r, PromptSource::of_chat(kAsk));
  const int64_t ia = s.engine->add_memory_request(a, greedy(5));
  const int64_t ib = s.engine->add_memory_request(b, greedy(5));
  const auto out = s.engine->run_to_completion();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(s.engine->stats().captures, 4) << "one encoding per fact";
  EXPECT_EQ(a->served.encoded + b->served.encoded, 4);
  EXPECT_TRUE(a->served.fallback.empty() && b->served.fallback.empty());
  ASSERT_TRUE(a->served.injected && b->served.injected);
  EXPECT_EQ(a->served.injected->pool_slots, b->served.injected->pool_slots);
  EXPECT_EQ(out[0].id, ia);
  EXPECT_EQ(out[1].id, ib);
  EXPECT_EQ(out[0].new_tokens, out[1].new_tokens);
  EXPECT_EQ(pins_of(s, r), 0);
}

// A request aborted while its facts encode: the captures still finish, leaving the facts resident
// and unpinned for the next request; captures dropped (after a failed step) are never served: the
// request waiting for them encodes again.
TEST(MemoryService, AbortedAndDroppedEncodings) {
  TempDir dir;
  Stack s(dir.path());
  add_alice(*s.store);
  const MemoryRequest r = req(MemoryMode::kInject, 4, 2);
  const std::vector<int32_t> expected = alone_tokens(r, 6);
  auto t = std::make_shared<RequestMemory>(r, PromptSource::of_chat(kAsk));
  const int64_t id = s.engine->add_memory_request(t, greedy(6));
  s.engine->step();  // resolves: captures queued (and run)
  s.engine->abort(id);
  s.engine->run_to_completion();
  EXPECT_EQ(s.engine->stats().captures, 4);
  EXPECT_EQ(pins_of(s, r), 0);
  MemoryPrompt warm = s.service->prepare(r, kAsk);
  EXPECT_EQ(warm.encoded, 0) << "the aborted request's captures left the facts resident";
  s.service->release(warm);

  // Dropped: a fresh service (nothing resident, no files) whose captures are dropped after one step.
  TempDir dir2;
  Stack d(dir2.path());
  add_alice(*d.store);
  with_budget(d, 16);  // a capture spans several steps
  auto u = std::make_shared<RequestMemory>(r, PromptSource::of_chat(kAsk));
  d.engine->add_memory_request(u, greedy(6));
  d.engine->step();
  EXPECT_LT(d.engine->stats().captures, 4);
  d.engine->drop_captures();
  const auto out = d.engine->run_to_completion();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_FALSE(out[0].error);
  EXPECT_EQ(d.engine->stats().captures, 4) << "encoded again after the drop";
  EXPECT_EQ(u->served.encoded, 8) << "4 dropped + 4 again";
  EXPECT_EQ(out[0].new_tokens, expected);
  EXPECT_EQ(pins_of(d, r), 0);
  EXPECT_EQ(d.engine->blocks().num_free(), d.engine->blocks().num_blocks());
}

// A pool too small for the facts: the connector serves the request as text (the same tokens), says
// why, and holds nothing.
TEST(MemoryService, MemoryWithoutRoomServesText) {
  TempDir dir;
  Stack s(dir.path(), {}, 512, /*pool_blocks=*/2);
  add_alice(*s.store);
  const MemoryRequest r = req(MemoryMode::kInject, 4, 2);
  const MemoryRun t = run_with_memory(s, r, 6);
  EXPECT_FALSE(t.prompt.fallback.empty());
  EXPECT_FALSE(t.prompt.injected.has_value());
  MemoryRequest text = r;
  text.mode = MemoryMode::kText;
  EXPECT_EQ(t.prompt.tokens, s.service->prepare(text, kAsk).tokens);
  EXPECT_EQ(pins_of(s, r), 0);
}

// Background work never evicts: with a pool too small for every fact, what does not fit in its
// free room is left to on-demand encoding, and nothing resident is pushed out.
TEST(MemoryService, BackgroundEncodingNeverEvicts) {
  TempDir dir;
  MemoryOptions o;
  Stack s(dir.path(), o, 512, /*pool_blocks=*/4);
  s.service->enable_background({});
  add_alice(*s.store);
  run_background(s, 8);
  EXPECT_EQ(s.service->pool().num_evictions(), 0);
  EXPECT_GT(s.service->background_skipped(), 0) << "4 facts do not fit 4 blocks";
  EXPECT_GE(s.service->background_encoded(), 1);
  EXPECT_EQ(s.service->background_encoded() + s.service->background_skipped(), 4);
}

// Background captures are low priority: beside a request's work a step gives them at most
// background_tokens_busy tokens, a request is admitted in the first step after it arrives, and a
// request whose memory waits for a fact the background is encoding promotes that work (served
// injected, encoding nothing itself).
TEST(MemoryService, BackgroundCapturesYieldToRequests) {
  TempDir dir;
  Stack s(dir.path());
  SchedulerOptions so;
  so.background_tokens_idle = 24;  // Alice's facts and windows take several steps
  so.background_tokens_busy = 8;
  with_budget(s, 2048, {}, so);
  s.service->enable_background({});
  add_alice(*s.store);
  std::vector<CaptureSeq> caps = s.service->queued_captures(8);
  ASSERT_EQ(caps.size(), 4u);
  for (CaptureSeq& c : caps) s.engine->add_background_capture(std::move(c));
  // An idle step: the background alone, capped.
  EngineStats before = s.engine->stats();
  s.engine->step();
  EXPECT_LE(s.engine->stats().tokens_computed - before.tokens_computed, so.background_tokens_idle);
  // A request arrives: its whole prompt goes in the next step, the background beside it capped.
  const std::vector<int32_t> plain = plain_tokens({{"user", "Tell me a story about a lighthouse keeper"}});
  const int64_t id = s.engine->add_request(plain, greedy(30));
  before = s.engine->stats();
  s.engine->step();
  EXPECT_EQ(s.engine->find(id)->num_output_tokens(), 1) << "admitted and prefilled at once";
  EXPECT_LE(s.engine->stats().tokens_computed - before.tokens_computed,
            static_cast<int64_t>(plain.size()) + so.background_tokens_busy);
  // A request needing the facts the background is still encoding: promoted, served injected.
  EXPECT_GT(s.engine->num_background(), 0u);
  auto t = std::make_shared<RequestMemory>(req(MemoryMode::kInject, 4, s.service->options().default_window), PromptSource::of_chat(kAsk));
  s.engine->add_memory_request(t, greedy(4));
  s.engine->run_to_completion();
  EXPECT_EQ(s.engine->num_background(), 0u);
  EXPECT_TRUE(t->served.fallback.empty()) << t->served.fallback;
  EXPECT_TRUE(t->served.injected.has_value());
  EXPECT_EQ(t->served.encoded, 0) << "the background's encodings served it";
  EXPECT_EQ(s.service->background_encoded(), 4);
  EXPECT_EQ(s.engine->blocks().num_free(), s.engine->blocks().num_blocks());
}

// Background captures hold KV blocks while they run; a request that needs those blocks takes them
// at once (the captures are preempted, and recomputed later), and the captures still finish.
TEST(MemoryService, BackgroundCapturesGiveTheirBlocksToARequest) {
  TempDir dir;
  Stack s(dir.path());
  SchedulerOptions so;
  so.background_tokens_idle = 16;
  so.background_tokens_busy = 16;
  with_budget(s, 2048, {}, so, /*cache_blocks=*/24);  // a capture's window (the block's opening, 5 facts) fits
  s.service->enable_background({});
  add_alice(*s.store);
  std::vector<CaptureSeq> caps = s.service->queued_captures(8);
  ASSERT_EQ(caps.size(), 4u);
  for (CaptureSeq& c : caps) s.engine->add_background_capture(std::move(c));
  for (int i = 0; i < 6; ++i) s.engine->step();  // the background now holds blocks
  const int64_t held = s.engine->blocks().num_blocks() - s.engine->blocks().num_free();
  ASSERT_GT(held, 2);
  // A prompt that needs more blocks than are free (and fits the cache).
  std::string text;
  for (int i = 0; i < 20; ++i) text += "Tell me more about the lighthouse. ";
  std::vector<int32_t> prompt = plain_tokens({{"user", text}});
  ASSERT_GT(prompt.size(), 24u * 16 + 1);
  prompt.resize(static_cast<size_t>((s.engine->blocks().num_free() + 1) * 16 + 1));
  const int64_t id = s.engine->add_request(prompt, greedy(3));
  s.engine->step();
  const Request* r = s.engine->find(id);
  ASSERT_NE(r, nullptr);
  EXPECT_GT(r->num_computed_tokens, 0) << "admitted at once, with the background's blocks";
  s.engine->run_to_completion();
  EXPECT_EQ(s.engine->stats().captures, 4) << "the preempted captures finished later";
  EXPECT_EQ(s.service->background_encoded(), 4);
  EXPECT_EQ(s.engine->blocks().num_free(), s.engine->blocks().num_blocks());
}

TEST(MemoryService, KZeroAndModeOffArePlainServing) {
  TempDir dir;
  Stack s(dir.path());
  add_alice(*s.store);
  const auto plain = plain_tokens(kAsk);
  for (const MemoryRequest& r : {req(MemoryMode::kInject, 0), req(MemoryMode::kOff, 5), req(MemoryMode::kText, 0)}) {
    MemoryPrompt p = s.service->prepare(r, kAsk);
    EXPECT_EQ(p.tokens, plain);
    EXPECT_FALSE(p.injected.has_value());
    EXPECT_TRUE(p.facts.empty());
  }
  MemoryPrompt p = s.service->prepare(req(MemoryMode::kInject, 0), kAsk);
  s.engine->add_request(plain, greedy(8));
  const auto want = s.engine->run_to_completion().at(0).new_tokens;
  EXPECT_EQ(s.run(p), want);
}

// A model served in the plain fallback format (no usable chat template): the same invariants, with
// the plain format's encoding (BOS from the tokenizer, special tokens not parsed).
TEST(MemoryService, PlainFormatModelKeepsTheInvariants) {
  static const Model plain_model = [] {
    Model m = load_model("demo");
    m.chat_template = ChatTemplate(ChatFamily::kPlain);
    return m;
  }();
  const ChatTemplate& t = plain_model.chat_template;
  auto ordinary = [&](const std::vector<ChatMessage>& msgs) {
    return plain_model.tokenizer->encode(t.render(msgs, true), t.encode_options(*plain_model.tokenizer));
  };
  TempDir dir;
  Stack s(dir.path(), {}, 512, 256, plain_model);
  add_alice(*s.store);
  const std::vector<ChatMessage> ask{{"user", "What is Alice's cat called? <|im_end|>"}};
  const auto plain = ordinary(ask);
  EXPECT_EQ(plain.front(), ByteTokenizer::kBos);  // the tokenizer's BOS, then text only
  EXPECT_EQ(std::count(plain.begin(), plain.end(), ByteTokenizer::kImEnd), 0);
  EXPECT_EQ(s.service->prepare(req(MemoryMode::kInject, 0), ask).tokens, plain);
  EXPECT_EQ(s.service->prepare(req(MemoryMode::kOff, 5), ask).tokens, plain);
  MemoryPrompt text = s.service->prepare(req(MemoryMode::kText, 3), ask);
  ASSERT_EQ(text.facts.size(), 3u);
  std::string memory = alices_block(*s.service).header;
  for (const Fact& f : text.facts) memory += "[" + f.timestamp + "] " + f.source.speaker + ": " + f.text + "\n";
  memory += alices_block(*s.service).footer;
  EXPECT_EQ(text.tokens, ordinary({{"system", memory}, ask[0]}));
  MemoryPrompt inject = s.service->prepare(req(MemoryMode::kInject, 3), ask);
  EXPECT_EQ(inject.tokens, text.tokens);  // inject differs only in how the facts' KV gets in
  ASSERT_TRUE(inject.injected.has_value());
  EXPECT_EQ(s.run(inject).size(), 8u);
  s.service->release(inject);
}

// Issue 11, defect 7: a chat with memory is rendered by the same code as a plain chat, so the two
// agree whatever the template does. Here a model without a chat template: the plain chat is
// refused (kUnsupported), and so is the same chat with memory, which a fallback of the memory
// path's own used to serve.
TEST(MemoryService, WithoutAChatTemplateMemoryAgreesWithAPlainChat) {
  Model bare = demo();
  bare.chat_template = ChatTemplate();
  TempDir dir;
  Stack s(dir.path(), {}, 512, 256, bare);
  add_alice(*s.store);
  expect_error([&] { plain_tokens(kAsk, bare); }, ErrorKind::kUnsupported, "no chat template");
  for (const MemoryRequest& r : {req(MemoryMode::kInject, 3), req(MemoryMode::kText, 3), req(MemoryMode::kInject, 0)})
    expect_error([&] { s.service->release(s.service->prepare(r, kAsk)); }, ErrorKind::kUnsupported, "no chat template");
}

// Issue 8, part 5: a completion goes through the same builder as a chat (memory/compose/prompt_layout.h).
// Without facts its prompt is exactly the plain completion's (text or token ids); with facts they
// go before the prompt, no chat template involved: [BOS][header][facts][footer][prompt].
TEST(MemoryService, CompletionsPlaceTheFactsBeforeThePrompt) {
  TempDir dir;
  Stack s(dir.path());
  add_alice(*s.store);
  const Tokenizer& tok = *demo().tokenizer;
  const std::string prompt = "Alice adopted a cat in March; its name:";
  const EncodeOptions as_text{.add_special = true, .parse_special = false};
  const std::vector<int32_t> plain_text = tok.encode(prompt, as_text);
  server::GenerateRequest g;
  g.kind = server::ApiKind::kCompletion;
  g.prompt_text = prompt;
  EXPECT_EQ(server::build_prompt(g, tok, demo().chat_template, nullptr).ids, plain_text);
  const PromptSource text_src = PromptSource::of_text(prompt);
  const PromptSource ids_src = PromptSource::of_ids(plain_text);
  for (const PromptSource* src : {&text_src, &ids_src})
    for (const MemoryRequest& r : {req(MemoryMode::kInject, 0), req(MemoryMode::kOff, 5), req(MemoryMode::kText, 0)}) {
      MemoryPrompt p = s.service->prepare(r, *src);
      EXPECT_EQ(p.tokens, plain_text);
      EXPECT_FALSE(p.injected.has_value());
    }
  for (const PromptSource* src : {&text_src, &ids_src}) {
    MemoryPrompt text = s.service->prepare(req(MemoryMode::kText, 3), *src);
    ASSERT_EQ(text.facts.size(), 3u);
    EXPECT_EQ(text.facts.back().text, "Alice adopted a cat named Miso in March");  // retrieved by the prompt
    std::string memory = alices_block(*s.service).header;
    for (const Fact& f : text.facts) memory += "[" + f.timestamp + "] " + f.source.speaker + ": " + f.text + "\n";
    memory += alices_block(*s.service).footer + "\n";  // the footer ends in a word: a newline before the prompt
    // Byte tokens: the concatenation of the parts' tokens is the tokens of the concatenated text.
    EXPECT_EQ(text.tokens, tok.encode(memory + prompt, as_text));
    MemoryPrompt inject = s.service->prepare(req(MemoryMode::kInject, 3), *src);
    EXPECT_EQ(inject.tokens, text.tokens);
    ASSERT_TRUE(inject.injected.has_value());
    EXPECT_EQ(s.run(inject).size(), 8u);
    s.service->release(inject);
  }
  // Token ids without a leading BOS stay without one: the block comes first.
  const std::vector<int32_t> bare(plain_text.begin() + 1, plain_text.end());
  MemoryPrompt p = s.service->prepare(req(MemoryMode::kText, 1), PromptSource::of_ids(bare));
  ASSERT_EQ(p.facts.size(), 1u);
  EXPECT_NE(p.tokens.front(), ByteTokenizer::kBos);
  EXPECT_TRUE(std::equal(bare.begin(), bare.end(), p.tokens.end() - static_cast<long>(bare.size())));
}

// Issue 8, part 5: one set of limits (MemoryRequest::kMax*), for the API, the defaults and here.
TEST(MemoryService, ValuesPastTheLimitsAreRefused) {
  TempDir dir;
  Stack s(dir.path());
  add_alice(*s.store);
  auto refused = [&](MemoryRequest r, const char* field) {
    expect_error([&] { s.service->prepare(r, kAsk); }, ErrorKind::kInvalidInput, field);
  };
  MemoryRequest r = req(MemoryMode::kInject, MemoryRequest::kMaxK + 1);
  refused(r, "memory.k");
  r = req(MemoryMode::kInject, 3, MemoryRequest::kMaxWindow + 1);
  refused(r, "memory.w");
  r = req(MemoryMode::kInject, 3);
  r.recompute = MemoryRequest::kMaxRecompute + 1;
  refused(r, "memory.recompute");
  r = req(MemoryMode::kInject, 3);
  r.recompute_last = MemoryRequest::kMaxRecomputeLast + 1;
  refused(r, "memory.recompute_last");
  r = req(MemoryMode::kInject, 3);
  r.recompute_attention = 1.01;
  refused(r, "memory.recompute_attention");
  r = req(MemoryMode::kInject, MemoryRequest::kMaxK, MemoryRequest::kMaxWindow);
  r.recompute = MemoryRequest::kMaxRecompute;
  r.recompute_last = MemoryRequest::kMaxRecomputeLast;
  MemoryPrompt p = s.service->prepare(r, kAsk);  // the limits themselves are allowed
  EXPECT_EQ(p.facts.size(), 4u);
  s.service->release(p);
}

TEST(MemoryService, TextModeIsTheOrdinaryPromptWithTheRenderedFacts) {
  TempDir dir;
  Stack s(dir.path());
  add_alice(*s.store);
  MemoryPrompt p = s.service->prepare(req(MemoryMode::kText, 3), kAsk);
  ASSERT_EQ(p.facts.size(), 3u);
  EXPECT_FALSE(p.injected.has_value());
  // Best-ranked fact last: scores ascend in placement order.
  for (size_t i = 1; i < p.scores.size(); ++i) EXPECT_LE(p.scores[i - 1], p.scores[i]);
  std::string memory = alices_block(*s.service).header;
  for (const Fact& f : p.facts) memory += "[" + f.timestamp + "] " + f.source.speaker + ": " + f.text + "\n";
  memory += alices_block(*s.service).footer;
  std::vector<ChatMessage> with{{"system", memory}, kAsk[0]};
  const auto ordinary = plain_tokens(with);
  EXPECT_EQ(p.tokens, ordinary);
  EXPECT_EQ(s.run(p), [&] {
    s.engine->add_request(ordinary, greedy(8));
    return s.engine->run_to_completion().at(0).new_tokens;
  }());
}

TEST(MemoryService, InjectSharesTextModeTokensAndCoversTheFacts) {
  TempDir dir;
  Stack s(dir.path());
  add_alice(*s.store);
  MemoryPrompt text = s.service->prepare(req(MemoryMode::kText, 3), kAsk);
  MemoryPrompt inj = s.service->prepare(req(MemoryMode::kInject, 3), kAsk);
  EXPECT_EQ(inj.tokens, text.tokens);
  ASSERT_TRUE(inj.injected.has_value());
  int32_t fact_tokens = 0;
  for (const Fact& f : inj.facts) fact_tokens += static_cast<int32_t>(s.service->fact_tokens(f).size());
  EXPECT_EQ(inj.injected->end - inj.injected->start, fact_tokens);
  EXPECT_EQ(inj.encoded, 3);
  EXPECT_NE(inj.injected->cache_key, 0u);
  // Generation runs; blocks and pins are all returned.
  s.run(inj);
  s.service->release(inj);
  EXPECT_EQ(s.engine->blocks().num_free(), s.engine->blocks().num_blocks());
}

TEST(MemoryService, SingleFactAtPositionZeroMatchesJointPrefill) {
  // [fact][question] with the fact injected at 0 (no BOS, no header) == the joint prefill.
  const Model& m = demo();
  BackendOptions bo;
  bo.num_cache_blocks = 32;
  bo.num_pool_blocks = 4;
  auto be = make_cpu_backend(m.config, m.weights, bo);
  const auto fact = m.tokenizer->encode("[2023-03-02] Alice: Alice adopted a cat named Miso.\n");
  const auto question = m.tokenizer->encode("What is the cat's name?");
  const int32_t nf = static_cast<int32_t>(fact.size()), nq = static_cast<int32_t>(question.size());
  BlockManager enc_blocks(8, 16);
  EncodeJob job{{}, fact, {}};
  for (int32_t j = 0; j < nf; ++j) job.pool_slots.push_back(j);
  FactEncoder(*be, enc_blocks).encode(std::span<const EncodeJob>(&job, 1));
  auto forward = [&](int32_t first_block, int32_t from, int32_t to, std::vector<float>& out) {
    ForwardBatch fb;
    for (int32_t i = from; i < to; ++i) {
      fb.token_ids.push_back(i < nf ? fact[static_cast<size_t>(i)] : question[static_cast<size_t>(i - nf)]);
      fb.positions.push_back(i);
      fb.slot_mapping.push_back(static_cast<int64_t>(first_block + i / 16) * 16 + i % 16);
      if (i >= nf) fb.output_tokens.push_back(i - from);
    }
    fb.q_indptr = {0, to - from};
    for (int32_t b = 0; b * 16 < nf + nq; ++b) fb.kv_indices.push_back(first_block + b);
    fb.kv_indptr = {0, static_cast<int32_t>(fb.kv_indices.size())};
    be->forward(fb, out);
  };
  std::vector<float> joint, injected;
  forward(8, 0, nf + nq, joint);
  InjectBatch ib;
  for (int32_t j = 0; j < nf; ++j) {
    ib.src_slots.push_back(j);
    ib.dst_slots.push_back(16 * 16 + j);
    ib.positions.push_back(j);
  }
  be->inject(ib);
  forward(16, nf, nf + nq, injected);
  ASSERT_EQ(joint.size(), injected.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < joint.size(); ++i) {
    num = std::max(num, std::fabs(double(joint[i]) - injected[i]));
    den = std::max(den, std::fabs(double(joint[i])));
  }
  EXPECT_LT(num / den, 1e-5);
}

TEST(MemoryService, UsersNeverSeeEachOthersFacts) {
  TempDir dir;
  Stack s(dir.path());
  add_alice(*s.store);
  const auto bob = s.store->add_fact(kDefaultTenant, "bob", NewFact{"Bob's cat is named Pixel and Bob adopted it", "", {}, "", {}});
  const auto other_tenant = s.store->add_fact("acme", "alice", NewFact{"The cat Alice adopted is named Zorro", "", {}, "", {}});
  for (MemoryMode mode : {MemoryMode::kInject, MemoryMode::kText}) {
    MemoryPrompt p = s.service->prepare(req(mode, 10), kAsk);
    for (const Fact& f : p.facts) {
      EXPECT_EQ(f.user, "alice");
      EXPECT_EQ(f.tenant, kDefaultTenant);
      EXPECT_NE(f.id, bob);
      EXPECT_NE(f.text.find("Alice"), std::string::npos);
      EXPECT_EQ(f.text.find("Zorro"), std::string::npos);  // acme's alice (whose fact has id 1 in acme)
    }
    s.service->release(p);
  }
  MemoryRequest rb = req(MemoryMode::kInject, 10);
  rb.user = "bob";
  MemoryPrompt pb = s.service->prepare(rb, kAsk);
  ASSERT_EQ(pb.facts.size(), 1u);
  EXPECT_EQ(pb.facts[0].id, bob);
  s.service->release(pb);
}

// Ids are per tenant, so two tenants' facts share ids: their KV (pool entries, KV files) must
// never be mistaken for each other's, also across a restart.
TEST(MemoryService, TenantsWithTheSameFactIdsGetTheirOwnKv) {
  TempDir dir;
  auto ask = [](Stack& s, const std::string& tenant) {
    MemoryRequest r = req(MemoryMode::kInject, 1);
    r.tenant = tenant;
    r.query = "adopted";
    MemoryPrompt p = s.service->prepare(r, kAsk);
    EXPECT_EQ(p.facts.size(), 1u);
    ServedKv kv{p.encoded, p.loaded, {}, {}};
    test::read_pool_f32(s.engine->backend(), p.injected->pool_slots, kv.k, kv.v);
    s.service->release(p);
    return std::make_pair(p.facts.at(0), kv);
  };
  ServedKv a0, b0;
  {
    Stack s(dir.path());
    EXPECT_EQ(s.store->add_fact(kDefaultTenant, "alice", NewFact{"Alice adopted a cat named Miso", "", {}, "", {}}), 1);
    EXPECT_EQ(s.store->add_fact("acme", "alice", NewFact{"Alice adopted a parrot named Rio", "", {}, "", {}}), 1);
    const auto [fa, kva] = ask(s, kDefaultTenant);
    const auto [fb, kvb] = ask(s, "acme");
    EXPECT_EQ(fa.text, "Alice adopted a cat named Miso");
    EXPECT_EQ(fb.text, "Alice adopted a parrot named Rio");
    EXPECT_EQ(kvb.encoded, 1);  // not default's fact 1 from the pool
    EXPECT_NE(kva.k, kvb.k);
    EXPECT_NE(s.service->kv_path(fa), s.service->kv_path(fb));
    a0 = kva;
    b0 = kvb;
  }
  Stack s(dir.path());
  const auto [fb, kvb] = ask(s, "acme");
  const auto [fa, kva] = ask(s, kDefaultTenant);
  EXPECT_EQ(kvb.loaded, 1);
  EXPECT_EQ(kva.loaded, 1);
  EXPECT_EQ(kvb.k, as_stored(b0.k));
  EXPECT_EQ(kva.k, as_stored(a0.k));
}

// The service's cache of retrieved facts serves repeated retrievals, but never another tenant's
// fact of the same id (ids are per tenant), nor a fact as it was before an update or a delete.
TEST(MemoryService, FactCacheFollowsTenantsAndWrites) {
  TempDir dir;
  Stack s(dir.path());
  ASSERT_EQ(s.store->add_fact(kDefaultTenant, "alice", NewFact{"Alice adopted a cat named Miso", "", {}, "", {}}), 1);
  ASSERT_EQ(s.store->add_fact("acme", "alice", NewFact{"Alice adopted a parrot named Rio", "", {}, "", {}}), 1);
  auto ask = [&](const std::string& tenant) {
    MemoryRequest r = req(MemoryMode::kText, 1);
    r.tenant = tenant;
    r.query = "adopted";
    MemoryPrompt p = s.service->prepare(r, kAsk);
    s.service->release(p);
    return p.facts.empty() ? std::string() : p.facts[0].tenant + ": " + p.facts[0].text;
  };
  for (int round = 0; round < 3; ++round) {  // interleaved: each tenant's fact 1 replaces the other's
    EXPECT_EQ(ask(kDefaultTenant), std::string(kDefaultTenant) + ": Alice adopted a cat named Miso") << round;
    EXPECT_EQ(ask(kDefaultTenant), std::string(kDefaultTenant) + ": Alice adopted a cat named Miso") << round;
    EXPECT_EQ(ask("acme"), "acme: Alice adopted a parrot named Rio") << round;
  }
  s.store->update(kDefaultTenant, "alice", 1, FactUpdate{std::string("Alice adopted a cat named Mochi"), std::nullopt});
  EXPECT_EQ(ask(kDefaultTenant), std::string(kDefaultTenant) + ": Alice adopted a cat named Mochi");
  EXPECT_EQ(ask("acme"), "acme: Alice adopted a parrot named Rio");
  s.store->remove("acme", "alice", 1);
  EXPECT_EQ(ask("acme"), "");
  EXPECT_EQ(ask(kDefaultTenant), std::string(kDefaultTenant) + ": Alice adopted a cat named Mochi");
}

TEST(MemoryService, DeletingAFactRemovesItFromRetrievalAndFreesItsKv) {
  TempDir dir;
  Stack s(dir.path());
  const auto ids = add_alice(*s.store);
  MemoryPrompt p = s.service->prepare(req(MemoryMode::kInject, 4), kAsk);
  s.service->release(p);
  const int64_t resident = s.service->pool().num_entries();
  const int64_t free_before = s.service->pool().num_free_blocks();
  const std::filesystem::path file = s.service->kv_path(s.store->get(kDefaultTenant, "alice", ids[0]));
  EXPECT_TRUE(std::filesystem::exists(file));
  s.store->remove(kDefaultTenant, "alice", ids[0]);
  MemoryPrompt q = s.service->prepare(req(MemoryMode::kInject, 4), kAsk);  // sync() runs first
  for (const Fact& f : q.facts) EXPECT_NE(f.id, ids[0]);
  EXPECT_EQ(s.service->pool().num_entries(), resident - 1);
  EXPECT_GT(s.service->pool().num_free_blocks(), free_before);
  EXPECT_FALSE(std::filesystem::exists(file));
  s.service->release(q);
}

// The service's token caches (a fact's tokens, its window's) lose deleted facts and never grow
// past MemoryOptions::max_cached_facts; what they serve is the same either way.
TEST(MemoryService, TokenCachesForgetDeletedFactsAndStayBounded) {
  TempDir dir;
  Stack s(dir.path());
  const auto ids = add_alice(*s.store);
  MemoryPrompt p = s.service->prepare(req(MemoryMode::kInject, 4, 2), kAsk);
  s.service->release(p);
  const size_t cached = s.service->num_cached_tokens();
  EXPECT_GE(cached, 4u + 3u);  // every fact's tokens; the windows of those with a predecessor
  for (int64_t id : ids) s.store->remove(kDefaultTenant, "alice", id);
  MemoryPrompt none = s.service->prepare(req(MemoryMode::kInject, 4, 2), kAsk);  // sync() runs first
  EXPECT_TRUE(none.facts.empty());
  EXPECT_EQ(s.service->num_cached_tokens(), 0u) << "deleted facts left the caches";
  s.service->release(none);

  TempDir dir2;
  MemoryOptions small;
  small.max_cached_facts = 2;
  Stack b(dir2.path(), small);
  add_alice(*b.store);
  TempDir dir3;
  Stack ref(dir3.path());
  add_alice(*ref.store);
  for (int round = 0; round < 3; ++round) {
    MemoryPrompt q = b.service->prepare(req(MemoryMode::kInject, 4, 2), kAsk);
    MemoryPrompt r = ref.service->prepare(req(MemoryMode::kInject, 4, 2), kAsk);
    EXPECT_LE(b.service->num_cached_tokens(), 4u) << "two caches of at most two entries";
    EXPECT_EQ(q.tokens, r.tokens);
    ASSERT_TRUE(q.injected && r.injected);
    EXPECT_EQ(b.run(q), ref.run(r));
    b.service->release(q);
    ref.service->release(r);
  }
}

// The facts encoding reads stay in the cache retrievals take their hits from, so the first
// request after an encoding reads no fact rows; a write anywhere empties it at the next use, and a
// deleted fact is never served from it.
TEST(MemoryService, EncodingFillsTheFactCache) {
  TempDir dir;
  Stack s(dir.path());
  const auto ids = add_alice(*s.store);
  EXPECT_EQ(s.service->num_cached_facts(), 0u);
  s.service->encode_facts(kDefaultTenant, "alice", ids, 2);
  EXPECT_EQ(s.service->num_cached_facts(), ids.size());
  size_t bytes = 0;
  for (const Fact& f : s.store->get_existing(kDefaultTenant, "alice", ids)) bytes += f.text.size() + f.metadata.size();
  EXPECT_EQ(s.service->cached_fact_bytes(), bytes);
  s.service->encode_facts(kDefaultTenant, "alice", ids, 2);  // read again: each entry replaced, not counted twice
  EXPECT_EQ(s.service->num_cached_facts(), ids.size());
  EXPECT_EQ(s.service->cached_fact_bytes(), bytes);
  MemoryPrompt p = s.service->prepare(req(MemoryMode::kInject, 4, 2), kAsk);
  EXPECT_EQ(p.facts.size(), ids.size());
  EXPECT_EQ(p.encoded, 0);
  s.service->release(p);
  s.store->remove(kDefaultTenant, "alice", ids[1]);
  MemoryPrompt q = s.service->prepare(req(MemoryMode::kInject, 4, 2), kAsk);  // sync() runs first
  EXPECT_EQ(q.facts.size(), ids.size() - 1);
  for (const Fact& f : q.facts) EXPECT_NE(f.id, ids[1]);
  EXPECT_EQ(s.service->num_cached_facts(), ids.size() - 1) << "the cache was emptied and refilled by the retrieval";
  s.service->release(q);
}

TEST(MemoryService, RestartReloadsFactsAndKvFiles) {
  TempDir dir;
  const FirstRun first = first_run(dir.path());
  EXPECT_EQ(first.prompt.encoded, static_cast<int32_t>(first.prompt.facts.size()));
  const std::vector<float>& k0 = first.k;
  const std::vector<float>& v0 = first.v;
  Stack s(dir.path());
  EXPECT_EQ(s.store->count(kDefaultTenant, "alice"), 4u);
  MemoryPrompt p = s.service->prepare(req(MemoryMode::kInject, 4), kAsk);
  EXPECT_EQ(p.encoded, 0);
  EXPECT_EQ(p.loaded, static_cast<int32_t>(p.facts.size()));
  std::vector<float> k1, v1;
  test::read_pool_f32(s.engine->backend(), p.injected->pool_slots, k1, v1);
  EXPECT_EQ(k1, as_stored(k0));  // the files are f16: exactly f16's rounding of what was encoded
  EXPECT_EQ(v1, as_stored(v0));
  for (const Fact& f : p.facts) {
    const auto kv = read_kv_file(s.service->kv_path(f), s.service->file_key(s.service->kv_key(f, 0)));
    ASSERT_TRUE(kv);
    EXPECT_EQ(kv->dtype, DType::kF16);  // half the bytes of the f32 pool's values
    EXPECT_EQ(kv->pool, DType::kF32);
  }
  s.service->release(p);
}

// An FP8 pool (cpu_kv_store.h) behind KV files: a restart loads the facts from the files (f16 of what
// the pool held) and serves them as the first run did; the reloaded rows are the first run's to
// within f16's rounding of each head's scale, and the answer's tokens are the same.
TEST(MemoryService, AnFp8PoolRestartsFromItsKvFiles) {
  TempDir dir;
  std::vector<float> k0, v0;
  std::vector<int32_t> answer0;
  {
    Stack s(dir.path(), {}, 512, 256, demo(), /*pool_fp8=*/true);
    add_alice(*s.store);
    MemoryPrompt p = s.service->prepare(req(MemoryMode::kInject, 4), kAsk);
    EXPECT_EQ(p.encoded, 4);
    test::read_pool_f32(s.engine->backend(), p.injected->pool_slots, k0, v0);
    answer0 = s.run(p);
    s.service->release(p);
  }
  Stack s(dir.path(), {}, 512, 256, demo(), /*pool_fp8=*/true);
  MemoryPrompt p = s.service->prepare(req(MemoryMode::kInject, 4), kAsk);
  EXPECT_EQ(p.encoded, 0);
  EXPECT_EQ(p.loaded, 4);
  std::vector<float> k1, v1;
  test::read_pool_f32(s.engine->backend(), p.injected->pool_slots, k1, v1);
  ASSERT_EQ(k1.size(), k0.size());
  double worst = 0;
  for (size_t i = 0; i < k0.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(k1[i]) - k0[i]) / (std::abs(k0[i]) + 1e-3));
    worst = std::max(worst, std::abs(static_cast<double>(v1[i]) - v0[i]) / (std::abs(v0[i]) + 1e-3));
  }
  EXPECT_LE(worst, 2e-3) << "f16's rounding of the scale, not a different code";
  EXPECT_EQ(s.run(p), answer0);
  s.service->release(p);
}

TEST(MemoryService, CorruptKvFileIsDetectedAndRebuilt) {
  TempDir dir;
  const FirstRun first = first_run(dir.path(), [](Stack& s, const MemoryPrompt& p) {
    // Flip one payload byte of the first placed fact's file.
    const auto path = s.service->kv_path(p.facts[0]);
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    char c = 0;
    f.read(&c, 1);
    f.seekp(100);
    c = static_cast<char>(c ^ 0x5a);
    f.write(&c, 1);
  });
  const std::vector<float>& k0 = first.k;
  const std::vector<float>& v0 = first.v;
  Stack s(dir.path());
  MemoryPrompt p = s.service->prepare(req(MemoryMode::kInject, 4), kAsk);
  EXPECT_EQ(p.encoded, 1);
  EXPECT_EQ(p.loaded, static_cast<int32_t>(p.facts.size()) - 1);
  std::vector<float> k1, v1;
  test::read_pool_f32(s.engine->backend(), p.injected->pool_slots, k1, v1);
  // Rebuilt from the text: the same numbers (up to GEMM blocking: it was encoded in another
  // batch); the others loaded, rounded to f16.
  ASSERT_EQ(k0.size(), k1.size());
  for (size_t i = 0; i < k0.size(); ++i) {
    EXPECT_NEAR(k0[i], k1[i], 1e-5f + std::fabs(k0[i]) / 2048);
    EXPECT_NEAR(v0[i], v1[i], 1e-5f + std::fabs(v0[i]) / 2048);
  }
  s.service->release(p);
}

TEST(MemoryService, ChangedFingerprintForcesARebuild) {
  TempDir dir;
  {
    Stack s(dir.path());
    add_alice(*s.store);
    s.service->release(s.service->prepare(req(MemoryMode::kInject, 4), kAsk));
  }
  MemoryOptions changed;
  changed.fact_template = "{speaker} said: {text}";
  Stack s(dir.path(), changed);
  MemoryPrompt p = s.service->prepare(req(MemoryMode::kInject, 4), kAsk);
  EXPECT_EQ(p.loaded, 0);
  EXPECT_EQ(p.encoded, static_cast<int32_t>(p.facts.size()));
  s.service->release(p);
}

TEST(MemoryService, UpdatedFactIsReencodedAndWindowsKeyTheKv) {
  TempDir dir;
  Stack s(dir.path());
  std::vector<NewFact> turns{{"I just got back from Lisbon", "", {"", "", "", "Alice"}, "", {}},
                             {"The weather there was great", "", {"", "", "", "Bob"}, "", {}},
                             {"My cat Miso missed me a lot", "", {"", "", "", "Alice"}, "", {}}};
  const auto ids = s.store->add_turns(kDefaultTenant, "alice", "conv-1", turns);
  auto cat = [](int32_t w) {
    MemoryRequest r = req(MemoryMode::kInject, 1, w);
    r.query = "cat Miso";
    return r;
  };
  MemoryPrompt w0 = s.service->prepare(cat(0), kAsk);
  ASSERT_EQ(w0.facts.size(), 1u);
  EXPECT_EQ(w0.facts[0].id, ids[2]);
  std::vector<float> k0, v0, k2, v2;
  test::read_pool_f32(s.engine->backend(), w0.injected->pool_slots, k0, v0);
  s.service->release(w0);
  MemoryPrompt w2 = s.service->prepare(cat(2), kAsk);
  EXPECT_EQ(w2.encoded, 1);  // another window is another KV
  test::read_pool_f32(s.engine->backend(), w2.injected->pool_slots, k2, v2);
  EXPECT_NE(k0, k2);
  s.service->release(w2);
  s.store->update(kDefaultTenant, "alice", ids[2], FactUpdate{std::string("My cat Miso missed me so much"), {}});
  MemoryPrompt u = s.service->prepare(cat(2), kAsk);
  EXPECT_EQ(u.encoded, 1);
  EXPECT_EQ(u.facts[0].version, 2);
  s.service->release(u);
}

// Issue 11, defect 2: a turn's KV depends on the turns encoded before it (its window). When one of
// them is deleted or edited, the turn's KV must be encoded again, in the pool and in its KV file,
// also across a restart; the new KV equals a fresh encoding of the new window.
namespace {

const std::vector<NewFact> kTrip{{"I just got back from Lisbon", "", {"", "", "", "Alice"}, "", {}},
                                 {"The weather there was great", "", {"", "", "", "Bob"}, "", {}},
                                 {"My cat Miso missed me a lot", "", {"", "", "", "Alice"}, "", {}}};

// The KV a request for the cat turn (w = 2) is served from.
ServedKv cat_kv(Stack& s) {
  MemoryRequest r = req(MemoryMode::kInject, 1, 2);
  r.query = "cat Miso";
  MemoryPrompt p = s.service->prepare(r, kAsk);
  EXPECT_EQ(p.facts.size(), 1u);
  EXPECT_NE(p.facts.at(0).text.find("cat Miso"), std::string::npos);
  ServedKv out{p.encoded, p.loaded, {}, {}};
  test::read_pool_f32(s.engine->backend(), p.injected->pool_slots, out.k, out.v);
  s.service->release(p);
  return out;
}

// The cat turn's KV encoded from scratch after `turns` (a fresh data dir).
ServedKv fresh_cat_kv(const std::vector<NewFact>& turns) {
  TempDir other;
  Stack s(other.path());
  s.store->add_turns(kDefaultTenant, "alice", "conv-1", turns);
  return cat_kv(s);
}

void expect_same_kv(const ServedKv& a, const ServedKv& b) {
  ASSERT_EQ(a.k.size(), b.k.size());
  for (size_t i = 0; i < a.k.size(); ++i) {
    ASSERT_NEAR(a.k[i], b.k[i], 1e-5f) << i;
    ASSERT_NEAR(a.v[i], b.v[i], 1e-5f) << i;
  }
}

}  // namespace

TEST(MemoryService, DeletingATurnReencodesTheTurnsAfterIt) {
  TempDir dir;
  Stack s(dir.path());
  const auto ids = s.store->add_turns(kDefaultTenant, "alice", "conv-1", kTrip);
  const ServedKv before = cat_kv(s);
  EXPECT_EQ(before.encoded, 1);
  EXPECT_EQ(cat_kv(s).encoded, 0);  // a pool hit while nothing changed
  s.store->remove(kDefaultTenant, "alice", ids[1]);
  const ServedKv after = cat_kv(s);
  EXPECT_EQ(after.encoded, 1);
  EXPECT_EQ(after.loaded, 0);
  expect_same_kv(after, fresh_cat_kv({kTrip[0], kTrip[2]}));
}

TEST(MemoryService, EditingATurnReencodesTheTurnsAfterIt) {
  TempDir dir;
  Stack s(dir.path());
  const auto ids = s.store->add_turns(kDefaultTenant, "alice", "conv-1", kTrip);
  EXPECT_EQ(cat_kv(s).encoded, 1);
  s.store->update(kDefaultTenant, "alice", ids[0], FactUpdate{std::string("I just got back from Porto"), {}});
  const ServedKv after = cat_kv(s);
  EXPECT_EQ(after.encoded, 1);
  std::vector<NewFact> edited = kTrip;
  edited[0].text = "I just got back from Porto";
  expect_same_kv(after, fresh_cat_kv(edited));
}

TEST(MemoryService, AChangedWindowIsReencodedAfterARestartDespiteItsKvFile) {
  TempDir dir;
  std::vector<int64_t> ids;
  {
    Stack s(dir.path());
    ids = s.store->add_turns(kDefaultTenant, "alice", "conv-1", kTrip);
    EXPECT_EQ(cat_kv(s).encoded, 1);  // written to its KV file
  }
  {
    Stack s(dir.path());
    EXPECT_EQ(cat_kv(s).loaded, 1);  // the file serves an unchanged window
  }
  // The middle turn goes while no server runs (another process, say).
  FactStore::open(dir.path())->remove(kDefaultTenant, "alice", ids[1]);
  Stack s(dir.path());
  const ServedKv after = cat_kv(s);
  EXPECT_EQ(after.loaded, 0);
  EXPECT_EQ(after.encoded, 1);
  expect_same_kv(after, fresh_cat_kv({kTrip[0], kTrip[2]}));
}

TEST(MemoryService, InjectedPrefixBlocksNeverServeATextRequest) {
  TempDir dir;
  Stack s(dir.path());
  add_alice(*s.store);
  MemoryPrompt inj = s.service->prepare(req(MemoryMode::kInject, 4), kAsk);
  s.engine->add_request(inj.tokens, greedy(4), inj.injected);
  const auto first = s.engine->run_to_completion().at(0);
  // The same memory request again hits the cached injected blocks and gives the same tokens.
  s.engine->add_request(inj.tokens, greedy(4), inj.injected);
  const auto again = s.engine->run_to_completion().at(0);
  EXPECT_GT(again.num_cached_tokens, inj.injected->end - 16);
  EXPECT_EQ(again.new_tokens, first.new_tokens);
  // Text mode has the same tokens, but may reuse only the blocks before the facts.
  MemoryPrompt text = s.service->prepare(req(MemoryMode::kText, 4), kAsk);
  ASSERT_EQ(text.tokens, inj.tokens);
  s.engine->add_request(text.tokens, greedy(4));
  const auto t = s.engine->run_to_completion().at(0);
  EXPECT_LE(t.num_cached_tokens, inj.injected->start);
  s.service->release(inj);
}

TEST(MemoryService, PreemptedInjectedRequestsEqualUninterrupted) {
  TempDir dir;
  std::vector<std::vector<int32_t>> alone;
  std::vector<MemoryPrompt> prompts;
  Stack s(dir.path(), {}, 40);
  add_alice(*s.store);
  const std::vector<std::string> questions{"Where does Alice work?", "What does the cat hate?", "What instrument?",
                                           "When was the cat adopted?"};
  for (const auto& q : questions) {
    prompts.push_back(s.service->prepare(req(MemoryMode::kInject, 3), {{"user", q}}));
    s.engine->add_request(prompts.back().tokens, greedy(60), prompts.back().injected);
    alone.push_back(s.engine->run_to_completion().at(0).new_tokens);
  }
  for (const auto& p : prompts) s.engine->add_request(p.tokens, greedy(60), p.injected);
  const auto out = s.engine->run_to_completion();
  EXPECT_GT(s.engine->stats().preemptions, 0);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i].new_tokens, alone[i]) << i;
  for (const auto& p : prompts) s.service->release(p);
  EXPECT_EQ(s.engine->blocks().num_free(), s.engine->blocks().num_blocks());
}

// The same through the connector, cold: four requests whose facts (w = 2) are encoded as captures inside
// the steps of a cache too small for all of them at once, so requests and captures are preempted
// and recomputed; every answer equals the one served alone on a fresh stack.
TEST(MemoryService, PreemptedMemoryRequestsAndCapturesEqualUninterrupted) {
  const std::vector<std::string> questions{"Where does Alice work?", "What does the cat hate?", "What instrument?",
                                           "When was the cat adopted?"};
  const MemoryRequest r = req(MemoryMode::kInject, 3, 2);
  std::vector<std::vector<int32_t>> alone;
  for (const auto& q : questions) {
    TempDir other;
    Stack a(other.path());
    add_alice(*a.store);
    alone.push_back(run_with_memory(a, r, 60, {{"user", q}}).tokens);
  }
  TempDir dir;
  Stack s(dir.path(), {}, 40);
  add_alice(*s.store);
  std::vector<std::shared_ptr<RequestMemory>> memories;
  std::vector<int64_t> ids;
  for (const auto& q : questions) {
    memories.push_back(std::make_shared<RequestMemory>(r, PromptSource::of_chat({{"user", q}})));
    ids.push_back(s.engine->add_memory_request(memories.back(), greedy(60)));
  }
  const auto out = s.engine->run_to_completion();  // in the order of their first tokens
  EXPECT_GT(s.engine->stats().preemptions, 0);
  EXPECT_GT(s.engine->stats().captures, 0);
  ASSERT_EQ(out.size(), questions.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto o = std::find_if(out.begin(), out.end(), [&](const RequestOutput& x) { return x.id == ids[i]; });
    ASSERT_NE(o, out.end());
    EXPECT_FALSE(o->error);
    EXPECT_TRUE(memories[i]->served.fallback.empty()) << memories[i]->served.fallback;
    EXPECT_EQ(o->new_tokens, alone[i]) << i;
  }
  EXPECT_EQ(pins_of(s, r), 0);
  EXPECT_EQ(s.engine->blocks().num_free(), s.engine->blocks().num_blocks());
}

// The memory pool cannot hold a request's facts: too small for them, or pinned by a running
// request. Mode inject then serves the same tokens as text (and says so) instead of failing, and
// keeps nothing pinned; once the pins go, the same request is injected again.
TEST(MemoryService, NoRoomInThePoolFallsBackToTextAndPinsNothing) {
  TempDir dir;
  int64_t alice_blocks = 0;
  {
    Stack big(dir.path() / "big");
    add_alice(*big.store);
    MemoryPrompt p = big.service->prepare(req(MemoryMode::kInject, 4), kAsk);
    ASSERT_TRUE(p.fallback.empty());
    alice_blocks = big.service->pool().num_blocks() - big.service->pool().num_free_blocks();
    big.service->release(p);
  }
  ASSERT_GT(alice_blocks, 2);

  // Too small for the request: every fact fits alone, all four do not.
  Stack small(dir.path() / "small", {}, 512, alice_blocks - 1);
  add_alice(*small.store);
  const MemoryPrompt text = small.service->prepare(req(MemoryMode::kText, 4), kAsk);
  MemoryPrompt p = small.service->prepare(req(MemoryMode::kInject, 4), kAsk);
  EXPECT_NE(p.fallback.find("memory pool full"), std::string::npos) << p.fallback;
  EXPECT_FALSE(p.injected);
  EXPECT_TRUE(p.pins.empty());
  EXPECT_EQ(p.tokens, text.tokens);
  EXPECT_EQ(small.run(p), small.run(text));
  small.service->release(p);
  // Nothing stayed pinned: a request that fits is injected.
  MemoryPrompt one = small.service->prepare(req(MemoryMode::kInject, 1), kAsk);
  EXPECT_TRUE(one.fallback.empty());
  ASSERT_TRUE(one.injected);
  small.service->release(one);

  // Room enough, but pinned by a running request: the second one falls back until the first ends.
  Stack busy(dir.path() / "busy", {}, 512, alice_blocks + 1);
  add_alice(*busy.store);
  MemoryPrompt first = busy.service->prepare(req(MemoryMode::kInject, 4), kAsk);
  ASSERT_TRUE(first.injected);
  MemoryRequest other = req(MemoryMode::kInject, 4);
  other.window = 1;  // the same facts under another window: other pool entries
  MemoryPrompt second = busy.service->prepare(other, kAsk);
  EXPECT_FALSE(second.fallback.empty());
  EXPECT_FALSE(second.injected);
  busy.service->release(first);
  MemoryPrompt third = busy.service->prepare(other, kAsk);
  EXPECT_TRUE(third.fallback.empty()) << third.fallback;
  EXPECT_TRUE(third.injected);
  busy.service->release(third);
}

// A KV file written by the other backend (bf16 from a GPU pool) is not served by the CPU: its fact
// is encoded again, the others load.
TEST(MemoryService, KvFileOfAnotherPoolDtypeIsReencoded) {
  TempDir dir;
  const FirstRun first = first_run(dir.path(), [](Stack& s, const MemoryPrompt& p) {
    const Fact& f = p.facts[0];
    const KvFileKey key = s.service->file_key(s.service->kv_key(f, 0));
    auto kv = read_kv_file(s.service->kv_path(f), key);
    ASSERT_TRUE(kv);
    kv->pool = DType::kBF16;  // as a GPU would have written it: bf16 values from a bf16 pool
    kv->dtype = DType::kBF16;
    for (HostTensor* t : {&kv->k, &kv->v}) {
      HostTensor b = HostTensor::uninitialized(DType::kBF16, t->shape);
      convert_from_f32(DType::kBF16, t->as<float>(), b.data, static_cast<size_t>(t->numel()));
      *t = b;
    }
    write_kv_file(s.service->kv_path(f), key, *kv);
  });
  const size_t placed = first.prompt.facts.size();
  Stack s(dir.path());
  MemoryPrompt p = s.service->prepare(req(MemoryMode::kInject, 4), kAsk);
  EXPECT_EQ(p.encoded, 1);
  EXPECT_EQ(p.loaded, static_cast<int32_t>(placed) - 1);
  s.service->release(p);
}

namespace {
MemoryRequest recompute_req(int32_t r, int32_t k = 3, int32_t w = 2) {
  MemoryRequest q = req(MemoryMode::kInject, k, w);
  q.recompute = r;
  return q;
}
// The request's K/V at token indices `at` after its prefill (the request stays live for that).
void prefill_kv(Stack& s, const MemoryPrompt& p, const std::vector<int32_t>& at, std::vector<float>& k,
                std::vector<float>& v) {
  const int64_t id = s.engine->add_request(p.tokens, greedy(2), p.injected);
  s.engine->step();
  const Request* r = s.engine->find(id);
  ASSERT_NE(r, nullptr);
  const int32_t bs = s.engine->backend().block_size();
  std::vector<int64_t> slots;
  for (int32_t i : at) slots.push_back(static_cast<int64_t>(r->block_table[static_cast<size_t>(i / bs)]) * bs + i % bs);
  test::read_cache_f32(s.engine->backend(), slots, k, v);
  s.engine->run_to_completion();
}
}  // namespace

// memory.recompute (EPIC-style): the first r tokens of each fact are computed in the request's
// context instead of injected. Recomputing every token is exactly text mode.
TEST(MemoryService, RecomputingEveryFactTokenIsTextMode) {
  TempDir dir;
  Stack s(dir.path());
  add_alice(*s.store);
  MemoryPrompt text = s.service->prepare(req(MemoryMode::kText, 3, 2), kAsk);
  MemoryPrompt all = s.service->prepare(recompute_req(MemoryRequest::kMaxRecompute), kAsk);
  ASSERT_TRUE(all.injected.has_value());
  EXPECT_EQ(all.tokens, text.tokens);
  EXPECT_EQ(all.injected->num_injected(), 0);
  EXPECT_EQ(all.recomputed, all.injected->end - all.injected->start);
  std::vector<int32_t> at;
  for (int32_t i = all.injected->start; i < all.injected->end; ++i) at.push_back(i);
  std::vector<float> tk, tv, ak, av;
  prefill_kv(s, text, at, tk, tv);
  prefill_kv(s, all, at, ak, av);
  // Equal up to float summation order (the second request reuses the prefix-cached blocks before
  // the facts, so its forward has other chunks).
  ASSERT_EQ(ak.size(), tk.size());
  double worst = 0;
  for (size_t i = 0; i < tk.size(); ++i)
    worst = std::max({worst, std::fabs(double(ak[i]) - tk[i]), std::fabs(double(av[i]) - tv[i])});
  EXPECT_LT(worst, 1e-5);
  EXPECT_EQ(s.run(all, 12), s.run(text, 12));
  s.service->release(all);
}

TEST(MemoryService, RecomputedFirstTokensSeeTheRealContext) {
  TempDir dir;
  Stack s(dir.path());
  add_alice(*s.store);
  const int32_t r = 3;
  MemoryPrompt text = s.service->prepare(req(MemoryMode::kText, 3, 2), kAsk);
  MemoryPrompt part = s.service->prepare(recompute_req(r), kAsk);
  MemoryPrompt none = s.service->prepare(recompute_req(0), kAsk);
  ASSERT_TRUE(part.injected && none.injected);
  EXPECT_EQ(part.recomputed, r * static_cast<int32_t>(part.facts.size()));
  EXPECT_EQ(part.injected->num_injected(), part.injected->end - part.injected->start - part.recomputed);
  EXPECT_NE(part.injected->cache_key, none.injected->cache_key);  // other KV, other prefix-cache key
  // The first fact's first r tokens follow the exactly computed prefix: their K/V equal text mode's,
  // where the injected ones (encoded after the fact's own window, not this prompt) do not.
  std::vector<int32_t> at;
  for (int32_t i = 0; i < r; ++i) at.push_back(part.injected->start + i);
  std::vector<float> tk, tv, pk, pv, nk, nv;
  prefill_kv(s, text, at, tk, tv);
  prefill_kv(s, part, at, pk, pv);
  prefill_kv(s, none, at, nk, nv);
  ASSERT_EQ(pk.size(), tk.size());
  double worst = 0, injected_gap = 0;
  for (size_t i = 0; i < tk.size(); ++i) {
    worst = std::max(worst, std::fabs(double(pk[i]) - tk[i]));
    injected_gap = std::max(injected_gap, std::fabs(double(nk[i]) - tk[i]));
  }
  EXPECT_LT(worst, 1e-5);
  EXPECT_GT(injected_gap, 1e-3);
  s.service->release(part);
  s.service->release(none);
}

TEST(MemoryService, RecomputeChunkedAndPreemptedEqualOneShot) {
  TempDir dir;
  std::vector<MemoryPrompt> prompts;
  std::vector<std::vector<int32_t>> alone;
  {
    Stack s(dir.path());
    add_alice(*s.store);
  }
  Stack big(dir.path());
  const std::vector<std::string> questions{"Where does Alice work?", "What does the cat hate?", "What instrument?"};
  for (const auto& q : questions) {
    prompts.push_back(big.service->prepare(recompute_req(2), {{"user", q}}));
    alone.push_back(big.run(prompts.back(), 40));
  }
  for (const auto& p : prompts) big.service->release(p);
  // Chunks of 7 tokens split the facts' span between injected and recomputed tokens.
  {
    Stack s(dir.path());
    with_budget(s, 7);
    for (size_t i = 0; i < questions.size(); ++i) {
      MemoryPrompt p = s.service->prepare(recompute_req(2), {{"user", questions[i]}});
      EXPECT_EQ(s.run(p, 40), alone[i]) << "chunked " << i;
      s.service->release(p);
    }
  }
  // A cache too small for all three at once: preemption recomputes and re-injects.
  Stack small(dir.path(), {}, 26);
  std::vector<MemoryPrompt> ps;
  for (const auto& q : questions) {
    ps.push_back(small.service->prepare(recompute_req(2), {{"user", q}}));
    small.engine->add_request(ps.back().tokens, greedy(40), ps.back().injected);
  }
  const auto out = small.engine->run_to_completion();
  EXPECT_GT(small.engine->stats().preemptions, 0);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i].new_tokens, alone[i]) << "preempted " << i;
  for (const auto& p : ps) small.service->release(p);
  EXPECT_EQ(small.engine->blocks().num_free(), small.engine->blocks().num_blocks());
}

// The selectors of recompute.h: first r and last m by fact, then the attention selector's budget
// over the tokens still injected, heaviest first, the earlier on equal weight.
TEST(RecomputeSelect, FirstLastAndAttention) {
  std::vector<uint8_t> mask = fact_recompute_mask({0, 3, 5, 9}, 1, 1);
  EXPECT_EQ(mask, (std::vector<uint8_t>{1, 0, 0, 1, 0, 1, 1, 1, 1}));
  EXPECT_EQ(fact_recompute_mask({0, 3, 5}, 0, 0), std::vector<uint8_t>(5, 0));
  EXPECT_EQ(fact_recompute_mask({0, 3, 5}, 9, 0), std::vector<uint8_t>(5, 1));
  const std::vector<float> mass{0.9f, 0.1f, 0.5f, 0.0f, 0.2f, 0.7f, 0.3f, 0.3f, 0.3f};
  // floor(0.34 * 9) = 3 among tokens 1, 2, 4: all three.
  std::vector<uint8_t> m = mask;
  EXPECT_EQ(add_attention_choice(m, mass, 0.34), 3);
  EXPECT_EQ(m, std::vector<uint8_t>(9, 1));
  std::vector<uint8_t> none(9, 0);
  EXPECT_EQ(add_attention_choice(none, mass, 0.45), 4);  // 0.9, 0.7, 0.5, then 0.3 at index 6
  EXPECT_EQ(none, (std::vector<uint8_t>{1, 0, 1, 0, 0, 1, 1, 0, 0}));
  std::vector<uint8_t> zero(9, 0);
  EXPECT_EQ(add_attention_choice(zero, mass, 0.0), 0);
  EXPECT_EQ(zero, std::vector<uint8_t>(9, 0));
}

// memory.recompute_attention: a probe pass measures the question's attention on each injected
// token, and the heaviest fraction of them is recomputed. Every token recomputed is exactly text
// mode; a part recomputes floor(fraction * span) tokens, the probe's heaviest, and serves the same
// answer as that mask given directly.
TEST(MemoryService, AttentionRecomputeOfEveryTokenIsTextMode) {
  TempDir dir;
  Stack s(dir.path());
  add_alice(*s.store);
  MemoryRequest all = req(MemoryMode::kInject, 3, 2);
  all.recompute_attention = 1.0;
  const MemoryRun got = run_with_memory(s, all, 12);
  ASSERT_TRUE(got.prompt.injected.has_value());
  const InjectedSpan& span = *got.prompt.injected;
  EXPECT_EQ(got.prompt.recomputed, span.end - span.start);
  EXPECT_EQ(span.num_injected(), 0);
  EXPECT_EQ(s.engine->stats().probes, 1);
  const MemoryRun text = run_with_memory(s, req(MemoryMode::kText, 3, 2), 12);
  EXPECT_EQ(got.prompt.tokens, text.prompt.tokens);
  EXPECT_EQ(got.tokens, text.tokens);
}

TEST(MemoryService, AttentionRecomputeTakesTheProbesHeaviestTokens) {
  TempDir dir;
  Stack s(dir.path());
  add_alice(*s.store);
  MemoryRequest part = req(MemoryMode::kInject, 4, 2);
  part.recompute_attention = 0.2;
  const MemoryRun got = run_with_memory(s, part, 12);
  ASSERT_TRUE(got.prompt.injected.has_value() && got.memory->probe);
  const InjectedSpan& span = *got.prompt.injected;
  const int32_t n = span.end - span.start;
  EXPECT_EQ(got.prompt.recomputed, n / 5);
  const std::vector<float>& mass = got.memory->probe->mass;
  ASSERT_EQ(static_cast<int32_t>(mass.size()), n);
  // Weights: the probed row (the prompt's last token) spreads, per layer and head, at most 1 over
  // the span, in the layers the probe sums (the upper half).
  const ModelConfig& cfg = demo().config;
  const double total = std::accumulate(mass.begin(), mass.end(), 0.0);
  EXPECT_GT(total, 0.0);
  EXPECT_LT(total, static_cast<double>((cfg.num_layers - probe_first_layer(cfg.num_layers)) * cfg.num_heads));
  float least_chosen = INFINITY, most_left = -INFINITY;
  for (int32_t i = 0; i < n; ++i) {
    EXPECT_GE(mass[static_cast<size_t>(i)], 0.0f);
    if (span.recompute[static_cast<size_t>(i)]) least_chosen = std::min(least_chosen, mass[static_cast<size_t>(i)]);
    else most_left = std::max(most_left, mass[static_cast<size_t>(i)]);
  }
  EXPECT_GE(least_chosen, most_left);
  // The same prompt and mask, given directly, answer the same.
  EXPECT_EQ(s.run(got.prompt, 12), got.tokens);
  // The probe computed in chunks of 7 tokens (its facts injected chunk by chunk) finds the same weights.
  with_budget(s, 7);
  const MemoryRun chunked = run_with_memory(s, part, 12);
  ASSERT_TRUE(chunked.memory->probe);
  const std::vector<float>& again = chunked.memory->probe->mass;
  ASSERT_EQ(again.size(), mass.size());
  for (size_t i = 0; i < mass.size(); ++i) EXPECT_NEAR(again[i], mass[i], 1e-4f * std::max(1.0f, mass[i])) << i;
  EXPECT_EQ(chunked.prompt.injected->recompute, span.recompute);
  EXPECT_EQ(chunked.tokens, got.tokens);
  // Scheduling a step ahead (the GPU's way, on the CPU): the probe's forward, then the request's.
  EngineOptions eo;
  eo.schedule_ahead = ScheduleAhead::kAlways;
  with_engine(s, eo);
  const MemoryRun ahead = run_with_memory(s, part, 12);
  EXPECT_EQ(ahead.prompt.injected->recompute, span.recompute);
  EXPECT_EQ(ahead.tokens, got.tokens);
  EXPECT_EQ(s.engine->stats().probes, 1);
}

// Every chat family frames a block of facts: Llama 3 / 3.1 and Mistral trim each message's content
// (Jinja's `trim`), which once cut the marker's last character, so every memory chat on a Llama 3
// tokenizer failed ("the chat template dropped the memory marker"); with and without a client
// system prompt, with an empty header or footer too.
TEST(MemoryService, EveryChatFamilyFramesTheFacts) {
  const Tokenizer& tok = *demo().tokenizer;
  const std::string question = "What is the name of the cat Alice adopted?";
  for (ChatFamily family : {ChatFamily::kLlama3, ChatFamily::kLlama31, ChatFamily::kChatML, ChatFamily::kMistral}) {
    const ChatTemplate tmpl(family, "", "");
    for (bool system : {false, true}) {
      for (const FactsBlock& block : {FactsBlock{"Memories:\n", "\n"}, FactsBlock{"", ""}, FactsBlock{"Memories:", ""}}) {
        std::vector<ChatMessage> msgs;
        if (system) msgs.push_back({"system", "You are terse."});
        msgs.push_back({"user", question});
        const std::string what = std::string(chat_family_name(family)) + (system ? " +system" : "") + " header '" + block.header + "'";
        PromptFrame f;
        ASSERT_NO_THROW(f = frame_prompt(PromptSource::of_chat(msgs), tok, tmpl, &block)) << what;
        const std::string before = tok.decode(f.before, false), after = tok.decode(f.after, false);
        EXPECT_EQ(before.find('\x1e'), std::string::npos) << what;
        EXPECT_EQ(after.find('\x1e'), std::string::npos) << what;
        EXPECT_NE((before + after).find(question), std::string::npos) << what;
        if (system) EXPECT_NE(before.find("You are terse."), std::string::npos) << what;
        if (!block.header.empty()) EXPECT_NE(before.find("Memories:"), std::string::npos) << what;
      }
    }
  }
}

// A chat the template gives no place for the block (Mistral's, ending with the assistant's turn
// to continue) is refused by name: kUnsupported, a 400 on the server, not an internal error.
TEST(MemoryService, AChatWithNoPlaceForTheBlockIsRefusedByName) {
  const Tokenizer& tok = *demo().tokenizer;
  const FactsBlock block{"Memories:\n", "\n"};
  const ChatTemplate mistral(ChatFamily::kMistral, "", "");
  PromptSource src = PromptSource::of_chat({{"user", "Where does Bob work?"}, {"assistant", "Bob works"}});
  src.render.add_generation_prompt = false;
  src.render.continue_final_message = true;
  expect_error([&] { frame_prompt(src, tok, mistral, &block); }, ErrorKind::kUnsupported, "end the messages with a user turn");
}

// The cache of the text before the facts (EncodeCache) changes no frame: chat in every family,
// with and without a system prompt, completion text and ids, a second request served from the
// cache, and a full cache cleared rather than grown.
TEST(MemoryService, FrameCacheGivesTheSameFrames) {
  const Tokenizer& tok = *demo().tokenizer;
  const FactsBlock block{"Memories:\n", "\n"};
  EncodeCache cache(4);
  std::vector<PromptSource> sources;
  for (const char* q : {"What is the name of the cat Alice adopted?", "Where does Bob work?"}) {
    sources.push_back(PromptSource::of_chat({{"user", q}}));
    sources.push_back(PromptSource::of_chat({{"system", "You are terse."}, {"user", q}}));
    sources.push_back(PromptSource::of_text(q));
    sources.push_back(PromptSource::of_ids(tok.encode(q, {.add_special = true, .parse_special = false})));
  }
  for (ChatFamily family : {ChatFamily::kLlama31, ChatFamily::kChatML, ChatFamily::kMistral}) {
    const ChatTemplate tmpl(family, "", "");
    for (int round = 0; round < 2; ++round) {
      for (const PromptSource& src : sources) {
        const PromptFrame plain = frame_prompt(src, tok, tmpl, &block);
        const PromptFrame cached = frame_prompt(src, tok, tmpl, &block, &cache);
        EXPECT_EQ(cached.before, plain.before) << chat_family_name(family) << " round " << round;
        EXPECT_EQ(cached.after, plain.after) << chat_family_name(family) << " round " << round;
        EXPECT_LE(cache.size(), 4u);
      }
    }
  }
  // Two questions under one system prompt share the text before the facts: one entry.
  EncodeCache one;
  const ChatTemplate mistral(ChatFamily::kMistral, "", "");
  frame_prompt(sources[0], tok, mistral, &block, &one);
  frame_prompt(sources[4], tok, mistral, &block, &one);
  EXPECT_EQ(one.size(), 1u);
}

// A template with a default system prompt (SmolLM2's ChatML) keeps it when memory makes the system
// message: the memory block follows it, as it follows a client's own system prompt.
namespace {
// Alice's facts served by the demo model under another chat template: `m` must outlive it.
struct TemplateStack {
  explicit TemplateStack(const Model& m) : store(FactStore::open(dir.path())), retriever(*store) {
    add_alice(*store);
    BackendOptions bo;
    bo.num_cache_blocks = 64;
    bo.num_pool_blocks = 64;
    engine = std::make_unique<Engine>(make_cpu_backend(m.config, m.weights, bo), m.tokenizer, EngineOptions{});
    svc = std::make_unique<MemoryService>(*store, retriever, m, engine->backend(), engine->blocks(), MemoryOptions{});
    engine->set_memory(svc.get());
  }
  TempDir dir;
  std::unique_ptr<FactStore> store;
  Bm25Retriever retriever;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<MemoryService> svc;
};
}  // namespace

TEST(MemoryService, MemoryFollowsTheTemplatesDefaultSystemPrompt) {
  Model m = demo();
  m.chat_template = ChatTemplate(ChatFamily::kChatML, "", "", "You are a helpful AI assistant named Demo");
  TemplateStack stack(m);
  MemoryService& svc = *stack.svc;
  const MemoryPrompt p = svc.prepare(req(MemoryMode::kText, 2), kAsk);
  const std::string text = m.tokenizer->decode(p.tokens, false);
  EXPECT_EQ(text.rfind("<|im_start|>system\nYou are a helpful AI assistant named Demo\n\n" + alices_block(svc).header, 0), 0u)
      << text;
  // Mode off: exactly the plain prompt, default system prompt included.
  const MemoryPrompt off = svc.prepare(req(MemoryMode::kOff, 2), kAsk);
  EXPECT_EQ(m.tokenizer->decode(off.tokens, false), m.chat_template.render(kAsk, true));
}

// Every chat family serves memory in inject mode: the text each fact is encoded after (the block's
// opening) is framed from a chat of one user message, since Mistral's template writes the system
// text into the last user turn and has nowhere to put it in a chat without one.
TEST(MemoryService, EveryChatFamilyInjectsMemory) {
  for (ChatFamily family : {ChatFamily::kLlama31, ChatFamily::kChatML, ChatFamily::kMistral, ChatFamily::kPlain}) {
    Model m = demo();
    m.chat_template = ChatTemplate(family, "", "");
    TemplateStack stack(m);
    MemoryService& svc = *stack.svc;
    MemoryPrompt p = svc.prepare(req(MemoryMode::kInject, 2), kAsk);
    ASSERT_TRUE(p.injected.has_value()) << static_cast<int>(family);
    EXPECT_EQ(p.facts.size(), 2u);
    // The same tokens as the text mode's: only how the facts' KV gets in differs.
    EXPECT_EQ(p.tokens, svc.prepare(req(MemoryMode::kText, 2), kAsk).tokens) << static_cast<int>(family);
    svc.release(p);
  }
}

// memory.recompute_last: the last m placed facts (nearest the question) are computed whole.
TEST(MemoryService, RecomputeLastComputesTheFactsNearestTheQuestion) {
  TempDir dir;
  Stack s(dir.path());
  add_alice(*s.store);
  MemoryRequest r = req(MemoryMode::kInject, 3, 2);
  r.recompute_last = 1;
  MemoryPrompt p = s.service->prepare(r, kAsk);
  ASSERT_TRUE(p.injected.has_value());
  const int32_t last = static_cast<int32_t>(s.service->fact_tokens(p.facts.back()).size());
  EXPECT_EQ(p.recomputed, last);
  for (int32_t i = p.injected->start; i < p.injected->end; ++i)
    EXPECT_EQ(p.injected->injects(i), i < p.injected->end - last) << i;
  // With the first-r rule too, both marks add up.
  r.recompute = 2;
  MemoryPrompt both = s.service->prepare(r, kAsk);
  EXPECT_EQ(both.recomputed, last + 2 * (static_cast<int32_t>(both.facts.size()) - 1));
  EXPECT_NE(both.injected->cache_key, p.injected->cache_key);
  EXPECT_FALSE(s.run(both, 8).empty());
  s.service->release(p);
  s.service->release(both);
}

// The same facts asked for under two windows at once (an evaluation grid, or two clients with
// other `w`): both requests are injected; neither falls back to text for a fact the other holds.
TEST(MemoryService, TwoWindowsOfTheSameFactsServeAtOnce) {
  TempDir dir;
  Stack s(dir.path());
  add_alice(*s.store);
  MemoryPrompt w0 = s.service->prepare(req(MemoryMode::kInject, 3, 0), kAsk);
  MemoryPrompt w2 = s.service->prepare(req(MemoryMode::kInject, 3, 2), kAsk);  // w0's pins still held
  EXPECT_TRUE(w0.fallback.empty()) << w0.fallback;
  EXPECT_TRUE(w2.fallback.empty()) << w2.fallback;
  ASSERT_TRUE(w0.injected && w2.injected);
  EXPECT_NE(w0.injected->pool_slots, w2.injected->pool_slots);
  // Both stay resident: asking again encodes nothing.
  s.service->release(w0);
  s.service->release(w2);
  MemoryPrompt again0 = s.service->prepare(req(MemoryMode::kInject, 3, 0), kAsk);
  MemoryPrompt again2 = s.service->prepare(req(MemoryMode::kInject, 3, 2), kAsk);
  EXPECT_EQ(again0.encoded + again2.encoded, 0);
  s.service->release(again0);
  s.service->release(again2);
}

namespace {

// The engine of `s` again, reading facts in place or copying them (EngineOptions::facts_in_place).
void with_fact_reads(Stack& s, bool in_place) {
  s.service.reset();
  EngineOptions eo;
  eo.facts_in_place = in_place;
  BackendOptions bo;
  bo.num_cache_blocks = 512;
  bo.num_pool_blocks = 256;
  s.engine = std::make_unique<Engine>(make_cpu_backend(demo().config, demo().weights, bo), demo().tokenizer, eo);
  s.service = std::make_unique<MemoryService>(*s.store, *s.retriever, demo(), s.engine->backend(), s.engine->blocks(), MemoryOptions{});
  s.engine->set_memory(s.service.get());
}

struct Served {
  std::vector<int32_t> tokens;
  std::vector<double> logprobs;
  int64_t blocks = 0;  // cache blocks the request held after its prefill
};

Served serve_32(Stack& s, const MemoryPrompt& p) {
  SamplingParams sp = greedy(32);
  sp.logprobs = 0;
  s.engine->add_request(p.tokens, sp, p.injected);
  Served out;
  std::vector<RequestOutput> outs = s.engine->step();  // the prefill
  out.blocks = s.engine->blocks().num_blocks() - s.engine->blocks().num_free();
  for (bool done = false; !done;) {
    for (const RequestOutput& o : outs) {
      out.tokens.insert(out.tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
      for (const LogprobEntry& e : o.logprobs) out.logprobs.push_back(e.logprob);
      done = done || o.finished;
    }
    if (!done) outs = s.engine->step();
  }
  return out;
}

}  // namespace

// Zero-copy memory through the engine (CPU backend): a request whose facts are read in place
// from the pool gives the copy path's 32 greedy tokens with its logprobs to 1e-5, and holds fewer
// cache blocks (none for the blocks wholly inside its facts); a request that recomputes fact
// tokens takes the copy path, counted.
TEST(MemoryService, FactsReadInPlaceServeWhatCopiedFactsServe) {
  TempDir dir;
  Stack s(dir.path());
  add_alice(*s.store);
  std::vector<Served> by_path;
  for (const bool in_place : {true, false}) {
    with_fact_reads(s, in_place);
    const MemoryPrompt p = s.service->prepare(req(MemoryMode::kInject, 4, 2), kAsk);
    ASSERT_TRUE(p.injected.has_value());
    by_path.push_back(serve_32(s, p));
    EXPECT_EQ(s.engine->stats().requests_facts_in_place, in_place ? 1 : 0);
    EXPECT_EQ(s.engine->stats().requests_facts_copied, in_place ? 0 : 1);
    EXPECT_EQ(s.engine->stats().tokens_injected, in_place ? 0 : p.injected->end - p.injected->start);
    const int32_t holes = p.injected->end / 16 - (p.injected->start + 15) / 16;
    if (in_place) {
      EXPECT_GT(holes, 0) << "the facts span whole blocks";
      EXPECT_EQ(by_path.size(), 1u);
    } else {
      EXPECT_EQ(by_path[0].blocks, by_path[1].blocks - holes) << "no block for the facts' whole blocks";
    }
    s.service->release(p);
    EXPECT_EQ(s.engine->blocks().num_free(), s.engine->blocks().num_blocks());
  }
  EXPECT_EQ(by_path[0].tokens, by_path[1].tokens);
  ASSERT_EQ(by_path[0].logprobs.size(), 32u);
  ASSERT_EQ(by_path[1].logprobs.size(), 32u);
  for (size_t i = 0; i < 32; ++i) EXPECT_NEAR(by_path[0].logprobs[i], by_path[1].logprobs[i], 1e-5) << i;

  with_fact_reads(s, true);
  const MemoryPrompt r = s.service->prepare(recompute_req(2), kAsk);
  s.run(r, 2);
  EXPECT_EQ(s.engine->stats().requests_facts_copied, 1) << "recomputed fact tokens take the copy path";
  EXPECT_EQ(s.engine->stats().requests_facts_in_place, 0);
  s.service->release(r);
}
