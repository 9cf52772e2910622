// The OpenAI-compatible HTTP server end to end: the demo model in a real AsyncEngine + HttpServer
// on a loopback ephemeral port, driven by cpp-httplib's client (and a raw socket for disconnects).
#include <gtest/gtest.h>

#include <chrono>

#include <atomic>
#include <thread>

#include "server_http_client.h"

using namespace inferscale;
using namespace inferscale::test_support;
using namespace std::chrono_literals;

namespace {

class ServerHttp : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server::HttpServerOptions ho;
    ho.max_body_bytes = 64 * 1024;
    h = new Harness({}, ho);
  }
  static void TearDownTestSuite() {
    delete h;
    h = nullptr;
  }
  void TearDown() override { h->backend->delay_ms = 0; }
  static Harness* h;
};
Harness* ServerHttp::h = nullptr;

json chat_body(const std::string& content, int max_tokens = 16) {
  return {{"model", "demo"},
          {"messages", {{{"role", "system"}, {"content", "be brief"}}, {{"role", "user"}, {"content", content}}}},
          {"max_tokens", max_tokens},
          {"temperature", 0},
          {"ignore_eos", true}};
}

json completion_body(const std::string& prompt, int max_tokens = 16) {
  return {{"model", "demo"}, {"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"ignore_eos", true}};
}

json ok_json(const httplib::Result& r) {
  EXPECT_TRUE(r) << "no response";
  if (!r) return {};
  EXPECT_EQ(r->status, 200) << r->body;
  return json::parse(r->body);
}

// The status and the error object of an error response (checks its OpenAI shape).
json error_of(const httplib::Result& r, int status) {
  EXPECT_TRUE(r) << "no response";
  if (!r) return {};
  EXPECT_EQ(r->status, status) << r->body;
  EXPECT_NE(r->get_header_value("Content-Type").find("application/json"), std::string::npos);
  const json j = json::parse(r->body);
  EXPECT_TRUE(j.contains("error")) << r->body;
  const json& e = j["error"];
  EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty());
  EXPECT_TRUE(e["type"].is_string());
  EXPECT_TRUE(e.contains("param") && e.contains("code"));
  return e;
}

// Concatenated stream text (chat deltas or completion texts), checking each chunk's shape.
std::string stream_text(const std::vector<json>& events, bool chat, std::string* finish = nullptr) {
  std::string text;
  for (const json& e : events) {
    if (e == "[DONE]" || e["choices"].empty()) continue;
    const json& c = e["choices"][0];
    EXPECT_EQ(e["object"], chat ? "chat.completion.chunk" : "text_completion");
    EXPECT_EQ(c["index"], 0);
    if (chat && c["delta"].contains("content")) text += c["delta"]["content"].get<std::string>();
    if (!chat) text += c["text"].get<std::string>();
    if (!c["finish_reason"].is_null() && finish) *finish = c["finish_reason"];
  }
  return text;
}

}  // namespace

TEST_F(ServerHttp, HealthAndModels) {
  auto c = h->client();
  auto r = c.Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  const json models = ok_json(c.Get("/v1/models"));
  EXPECT_EQ(models["object"], "list");
  ASSERT_EQ(models["data"].size(), 1u);
  EXPECT_EQ(models["data"][0]["id"], "demo");
  EXPECT_EQ(models["data"][0]["object"], "model");
  EXPECT_EQ(ok_json(c.Get("/v1/models/demo"))["id"], "demo");
  EXPECT_EQ(error_of(c.Get("/v1/models/nope"), 404)["code"], "model_not_found");
}

TEST_F(ServerHttp, ChatCompletion) {
  const json j = ok_json(h->post("/v1/chat/completions", chat_body("hello there", 12)));
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_TRUE(j["created"].is_number_integer());
  EXPECT_EQ(j["model"], "demo");
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_TRUE(j["choices"][0]["message"]["content"].is_string());
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], 12);
  EXPECT_GT(j["usage"]["prompt_tokens"].get<int>(), 10);
  EXPECT_EQ(j["usage"]["total_tokens"], j["usage"]["prompt_tokens"].get<int>() + 12);
  // Greedy is deterministic.
  EXPECT_EQ(ok_json(h->post("/v1/chat/completions", chat_body("hello there", 12)))["choices"][0]["message"]["content"],
            j["choices"][0]["message"]["content"]);
}

