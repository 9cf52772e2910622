// Scoring over HTTP on the demo model: logprobs / top_logprobs (chat and legacy completion shapes,
// streamed and not), echo, prompt_logprobs, return_token_ids, add_generation_prompt and
// continue_final_message, usage details, and the 400s of bad scoring fields. Values are checked
// against the log-softmax of the logits a fresh backend computes for the same tokens.
#include <gtest/gtest.h>

#include <cmath>

#include "forward_test_util.h"
#include "logprobs_test_util.h"
#include "server_http_client.h"
#include "tokenizer/utf8.h"

using namespace inferscale;
using namespace inferscale::test_support;

namespace {

class ServerLogprobs : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { h = new Harness(); }
  static void TearDownTestSuite() {
    delete h;
    h = nullptr;
  }
  static Harness* h;
};
Harness* ServerLogprobs::h = nullptr;

const Tokenizer& tok() { return *TestModel::demo().tokenizer; }

json chat_body(int max_tokens) {
  return {{"model", "demo"},
          {"messages", {{{"role", "system"}, {"content", "be brief"}}, {{"role", "user"}, {"content", "hello there"}}}},
          {"max_tokens", max_tokens},
          {"temperature", 0},
          {"ignore_eos", true}};
}

json completion_body(const json& prompt, int max_tokens) {
  return {{"model", "demo"}, {"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"ignore_eos", true}};
}

json ok_json(const httplib::Result& r) {
  EXPECT_TRUE(r) << "no response";
  if (!r) return json::object();
  EXPECT_EQ(r->status, 200) << r->body;
  return json::parse(r->body);
}

// The events of a streamed request ("[DONE]" last).
std::vector<json> events_of(Harness& h, const std::string& path, json body) {
  body["stream"] = true;
  auto r = h.post(path, body);
  EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no response");
  if (!r) return {};
  return parse_sse(r->body);
}

// The logits a fresh backend gives every position of `tokens` in one forward: [n][V].
std::vector<std::vector<float>> backend_logits(const std::vector<int32_t>& tokens) {
  auto be = TestModel().backend(64);
  const int32_t n = static_cast<int32_t>(tokens.size());
  std::vector<int32_t> all(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) all[static_cast<size_t>(i)] = i;
  return inferscale::testing::run_sequence(*be, tokens, n, n, all);
}

// log_softmax(row)[id], from the reference.
double ref_logprob(const std::vector<float>& row, int32_t id) {
  return inferscale::testing::reference_log_softmax(row.data(), static_cast<int64_t>(row.size()))[static_cast<size_t>(id)];
}

std::string token_string(int32_t id) { return utf8_lossy(tok().token_bytes(id, false)); }

}  // namespace

TEST_F(ServerLogprobs, EchoAndPromptLogprobsEqualTheBackendsLogSoftmax) {
  const std::vector<int32_t> ids = tok().encode("The cat sat on the mat.", EncodeOptions{.add_special = true});
  const size_t n = ids.size();
  json body = completion_body(ids, 3);
  body["echo"] = true;
  body["logprobs"] = 2;
  body["prompt_logprobs"] = 3;
  body["return_token_ids"] = true;
  const json j = ok_json(h->post("/v1/completions", body));
  const json& c = j["choices"][0];
  const auto ref = backend_logits(ids);  // the one forward the engine ran (prompt logprobs skip the cache)
  EXPECT_EQ(c["prompt_token_ids"].get<std::vector<int32_t>>(), ids);
  const std::vector<int32_t> gen = c["token_ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(gen.size(), 3u);

  // vLLM's prompt_logprobs: null, then {id: {logprob, rank, decoded_token}} with the token and the top 3.
  const json& pl = c["prompt_logprobs"];
  ASSERT_EQ(pl.size(), n);
  EXPECT_TRUE(pl[0].is_null());
  for (size_t i = 1; i < n; ++i) {
    const json& d = pl[i];
    const std::string key = std::to_string(ids[i]);
    ASSERT_TRUE(d.contains(key)) << i << ": " << d.dump();
    EXPECT_NEAR(d[key]["logprob"].get<double>(), ref_logprob(ref[i - 1], ids[i]), 1e-12) << i;
    EXPECT_EQ(d[key]["rank"], inferscale::testing::reference_rank(ref[i - 1].data(), static_cast<int64_t>(ref[i - 1].size()), ids[i]));
    EXPECT_EQ(d[key]["decoded_token"], token_string(ids[i]));
    EXPECT_GE(d.size(), 3u);
    EXPECT_LE(d.size(), 4u);
    int ranks = 0;
    for (auto it = d.begin(); it != d.end(); ++it)
      if (it.key() != key || d[key]["rank"].get<int>() <= 3) ranks += it.value()["rank"].get<int>() <= 3;
    EXPECT_EQ(ranks, 3) << d.dump();
  }

  // Legacy logprobs with echo: the prompt's tokens first (the first without a logprob), then the generated ones.
  const json& lp = c["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), n + 3);
  ASSERT_EQ(lp["token_logprobs"].size(), n + 3);
  ASSERT_EQ(lp["top_logprobs"].size(), n + 3);
  ASSERT_EQ(lp["text_offset"].size(), n + 3);
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  for (size_t i = 1; i < n; ++i) {
    EXPECT_EQ(lp["token_logprobs"][i], pl[i][std::to_string(ids[i])]["logprob"]) << i;
    EXPECT_EQ(lp["tokens"][i], token_string(ids[i]));
    const json& top = lp["top_logprobs"][i];
    EXPECT_TRUE(top.size() == 2 || top.size() == 3) << top.dump();  // the top 2 and the token itself
    EXPECT_EQ(top[token_string(ids[i])], lp["token_logprobs"][i]);
  }
  // The first generated token is scored from the prompt's last row, in the same forward.
  EXPECT_NEAR(lp["token_logprobs"][n].get<double>(), ref_logprob(ref[n - 1], gen[0]), 1e-12);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(lp["tokens"][n + i], token_string(gen[i]));
  const std::string prompt_text = tok().decode(ids);
  EXPECT_EQ(c["text"].get<std::string>().substr(0, prompt_text.size()), prompt_text);
  EXPECT_EQ(lp["text_offset"][0], 0);
  EXPECT_EQ(lp["text_offset"][1], 0);  // BOS adds no text
  EXPECT_EQ(lp["text_offset"][n], static_cast<int64_t>(prompt_text.size()));  // ASCII: bytes == characters
  EXPECT_EQ(j["usage"]["prompt_tokens"], n);
  EXPECT_EQ(j["usage"]["completion_tokens"], 3);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 0);

  // max_tokens 0 with echo only scores: the prompt's text and logprobs, nothing generated.
  body["max_tokens"] = 0;
  const json z = ok_json(h->post("/v1/completions", body));
  EXPECT_EQ(z["choices"][0]["text"], prompt_text);
  EXPECT_EQ(z["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(z["choices"][0]["logprobs"]["tokens"].size(), n);
  // One output row fewer (no sampled row) changes the LM-head GEMM's shape: float noise only.
  EXPECT_NEAR(z["choices"][0]["logprobs"]["token_logprobs"][n - 1].get<double>(), lp["token_logprobs"][n - 1].get<double>(), 1e-6);
  EXPECT_TRUE(z["choices"][0]["token_ids"].empty());
  EXPECT_EQ(z["usage"]["completion_tokens"], 0);
}

TEST_F(ServerLogprobs, ChatLogprobsHaveOpenAIsShapeAndStreamAsTheyAre) {
  json body = chat_body(6);
  body["logprobs"] = true;
  body["top_logprobs"] = 3;
  body["return_token_ids"] = true;
  const json j = ok_json(h->post("/v1/chat/completions", body));
  const json& c = j["choices"][0];
  const std::vector<int32_t> prompt_ids = j["prompt_token_ids"].get<std::vector<int32_t>>();
  const std::vector<int32_t> gen = c["token_ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(gen.size(), 6u);
  EXPECT_EQ(static_cast<int64_t>(prompt_ids.size()), j["usage"]["prompt_tokens"].get<int64_t>());
  const json& content = c["logprobs"]["content"];
  ASSERT_EQ(content.size(), 6u);
  // Every generated token's row: the prompt, then the generated tokens before it.
  std::vector<int32_t> seq = prompt_ids;
  seq.insert(seq.end(), gen.begin(), gen.end() - 1);
  const auto ref = backend_logits(seq);
  for (size_t i = 0; i < 6; ++i) {
    const json& e = content[i];
    EXPECT_EQ(e["token"], token_string(gen[i]));
    std::vector<int> bytes;
    for (char ch : tok().token_bytes(gen[i], false)) bytes.push_back(static_cast<unsigned char>(ch));
    EXPECT_EQ(e["bytes"].get<std::vector<int>>(), bytes);
    ASSERT_EQ(e["top_logprobs"].size(), 3u);
    EXPECT_EQ(e["top_logprobs"][0]["token"], e["token"]);  // greedy
    EXPECT_EQ(e["top_logprobs"][0]["logprob"], e["logprob"]);
    for (size_t k = 1; k < 3; ++k) EXPECT_LE(e["top_logprobs"][k]["logprob"], e["top_logprobs"][k - 1]["logprob"]);
    // Decode steps ran other shapes than this one forward: equal up to the CPU backend's float noise.
    EXPECT_NEAR(e["logprob"].get<double>(), ref_logprob(ref[prompt_ids.size() - 1 + i], gen[i]), 1e-5) << i;
  }
  EXPECT_TRUE(c["message"]["content"].is_string());

  // Streamed: prompt_token_ids in the first chunk, each chunk's tokens with their logprobs.
  const std::vector<json> events = events_of(*h, "/v1/chat/completions", body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events[0]["prompt_token_ids"].get<std::vector<int32_t>>(), prompt_ids);
  json streamed = json::array();
  std::vector<int32_t> streamed_ids;
  for (const json& ev : events) {
    if (ev == "[DONE]" || ev["choices"].empty()) continue;
    const json& ch = ev["choices"][0];
    if (ch.contains("token_ids")) for (int32_t t : ch["token_ids"]) streamed_ids.push_back(t);
    if (ch["logprobs"].is_object())
      for (const json& e : ch["logprobs"]["content"]) streamed.push_back(e);
  }
  EXPECT_EQ(streamed_ids, gen);
  ASSERT_EQ(streamed.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(streamed[i]["token"], content[i]["token"]);
    EXPECT_NEAR(streamed[i]["logprob"].get<double>(), content[i]["logprob"].get<double>(), 1e-5);  // prefix-cache hit
  }
}

TEST_F(ServerLogprobs, StreamedEchoCarriesThePromptAndCharacterOffsets) {
  json body = completion_body("h\xc3\xa9llo", 4);  // 'é' is two byte tokens: one character
  body["echo"] = true;
  body["logprobs"] = 1;
  const json whole = ok_json(h->post("/v1/completions", body));
  const json& lp = whole["choices"][0]["logprobs"];
  // BOS, h, 0xC3, 0xA9, l, l, o: offsets count the characters before each token.
  const std::vector<int64_t> want{0, 0, 1, 1, 2, 3, 4};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(lp["text_offset"][i], want[i]) << i;
  EXPECT_EQ(lp["text_offset"][7], 5);
  EXPECT_EQ(whole["choices"][0]["text"].get<std::string>().rfind("h\xc3\xa9llo", 0), 0u);

  const std::vector<json> events = events_of(*h, "/v1/completions", body);
  std::string text;
  json tokens = json::array(), offsets = json::array();
  std::vector<double> values;
  for (const json& ev : events) {
    if (ev == "[DONE]" || ev["choices"].empty()) continue;
    const json& ch = ev["choices"][0];
    text += ch["text"].get<std::string>();
    if (!ch["logprobs"].is_object()) continue;
    for (const json& t : ch["logprobs"]["tokens"]) tokens.push_back(t);
    for (const json& o : ch["logprobs"]["text_offset"]) offsets.push_back(o);
    for (const json& v : ch["logprobs"]["token_logprobs"]) values.push_back(v.is_null() ? NAN : v.get<double>());
  }
  EXPECT_EQ(text, whole["choices"][0]["text"]);
  EXPECT_EQ(tokens, lp["tokens"]);
  EXPECT_EQ(offsets, lp["text_offset"]);
  ASSERT_EQ(values.size(), lp["token_logprobs"].size());
  EXPECT_TRUE(std::isnan(values[0]));
  for (size_t i = 1; i < values.size(); ++i) EXPECT_NEAR(values[i], lp["token_logprobs"][i].get<double>(), 1e-12) << i;
}

TEST_F(ServerLogprobs, ChatTemplateSwitchesAndScoringAnAssistantAnswer) {
  json body = chat_body(1);
  body["return_token_ids"] = true;
  const std::vector<int32_t> with_prompt = ok_json(h->post("/v1/chat/completions", body))["prompt_token_ids"];
  body["add_generation_prompt"] = false;
  const std::vector<int32_t> without = ok_json(h->post("/v1/chat/completions", body))["prompt_token_ids"];
  const std::string a = tok().decode(with_prompt, false), b = tok().decode(without, false);
  EXPECT_EQ(a.rfind(b, 0), 0u) << a << " vs " << b;
  EXPECT_EQ(a.substr(b.size()), "<|im_start|>assistant\n");

  // continue_final_message: the answer stays open (no end of turn), and prompt_logprobs scores it.
  const std::string answer = "Paris is big";
  body["messages"].push_back({{"role", "assistant"}, {"content", answer + "  "}});
  body["continue_final_message"] = true;
  body["max_tokens"] = 0;
  body["prompt_logprobs"] = 1;
  const json j = ok_json(h->post("/v1/chat/completions", body));
  const std::vector<int32_t> ids = j["prompt_token_ids"];
  EXPECT_EQ(tok().decode(ids, false), a + answer);
  const json& pl = j["prompt_logprobs"];  // top-level on chat, as vLLM
  ASSERT_EQ(pl.size(), ids.size());
  double answer_logprob = 0;
  for (size_t i = ids.size() - answer.size(); i < ids.size(); ++i) {
    ASSERT_TRUE(pl[i].is_object()) << i;
    answer_logprob += pl[i][std::to_string(ids[i])]["logprob"].get<double>();
  }
  EXPECT_LT(answer_logprob, 0.0);
  EXPECT_TRUE(std::isfinite(answer_logprob));
  EXPECT_EQ(j["choices"][0]["message"]["content"], "");
  EXPECT_EQ(j["usage"]["completion_tokens"], 0);
}

TEST_F(ServerLogprobs, UsageReportsCachedAndInjectedTokens) {
  json body = chat_body(2);
  body["messages"][1]["content"] = "a prompt long enough to fill two blocks of the prefix cache";
  ok_json(h->post("/v1/chat/completions", body));
  const std::vector<json> events = events_of(*h, "/v1/chat/completions",
                                             [&] { json b = body; b["stream_options"] = {{"include_usage", true}}; return b; }());
  ASSERT_GE(events.size(), 2u);
  const json& usage = events[events.size() - 2]["usage"];
  EXPECT_GE(usage["prompt_tokens_details"]["cached_tokens"].get<int>(), 32) << usage.dump();
  EXPECT_EQ(usage["prompt_tokens_details"]["injected_tokens"], 0);
  body["prompt_logprobs"] = 0;  // scoring the prompt bypasses the prefix cache
  EXPECT_EQ(ok_json(h->post("/v1/chat/completions", body))["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
}

TEST_F(ServerLogprobs, BadScoringFieldsGet400sNamingThem) {
  struct Case {
    const char* path;
    json patch;  // merged into a valid body
    const char* param;
  };
  const char* chat = "/v1/chat/completions";
  const char* cmpl = "/v1/completions";
  const std::vector<Case> cases = {
      {chat, {{"logprobs", true}, {"top_logprobs", 21}}, "top_logprobs"},
      {chat, {{"logprobs", true}, {"top_logprobs", -1}}, "top_logprobs"},
      {chat, {{"top_logprobs", 3}}, "top_logprobs"},  // without logprobs: true
      {chat, {{"logprobs", 1}}, "logprobs"},
      {chat, {{"logprobs", "yes"}}, "logprobs"},
      {chat, {{"prompt_logprobs", 21}}, "prompt_logprobs"},
      {chat, {{"prompt_logprobs", -1}}, "prompt_logprobs"},
      {chat, {{"prompt_logprobs", "all"}}, "prompt_logprobs"},
      {chat, {{"echo", true}}, "echo"},
      {chat, {{"return_token_ids", "yes"}}, "return_token_ids"},
      {chat, {{"add_generation_prompt", 1}}, "add_generation_prompt"},
      {chat, {{"continue_final_message", true}}, "continue_final_message"},  // with add_generation_prompt
      {chat, {{"continue_final_message", true}, {"add_generation_prompt", false}}, "messages"},  // last is the user's
      {chat, {{"max_tokens", 0}}, "max_tokens"},
      {cmpl, {{"logprobs", 21}}, "logprobs"},
      {cmpl, {{"logprobs", -1}}, "logprobs"},
      {cmpl, {{"logprobs", true}}, "logprobs"},
      {cmpl, {{"logprobs", "2"}}, "logprobs"},
      {cmpl, {{"prompt_logprobs", 100}}, "prompt_logprobs"},
      {cmpl, {{"echo", "yes"}}, "echo"},
      {cmpl, {{"max_tokens", 0}}, "max_tokens"},  // 0 needs echo or prompt_logprobs
  };
  for (const Case& tc : cases) {
    json body = std::string(tc.path) == chat ? chat_body(2) : completion_body("abc", 2);
    body.merge_patch(tc.patch);
    auto r = h->post(tc.path, body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << tc.patch.dump() << ": " << r->body;
    const json e = json::parse(r->body)["error"];
    EXPECT_EQ(e["param"], tc.param) << tc.patch.dump() << ": " << e.dump();
    EXPECT_EQ(e["type"], "invalid_request_error");
    EXPECT_FALSE(e["message"].get<std::string>().empty());
  }
}
