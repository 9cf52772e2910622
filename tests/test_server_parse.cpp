// Request parsing into native structs, prompt limits and the error mapping (no HTTP, no model).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "server/api_request.h"
#include "server/prompt_builder.h"
#include "util/check.h"
#include "util/json_depth.h"

using namespace inferscale;
using namespace inferscale::server;
using nlohmann::json;

namespace {

json chat(json extra = json::object()) {
  json j = {{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  j.merge_patch(extra);
  return j;
}

ApiError error_of(auto&& f) {
  try {
    f();
  } catch (...) {
    return api_error_from(std::current_exception());
  }
  ADD_FAILURE() << "no error";
  return ApiError(0, "", "");
}

}  // namespace

TEST(ServerParse, ChatFieldsBecomeSamplingParams) {
  const GenerateRequest r = parse_chat_request(chat({{"max_tokens", 5},
                                                     {"max_completion_tokens", 7},
                                                     {"temperature", 0.5},
                                                     {"top_p", 0.9},
                                                     {"top_k", -1},
                                                     {"seed", -1},
                                                     {"stop", "END"},
                                                     {"stream", true},
                                                     {"stream_options", {{"include_usage", true}}},
                                                     {"n", 1},
                                                     {"presence_penalty", 0},
                                                     {"user", "someone"},
                                                     {"unknown_extension", {1, 2}}}));
  EXPECT_EQ(r.kind, ApiKind::kChat);
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.sampling.max_tokens, 7);  // max_completion_tokens wins
  EXPECT_TRUE(r.max_tokens_given);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_EQ(r.sampling.top_k, 0);  // -1 = off
  ASSERT_TRUE(r.sampling.seed);
  EXPECT_EQ(*r.sampling.seed, ~uint64_t{0});
  EXPECT_EQ(r.sampling.stop, std::vector<std::string>{"END"});
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_FALSE(r.memory);
}

// The served model's default sampling fills what a body leaves out; what it sets wins, even
// OpenAI's own default value (temperature 1).
TEST(ServerParse, AbsentSamplingFieldsTakeTheModelsDefaults) {
  const SamplingDefaults d{0.2f, 40, 0.9f, 0.05f, "test"};
  const GenerateRequest none = parse_chat_request(chat(), d);
  EXPECT_FLOAT_EQ(none.sampling.temperature, 0.2f);
  EXPECT_EQ(none.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(none.sampling.top_p, 0.9f);
  EXPECT_FLOAT_EQ(none.sampling.min_p, 0.05f);
  const GenerateRequest own = parse_completion_request(
      json{{"model", "m"}, {"prompt", "x"}, {"temperature", 1.0}, {"top_k", 0}, {"top_p", 1.0}, {"min_p", 0.0}}, d);
  EXPECT_FLOAT_EQ(own.sampling.temperature, 1.0f);
  EXPECT_EQ(own.sampling.top_k, 0);
  EXPECT_FLOAT_EQ(own.sampling.top_p, 1.0f);
  EXPECT_FLOAT_EQ(own.sampling.min_p, 0.0f);
  // Without defaults: OpenAI's (temperature 1, nothing else).
  const GenerateRequest openai = parse_chat_request(chat());
  EXPECT_FLOAT_EQ(openai.sampling.temperature, 1.0f);
  EXPECT_FLOAT_EQ(openai.sampling.min_p, 0.0f);
  EXPECT_FLOAT_EQ(parse_chat_request(chat({{"min_p", 0.1}})).sampling.min_p, 0.1f);
  EXPECT_EQ(error_of([] { parse_chat_request(chat({{"min_p", 1.5}})); }).param, "min_p");
  EXPECT_EQ(error_of([] { parse_chat_request(chat({{"min_p", "x"}})); }).param, "min_p");
}

// memory.store: true or "user" stores the user's message, "all" the reply too; memory.name.
TEST(ServerParse, MemoryStoreAndName) {
  auto spec = [](json mem) { return *parse_chat_request(chat({{"memory", mem}})).memory; };
  EXPECT_EQ(spec({{"user", "a"}}).store, MemorySpec::Store::kNone);
  EXPECT_EQ(spec({{"user", "a"}, {"store", true}}).store, MemorySpec::Store::kUser);
  EXPECT_EQ(spec({{"user", "a"}, {"store", "user"}}).store, MemorySpec::Store::kUser);
  EXPECT_EQ(spec({{"user", "a"}, {"store", "all"}}).store, MemorySpec::Store::kAll);
  EXPECT_EQ(spec({{"user", "a"}, {"store", false}}).store, MemorySpec::Store::kNone);
  EXPECT_EQ(spec({{"user", "a"}, {"store", "none"}}).store, MemorySpec::Store::kNone);
  EXPECT_EQ(error_of([] { parse_chat_request(chat({{"memory", {{"user", "a"}, {"store", 1}}}})); }).param, "memory.store");
  EXPECT_EQ(spec({{"user", "a"}, {"name", "Alice Smith"}}).name, "Alice Smith");
  EXPECT_EQ(spec({{"user", "a"}}).name, "");
  EXPECT_EQ(error_of([] { parse_chat_request(chat({{"memory", {{"user", "a"}, {"name", ""}}}})); }).param, "memory.name");
}

TEST(ServerParse, MessagesAndContentParts) {
  const GenerateRequest r = parse_chat_request(chat(
      {{"messages",
        {{{"role", "developer"}, {"content", "sys"}},
         {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}}}},
         {{"role", "assistant"}, {"content", "c"}, {"name", "bot"}}}}}));
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[1].content, "ab");
  EXPECT_EQ(r.messages[2].role, "assistant");
  EXPECT_FALSE(r.max_tokens_given);
  const ApiError e = error_of([] {
    parse_chat_request(chat({{"messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}}}}));
  });
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.code, "unsupported");
}

TEST(ServerParse, MemorySpec) {
  const GenerateRequest d = parse_chat_request(chat({{"memory", {{"user", "alice"}}}}));
  ASSERT_TRUE(d.memory);
  EXPECT_EQ(d.memory->user, "alice");
  EXPECT_EQ(d.memory->k, -1);  // the server's default
  EXPECT_EQ(d.memory->window, -1);
  EXPECT_EQ(d.memory->tenant, "");
  EXPECT_EQ(d.memory->mode, MemoryMode::kInject);
  EXPECT_EQ(d.memory->order, MemoryOrder::kRank);
  const GenerateRequest r =
      parse_chat_request(chat({{"memory", {{"user", "bob"}, {"k", 50}, {"w", 20}, {"mode", "text"}, {"order", "time"}}}}));
  EXPECT_EQ(r.memory->k, 50);
  EXPECT_EQ(r.memory->window, 20);
  EXPECT_EQ(r.memory->mode, MemoryMode::kText);
  EXPECT_EQ(r.memory->order, MemoryOrder::kTime);
  const GenerateRequest q =
      parse_chat_request(chat({{"memory", {{"user", "c"}, {"tenant", "acme"}, {"query", "cats"}}}}));
  EXPECT_EQ(q.memory->tenant, "acme");
  EXPECT_EQ(q.memory->query, "cats");
  EXPECT_EQ(error_of([] { parse_chat_request(chat({{"memory", {{"user", "a"}, {"tenant", ""}}}})); }).param, "memory.tenant");
  EXPECT_EQ(error_of([] { parse_chat_request(chat({{"memory", {{"user", "a"}, {"k", 100000}}}})); }).param, "memory.k");
  EXPECT_EQ(error_of([] { parse_chat_request(chat({{"memory", {{"user", std::string(300, 'u')}}}})); }).param, "memory.user");
  EXPECT_EQ(error_of([] { parse_chat_request(chat({{"memory", {{"user", "a"}, {"w", "two"}}}})); }).param, "memory.w");

  // A client query vector instead of text.
  const GenerateRequest v = parse_chat_request(chat({{"memory", {{"user", "a"}, {"query_vector", {0.5, -1, 2}}}}}));
  EXPECT_EQ(v.memory->query_vector, (std::vector<float>{0.5f, -1.0f, 2.0f}));
  EXPECT_TRUE(v.memory->query.empty());
  for (const json& bad : {json("x"), json::array(), json{1, "2"}, json{1e39}, json::array({json::array({1})}),
                          json(std::vector<int>(MemorySpec::kMaxVectorDim + 1, 1))}) {
    EXPECT_EQ(error_of([&] { parse_chat_request(chat({{"memory", {{"user", "a"}, {"query_vector", bad}}}})); }).param,
              "memory.query_vector")
        << bad.dump().substr(0, 40);
  }
  EXPECT_EQ(error_of([] {
              parse_chat_request(chat({{"memory", {{"user", "a"}, {"query", "q"}, {"query_vector", {1}}}}}));
            }).param,
            "memory.query_vector");
}

// Issue 11, defect 7: the memory object's names follow the same rule as the REST routes' (one
// check): 1 to 256 bytes, no control characters.
TEST(ServerParse, MemoryNamesFollowTheRestRoutesRule) {
  for (const std::string bad : {std::string("al\x01ice"), std::string("tab\there"), std::string("new\nline"), std::string(257, 'u')}) {
    const ApiError user = error_of([&] { parse_chat_request(chat({{"memory", {{"user", bad}}}})); });
    EXPECT_EQ(user.status, 400);
    EXPECT_EQ(user.param, "memory.user");
    EXPECT_EQ(user.code, "invalid_name");
    const ApiError tenant = error_of([&] { parse_chat_request(chat({{"memory", {{"user", "a"}, {"tenant", bad}}}})); });
    EXPECT_EQ(tenant.param, "memory.tenant");
    EXPECT_EQ(tenant.code, "invalid_name");
  }
  EXPECT_EQ(parse_chat_request(chat({{"memory", {{"user", std::string(256, 'u')}}}})).memory->user.size(), 256u);
  EXPECT_EQ(parse_chat_request(chat({{"memory", {{"user", "Zoë O'Brien/42"}}}})).memory->user, "Zoë O'Brien/42");
}

TEST(ServerParse, CompletionPrompts) {
  const GenerateRequest t = parse_completion_request({{"model", "m"}, {"prompt", "hello"}});
  EXPECT_EQ(t.prompt_text, "hello");
  EXPECT_FALSE(t.prompt_ids);
  const GenerateRequest ids = parse_completion_request({{"model", "m"}, {"prompt", {1, 2, 3}}});
  EXPECT_EQ(*ids.prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(parse_completion_request({{"model", "m"}, {"prompt", {"x"}}}).prompt_text, "x");
  EXPECT_EQ(error_of([] { parse_completion_request({{"model", "m"}, {"prompt", ""}}); }).param, "prompt");
  EXPECT_EQ(error_of([] { parse_completion_request({{"model", "m"}, {"prompt", {{1}, {2}}}}); }).param, "prompt");
  EXPECT_EQ(error_of([] { parse_completion_request({{"model", "m"}, {"prompt", "x"}, {"best_of", 3}}); }).code, "unsupported");
}

TEST(ServerParse, FitToContext) {
  GenerateRequest r = parse_completion_request({{"model", "m"}, {"prompt", "x"}});
  PreparedPrompt p;
  p.ids.assign(100, 1);
  fit_to_context(r, static_cast<int64_t>(p.ids.size()), PromptLimits{512, 1024});
  EXPECT_EQ(r.sampling.max_tokens, 412);  // the rest of the window
  fit_to_context(r, static_cast<int64_t>(p.ids.size()), PromptLimits{512, 256});
  EXPECT_EQ(r.sampling.max_tokens, 156);  // the KV cache is the tighter bound
  r.max_tokens_given = true;
  r.sampling.max_tokens = 157;
  EXPECT_EQ(error_of([&] { fit_to_context(r, static_cast<int64_t>(p.ids.size()), PromptLimits{512, 256}); }).code, "context_length_exceeded");
  p.ids.assign(512, 1);
  EXPECT_EQ(error_of([&] { fit_to_context(r, static_cast<int64_t>(p.ids.size()), PromptLimits{512, 1024}); }).param, "prompt");
}

TEST(ServerParse, ErrorKindsMapToStatuses) {
  auto status_of = [](ErrorKind k) { return api_error_from(std::make_exception_ptr(Error(k, "x"))).status; };
  EXPECT_EQ(status_of(ErrorKind::kInvalidInput), 400);
  EXPECT_EQ(status_of(ErrorKind::kUnsupported), 400);
  EXPECT_EQ(status_of(ErrorKind::kNotFound), 404);
  EXPECT_EQ(status_of(ErrorKind::kResource), 503);
  EXPECT_EQ(status_of(ErrorKind::kInternal), 500);
  EXPECT_EQ(api_error_from(std::make_exception_ptr(std::runtime_error("boom"))).status, 500);
  EXPECT_EQ(api_error_from(std::make_exception_ptr(42)).status, 500);
  const json body = json::parse(bad_request("bad \xff byte", "p").body());  // invalid UTF-8 never throws
  EXPECT_EQ(body["error"]["param"], "p");
  EXPECT_TRUE(body["error"]["code"].is_null());
  EXPECT_THROW(parse_json_body("{"), ApiError);
  EXPECT_THROW(parse_json_body("3"), ApiError);
}

// Scoring fields: what the client asked for (GenerateRequest) and what the engine computes for it.
TEST(ServerParse, ScoringFieldsBecomeLogprobCounts) {
  GenerateRequest r = parse_chat_request(chat({{"logprobs", true}, {"top_logprobs", 4}, {"prompt_logprobs", 2}}));
  EXPECT_EQ(r.logprobs, 4);
  EXPECT_EQ(r.prompt_logprobs, 2);
  EXPECT_EQ(r.sampling.logprobs, 4);
  EXPECT_EQ(r.sampling.prompt_logprobs, 2);
  EXPECT_TRUE(r.chat_render.add_generation_prompt);
  EXPECT_FALSE(r.chat_render.continue_final_message);
  r = parse_chat_request(chat({{"logprobs", true}}));  // top_logprobs defaults to 0: the token's own logprob
  EXPECT_EQ(r.sampling.logprobs, 0);
  EXPECT_EQ(r.sampling.prompt_logprobs, -1);
  r = parse_chat_request(chat({{"logprobs", false}, {"top_logprobs", 0}}));
  EXPECT_EQ(r.sampling.logprobs, -1);

  json c = {{"model", "m"}, {"prompt", "abc"}, {"logprobs", 3}, {"echo", true}};
  r = parse_completion_request(c);
  EXPECT_EQ(r.logprobs, 3);
  EXPECT_TRUE(r.echo);
  EXPECT_EQ(r.prompt_logprobs, -1);         // not asked for...
  EXPECT_EQ(r.sampling.prompt_logprobs, 3);  // ...but echo with logprobs scores the prompt
  c["max_tokens"] = 0;
  c.erase("logprobs");
  r = parse_completion_request(c);
  EXPECT_EQ(r.sampling.max_tokens, 0);
  EXPECT_EQ(r.sampling.prompt_logprobs, 0);  // scoring only: the engine's max_tokens 0 request
  EXPECT_EQ(r.sampling.logprobs, -1);

  json m = chat({{"add_generation_prompt", false}, {"continue_final_message", true}});
  m["messages"].push_back({{"role", "assistant"}, {"content", "Paris"}});
  r = parse_chat_request(m);
  EXPECT_FALSE(r.chat_render.add_generation_prompt);
  EXPECT_TRUE(r.chat_render.continue_final_message);

  EXPECT_EQ(error_of([&] { parse_chat_request(chat({{"max_completion_tokens", 0}})); }).param, "max_completion_tokens");
  EXPECT_EQ(error_of([&] { parse_chat_request(chat({{"logprobs", true}, {"top_logprobs", 2.5}})); }).param, "top_logprobs");
  EXPECT_EQ(error_of([&] { parse_completion_request({{"model", "m"}, {"prompt", "a"}, {"prompt_logprobs", 1.5}}); }).param,
            "prompt_logprobs");
}

// A chat holds at most kMaxChatMessages messages: the limit itself passes, one more is a 400 naming
// `messages`.
TEST(ServerParse, ChatMessagesAreBounded) {
  const nlohmann::json one = {{"role", "user"}, {"content", "hi"}};
  nlohmann::json body = {{"model", "m"}, {"messages", nlohmann::json::array()}};
  for (size_t i = 0; i < kMaxChatMessages; ++i) body["messages"].push_back(one);
  EXPECT_EQ(parse_chat_request(body).messages.size(), kMaxChatMessages);
  body["messages"].push_back(one);
  const ApiError e = error_of([&] { parse_chat_request(body); });
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "messages");
  EXPECT_NE(std::string(e.what()).find("at most 4096"), std::string::npos) << e.what();
}

// Nesting is counted by a scan before any parse: brackets in strings (escaped quotes included)
// are text; text deeper than the limit is refused whatever follows; the limit itself passes.
TEST(ServerParse, JsonNestingIsBoundedBeforeParsing) {
  EXPECT_FALSE(json_deeper_than(R"({"a": [[["]]]]]]]]"]]]})", 4));
  EXPECT_TRUE(json_deeper_than(R"({"a": [[["]]]]]]]]"]]]})", 3));
  EXPECT_FALSE(json_deeper_than(R"({"a": "\"[[[[[[", "b": [1]})", 2));
  EXPECT_TRUE(json_deeper_than(R"({"a": [[[1]]]})", 3));
  EXPECT_TRUE(json_deeper_than(std::string(65, '['), 64));  // not JSON at all: still too deep
  EXPECT_FALSE(json_deeper_than(std::string(64, '[') + std::string(64, ']'), 64));
  const std::string at_limit = std::string(63, '[') + "1" + std::string(63, ']');
  EXPECT_NO_THROW(parse_json_body("{\"x\": " + at_limit + "}"));
  const ApiError e = error_of([&] { parse_json_body("{\"x\": [" + at_limit + "]}"); });
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.code, "invalid_json");
}