TEST_F(ServerHttp, TextCompletionFromTextAndTokenIds) {
  const json a = ok_json(h->post("/v1/completions", completion_body("Once upon a time", 10)));
  EXPECT_EQ(a["object"], "text_completion");
  EXPECT_EQ(a["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  EXPECT_TRUE(a["choices"][0]["text"].is_string());
  EXPECT_EQ(a["usage"]["prompt_tokens"], 17);  // BOS + 16 bytes
  // The same prompt as token ids (BOS + bytes) gives the same text.
  std::vector<int> ids{ByteTokenizer::kBos};
  for (unsigned char ch : std::string("Once upon a time")) ids.push_back(ch);
  json body = completion_body("", 10);
  body["prompt"] = ids;
  EXPECT_EQ(ok_json(h->post("/v1/completions", body))["choices"][0]["text"], a["choices"][0]["text"]);
  body["prompt"] = json::array({ids});  // a batch of one
  EXPECT_EQ(ok_json(h->post("/v1/completions", body))["choices"][0]["text"], a["choices"][0]["text"]);
}

TEST_F(ServerHttp, StreamingChatEqualsNonStreamed) {
  const json plain = ok_json(h->post("/v1/chat/completions", chat_body("stream me", 20)));
  json body = chat_body("stream me", 20);
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  auto r = h->post("/v1/chat/completions", body);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  EXPECT_NE(r->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
  const std::vector<json> events = parse_sse(r->body);
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_EQ(events[0]["choices"][0]["delta"]["role"], "assistant");
  std::string finish;
  EXPECT_EQ(stream_text(events, true, &finish), plain["choices"][0]["message"]["content"]);
  EXPECT_EQ(finish, "length");
  const json& usage_chunk = events[events.size() - 2];
  EXPECT_TRUE(usage_chunk["choices"].empty());
  // Token counts match; cached_tokens may differ (the second request hits the prefix cache).
  EXPECT_EQ(usage_chunk["usage"]["prompt_tokens"], plain["usage"]["prompt_tokens"]);
  EXPECT_EQ(usage_chunk["usage"]["completion_tokens"], plain["usage"]["completion_tokens"]);
  EXPECT_EQ(usage_chunk["usage"]["total_tokens"], plain["usage"]["total_tokens"]);
  for (size_t i = 0; i + 2 < events.size(); ++i) EXPECT_TRUE(events[i]["usage"].is_null());
  const std::string id = events[0]["id"];
  for (size_t i = 0; i + 1 < events.size(); ++i) EXPECT_EQ(events[i]["id"], id);
}

TEST_F(ServerHttp, StreamingCompletionWithSeedEqualsNonStreamed) {
  json body = completion_body("The weather today", 24);
  body["temperature"] = 0.9;
  body["top_p"] = 0.95;
  body["top_k"] = 50;
  body["seed"] = 1234;
  const json plain = ok_json(h->post("/v1/completions", body));
  EXPECT_EQ(ok_json(h->post("/v1/completions", body))["choices"][0]["text"], plain["choices"][0]["text"]);
  body["stream"] = true;
  auto r = h->post("/v1/completions", body);
  ASSERT_TRUE(r);
  const std::vector<json> events = parse_sse(r->body);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back(), "[DONE]");
  std::string finish;
  EXPECT_EQ(stream_text(events, false, &finish), plain["choices"][0]["text"]);
  EXPECT_EQ(finish, "length");
  for (const json& e : events)
    if (e != "[DONE]") EXPECT_FALSE(e.contains("usage"));  // no include_usage: no usage key
}

TEST_F(ServerHttp, StopStringEndsTheOutputBeforeIt) {
  const std::string text = ok_json(h->post("/v1/completions", completion_body("abc", 40)))["choices"][0]["text"];
  // Pick an ASCII character from the middle of the greedy output as the stop string.
  size_t at = std::string::npos;
  for (size_t i = 5; i < text.size(); ++i)
    if (text[i] >= 0x20 && text[i] < 0x7f) {
      at = i;
      break;
    }
  if (at == std::string::npos) GTEST_SKIP() << "no ASCII character in the output";
  const std::string stop(1, text[at]);
  for (bool stream : {false, true}) {
    json body = completion_body("abc", 40);
    body["stop"] = json::array({"\x01\x02 never", stop});
    body["stream"] = stream;
    auto r = h->post("/v1/completions", body);
    ASSERT_TRUE(r);
    std::string got, finish;
    if (stream) {
      got = stream_text(parse_sse(r->body), false, &finish);
    } else {
      const json j = json::parse(r->body);
      got = j["choices"][0]["text"];
      finish = j["choices"][0]["finish_reason"];
    }
    EXPECT_EQ(got, text.substr(0, text.find(stop))) << "stream=" << stream;
    EXPECT_EQ(finish, "stop");
  }
}

TEST_F(ServerHttp, EightConcurrentClientsGetTheirGreedyAnswers) {
  std::vector<std::string> alone;
  for (int i = 0; i < 8; ++i)
    alone.push_back(ok_json(h->post("/v1/chat/completions", chat_body("client " + std::to_string(i), 24)))["choices"][0]["message"]["content"]);
  std::vector<std::string> together(8);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&, i] {
      json body = chat_body("client " + std::to_string(i), 24);
      body["stream"] = (i % 2 == 1);  // half of them stream
      auto r = h->post("/v1/chat/completions", body);
      if (!r || r->status != 200) return;
      together[static_cast<size_t>(i)] =
          body["stream"] ? stream_text(parse_sse(r->body), true) : json::parse(r->body)["choices"][0]["message"]["content"].get<std::string>();
    });
  for (auto& t : threads) t.join();
  for (int i = 0; i < 8; ++i) EXPECT_EQ(together[static_cast<size_t>(i)], alone[static_cast<size_t>(i)]) << "client " << i;
}

TEST_F(ServerHttp, BadRequestsGetOpenAIErrors) {
  auto c = h->client();
  auto raw = [&](const std::string& path, const std::string& body) { return c.Post(path.c_str(), body, "application/json"); };
  EXPECT_EQ(error_of(raw("/v1/chat/completions", "{not json"), 400)["code"], "invalid_json");
  EXPECT_EQ(error_of(raw("/v1/chat/completions", "[1, 2]"), 400)["type"], "invalid_request_error");
  EXPECT_EQ(error_of(raw("/v1/chat/completions", ""), 400)["code"], "invalid_json");
  // Nesting is bounded before parsing (kMaxJsonDepth): 10,000 '[' in a field answer 400 at once.
  const json deep = error_of(raw("/v1/chat/completions", "{\"x\": " + std::string(10000, '[') + std::string(10000, ']') + "}"), 400);
  EXPECT_EQ(deep["code"], "invalid_json");
  EXPECT_NE(deep["message"].get<std::string>().find("64 deep"), std::string::npos) << deep;

  struct Case {
    const char* name;
    json patch;        // merged into a valid chat body (null values remove the key)
    const char* param;
  };
  const std::vector<Case> cases = {
      {"missing model", {{"model", nullptr}}, "model"},
      {"missing messages", {{"messages", nullptr}}, "messages"},
      {"empty messages", {{"messages", json::array()}}, "messages"},
      {"message not an object", {{"messages", {"hi"}}}, "messages[0]"},
      {"bad role", {{"messages", {{{"role", "wizard"}, {"content", "x"}}}}}, "messages[0].role"},
      {"content missing", {{"messages", {{{"role", "user"}}}}}, "messages[0].content"},
      {"content wrong type", {{"messages", {{{"role", "user"}, {"content", 5}}}}}, "messages[0].content"},
      {"temperature wrong type", {{"temperature", "hot"}}, "temperature"},
      {"temperature too high", {{"temperature", 7}}, "temperature"},
      {"top_p zero", {{"top_p", 0}}, "top_p"},
      {"top_k fractional", {{"top_k", 2.5}}, "top_k"},
      {"max_tokens zero", {{"max_tokens", 0}}, "max_tokens"},
      {"max_tokens wrong type", {{"max_tokens", "ten"}}, "max_tokens"},
      {"max_completion_tokens negative", {{"max_completion_tokens", -3}}, "max_completion_tokens"},
      {"n = 2", {{"n", 2}}, "n"},
      {"stop wrong type", {{"stop", 3}}, "stop"},
      {"stop empty string", {{"stop", {""}}}, "stop"},
      {"stream wrong type", {{"stream", "yes"}}, "stream"},
      {"stream_options without stream", {{"stream_options", {{"include_usage", true}}}}, "stream_options"},
      {"seed wrong type", {{"seed", "x"}}, "seed"},
      {"logprobs wrong type", {{"logprobs", 5}}, "logprobs"},
      {"top_logprobs over 20", {{"logprobs", true}, {"top_logprobs", 21}}, "top_logprobs"},
      {"echo on chat", {{"echo", true}}, "echo"},
      {"penalty", {{"presence_penalty", 0.5}}, "presence_penalty"},
      {"tools", {{"tools", {{{"type", "function"}}}}}, "tools"},
      {"max_tokens past the context", {{"max_tokens", 100000}}, "max_tokens"},
      {"memory not enabled", {{"memory", {{"user", "alice"}, {"k", 5}}}}, "memory"},
      {"memory wrong type", {{"memory", "alice"}}, "memory"},
      {"memory without user", {{"memory", {{"k", 5}}}}, "memory.user"},
      {"memory k out of range", {{"memory", {{"user", "a"}, {"k", -1}}}}, "memory.k"},
      {"memory bad mode", {{"memory", {{"user", "a"}, {"mode", "telepathy"}}}}, "memory.mode"},
      {"memory unknown key", {{"memory", {{"user", "a"}, {"kk", 1}}}}, "memory.kk"},
      {"memory bad order", {{"memory", {{"user", "a"}, {"order", "random"}}}}, "memory.order"},
  };
  for (const Case& tc : cases) {
    json body = chat_body("hi");
    body.merge_patch(tc.patch);
    const json e = error_of(h->post("/v1/chat/completions", body), 400);
    EXPECT_EQ(e["param"], tc.param) << tc.name << ": " << e.dump();
    EXPECT_EQ(e["type"], "invalid_request_error") << tc.name;
  }
  json body = chat_body("hi");
  body["memory"] = {{"user", "alice"}, {"k", 5}, {"w", 2}, {"mode", "inject"}, {"order", "rank"}};
  EXPECT_EQ(error_of(h->post("/v1/chat/completions", body), 400)["message"], "memory is not enabled on this server");
  body["memory"]["mode"] = "off";  // no memory asked for: plain serving
  ok_json(h->post("/v1/chat/completions", body));

  // Completions.
  EXPECT_EQ(error_of(h->post("/v1/completions", {{"model", "demo"}}), 400)["param"], "prompt");
  json ids = completion_body("x");
  ids["prompt"] = {1, -2};
  EXPECT_EQ(error_of(h->post("/v1/completions", ids), 400)["param"], "prompt");
  ids["prompt"] = {1, 99999};
  EXPECT_EQ(error_of(h->post("/v1/completions", ids), 400)["param"], "prompt");
  ids["prompt"] = {"a", "b"};
  EXPECT_EQ(error_of(h->post("/v1/completions", ids), 400)["param"], "prompt");
  json lp = completion_body("x");
  lp["logprobs"] = true;  // legacy logprobs is a count
  EXPECT_EQ(error_of(h->post("/v1/completions", lp), 400)["param"], "logprobs");

  // Prompt too long: this test server's KV cache holds 64 blocks of 16 tokens.
  const json e = error_of(h->post("/v1/completions", completion_body(std::string(1100, 'a'), 4)), 400);
  EXPECT_EQ(e["code"], "context_length_exceeded");
}

TEST_F(ServerHttp, NotFoundMethodAndSizeErrors) {
  auto c = h->client();
  json body = chat_body("hi");
  body["model"] = "gpt-17";
  const json e = error_of(h->post("/v1/chat/completions", body), 404);
  EXPECT_EQ(e["code"], "model_not_found");
  EXPECT_EQ(e["param"], "model");
  EXPECT_EQ(error_of(c.Get("/v1/nothing/here"), 404)["code"], "unknown_route");
  EXPECT_EQ(error_of(c.Post("/v2/chat", "{}", "application/json"), 404)["code"], "unknown_route");
  EXPECT_EQ(error_of(c.Get("/v1/chat/completions"), 405)["code"], "method_not_allowed");
  EXPECT_EQ(error_of(c.Post("/metrics", "{}", "application/json"), 405)["code"], "method_not_allowed");
  // Over the 64 KiB limit of this test server.
  json big = chat_body(std::string(100 * 1024, 'x'));
  EXPECT_EQ(error_of(h->post("/v1/chat/completions", big), 413)["code"], "payload_too_large");
  // The server still serves after all of that.
  ok_json(h->post("/v1/chat/completions", chat_body("still alive", 4)));
}

TEST_F(ServerHttp, EngineFailureBecomesA500AndTheServerRecovers) {
  std::vector<int> ids{ByteTokenizer::kBos, 'a', Harness::kPoison, 'b'};
  json body = completion_body("", 4);
  body["prompt"] = ids;
  const json e = error_of(h->post("/v1/completions", body), 500);
  EXPECT_EQ(e["type"], "server_error");
  // Streaming: once the response has started (acceptance is seen well before the slow failing
  // step ends), the error arrives as an SSE event.
  body["stream"] = true;
  h->backend->delay_ms = 200;
  auto r = h->post("/v1/completions", body);
  h->backend->delay_ms = 0;
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  const std::vector<json> events = parse_sse(r->body);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events[events.size() - 2]["error"]["type"], "server_error");
  EXPECT_EQ(events.back(), "[DONE]");  // the stream still ends the way clients wait for
  ok_json(h->post("/v1/completions", completion_body("fine again", 4)));
  EXPECT_TRUE(h->wait_stats([](const server::AsyncEngineStats& s) { return s.kv_blocks_free == s.kv_blocks_total; }));
}

TEST_F(ServerHttp, ClientDisconnectCancelsTheRequest) {
  h->backend->delay_ms = 5;  // ~2.5 s for the whole generation: the cancel must come long before
  auto cancelled = [] {
    auto m = parse_prometheus(h->client().Get("/metrics")->body);
    return m["inferscale_requests_total{endpoint=\"completion\",finish_reason=\"cancelled\"}"];
  };
  const double before = cancelled();
  for (bool stream : {true, false}) {
    json body = completion_body("go on and on", 480);
    body["stream"] = stream;
    RawConnection conn(h->port);
    conn.send_post("/v1/completions", body.dump());
    if (stream) {
      const std::string got = conn.read_until("data: {");  // the first chunk arrived
      ASSERT_NE(got.find("200 OK"), std::string::npos) << got;
    } else {
      ASSERT_TRUE(h->wait_stats([](const server::AsyncEngineStats& s) { return s.num_running == 1; }));
    }
    ASSERT_LT(h->engine->stats().kv_blocks_free, h->engine->stats().kv_blocks_total);
    conn.close();
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_TRUE(h->wait_stats([](const server::AsyncEngineStats& s) {
      return s.num_pending == 0 && s.kv_blocks_free == s.kv_blocks_total;
    })) << "stream=" << stream;
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s) << "stream=" << stream;
  }
  // The logger thread records the cancelled outcome right after the engine frees the blocks.
  for (int i = 0; i < 200 && cancelled() < before + 2; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(cancelled(), before + 2);
}

TEST_F(ServerHttp, MetricsParse) {
  ok_json(h->post("/v1/chat/completions", chat_body("metrics please", 3)));
  // The request's counters are recorded as its handler returns, which may be just after the client
  // has its answer: read until they are there (a few ms at most).
  auto r = h->client().Get("/metrics");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (r && !parse_prometheus(r->body).count("inferscale_requests_total{endpoint=\"chat\",finish_reason=\"length\"}") &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    r = h->client().Get("/metrics");
  }
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->get_header_value("Content-Type").find("text/plain"), std::string::npos);
  const auto m = parse_prometheus(r->body);
  EXPECT_GE(m.at("inferscale_requests_total{endpoint=\"chat\",finish_reason=\"length\"}"), 1);
  EXPECT_GE(m.at("inferscale_prompt_tokens_total"), 10);
  EXPECT_GE(m.at("inferscale_generation_tokens_total"), 3);
  EXPECT_GE(m.at("inferscale_time_to_first_token_seconds_count"), 1);
  EXPECT_EQ(m.at("inferscale_time_to_first_token_seconds_bucket{le=\"+Inf\"}"), m.at("inferscale_time_to_first_token_seconds_count"));
  EXPECT_EQ(m.at("inferscale_kv_blocks_used") + m.at("inferscale_kv_blocks_free"), 64);
  EXPECT_TRUE(m.count("inferscale_prefix_cache_hit_tokens_total"));
  // Forwards by kind: the chat's prompt was a prefill, its tokens after it decodes; they add up.
  EXPECT_GE(m.at("inferscale_engine_forwards_total{kind=\"prefill\"}"), 1);
  EXPECT_GE(m.at("inferscale_engine_forwards_total{kind=\"decode\"}"), 1);
  EXPECT_EQ(m.at("inferscale_engine_forwards_total{kind=\"prefill\"}") + m.at("inferscale_engine_forwards_total{kind=\"decode\"}") +
                m.at("inferscale_engine_forwards_total{kind=\"mixed\"}"),
            m.at("inferscale_engine_steps_total"));
  EXPECT_GT(m.at("inferscale_engine_forward_seconds_total{kind=\"decode\"}"), 0.0);
  // The engine thread's host time around those forwards, by phase: every step that ran a forward
  // scheduled, launched and handled its outputs.
  for (const char* phase : {"before", "launch", "after"})
    EXPECT_GT(m.at(std::string("inferscale_engine_host_seconds_total{phase=\"") + phase + "\"}"), 0.0) << phase;
  EXPECT_GE(m.at("inferscale_http_responses_total{code=\"200\"}"), 1);
}

TEST(ServerHttpOverload, FullQueueAnswers429WithRetryAfter) {
  server::AsyncEngineOptions eo;
  eo.max_pending = 1;
  Harness h(eo);
  h.backend->delay_ms = 5;
  RawConnection busy(h.port);
  busy.send_post("/v1/completions", completion_body("long one", 480).dump());
  ASSERT_TRUE(h.wait_stats([](const server::AsyncEngineStats& s) { return s.num_pending == 1; }));
  auto r = h.post("/v1/completions", completion_body("one more", 4));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429);
  EXPECT_EQ(r->get_header_value("Retry-After"), "1");
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "overloaded");
  busy.close();
  ASSERT_TRUE(h.wait_stats([](const server::AsyncEngineStats& s) { return s.num_pending == 0; }));
  h.backend->delay_ms = 0;
  EXPECT_EQ(h.post("/v1/completions", completion_body("one more", 4))->status, 200);
}

// Issue 11, defect 5: the shutdown answer says when to come back too.
TEST(ServerHttpOverload, ShuttingDownAnswers503WithRetryAfter) {
  Harness h;
  h.engine->shutdown();  // the HTTP server still answers while the process stops
  auto r = h.post("/v1/completions", completion_body("after the end", 4));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(r->get_header_value("Retry-After"), "5");
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "shutting_down");
  // /health says so too, so a load balancer takes the replica out while it drains.
  auto health = h.client().Get("/health");
  EXPECT_EQ(health->status, 503);
  EXPECT_EQ(health->get_header_value("Retry-After"), "5");
  EXPECT_EQ(json::parse(health->body)["status"], "shutting_down");
}

// Four clients that each send their next request once they have the last answer never exceed
// --max-pending 4, so none of them may be refused.
TEST(ServerHttpOverload, SequentialClientsWithinTheLimitAreNeverRefused) {
  server::AsyncEngineOptions eo;
  eo.max_pending = 4;
  Harness h(eo);
  std::atomic<int> refused{0}, served{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c)
    clients.emplace_back([&, c] {
      for (int i = 0; i < 15; ++i) {
        auto r = h.post("/v1/completions", completion_body("client " + std::to_string(c), 1));
        if (r && r->status == 200) ++served;
        else ++refused;
      }
    });
  for (auto& t : clients) t.join();
  EXPECT_EQ(refused.load(), 0);
  EXPECT_EQ(served.load(), 60);
}
