// Conversation write-back (memory.store, server/memory_writeback.h) end to end: a chat's exchange
// becomes two turns of the user's memory before the answer's end is sent, a later chat retrieves
// them (their KV encoded then, not when they were written), and requests that cannot store are
// 400s that write nothing.
#include <gtest/gtest.h>

#include "memory/store/timestamp.h"
#include "memory_server.h"

using namespace inferscale;
using namespace inferscale::test_support;

namespace {

class WriteBackTest : public MemoryServerTest {};

std::vector<int64_t> ids_of(const json& stored) { return stored.get<std::vector<int64_t>>(); }

}  // namespace

TEST_F(WriteBackTest, TwoTurnsThenAThirdRetrievesAFactFromTheFirst) {
  const Api a = api("wb");
  // Turn 1, not streamed, "store": "all": the answer says what it stored (the message and the
  // reply), and it is in the store once the answer is here.
  const json r1 = Api::ok(a.post("/v1/chat/completions", chat("My dog is called Rex.", {{"user", "ann"}, {"store", "all"}, {"k", 0}})));
  const std::vector<int64_t> first = ids_of(r1["memory"]["stored"]);
  ASSERT_EQ(first.size(), 2u);
  const std::vector<Fact> after1 = s->store->list("wb", "ann");
  ASSERT_EQ(after1.size(), 2u);
  EXPECT_EQ(after1[0].id, first[0]);
  EXPECT_EQ(after1[0].text, "My dog is called Rex.");
  EXPECT_EQ(after1[0].source.speaker, "user");
  EXPECT_EQ(after1[1].text, r1["choices"][0]["message"]["content"]);
  EXPECT_EQ(after1[1].source.speaker, "assistant");
  for (const Fact& f : after1) {
    EXPECT_EQ(f.source.conversation, "chat");
    ASSERT_TRUE(f.timestamp_epoch.has_value()) << f.timestamp;  // the time it was said, ISO 8601
    EXPECT_NEAR(static_cast<double>(*f.timestamp_epoch), static_cast<double>(f.created_at_ms / 1000), 2.0);
  }
  EXPECT_EQ(after1[0].turn_index, 0);
  EXPECT_EQ(after1[1].turn_index, 1);

  // Turn 2, streamed, "store": true: only the user's message is stored, and the finish chunk
  // carries its id.
  // k 0: nothing retrieved, so nothing encoded before turn 3.
  json body2 = chat("I live in Bergen and work as a carpenter.", {{"user", "ann"}, {"store", true}, {"k", 0}});
  body2["stream"] = true;
  const auto r2 = a.post("/v1/chat/completions", body2);
  ASSERT_TRUE(r2);
  ASSERT_EQ(r2->status, 200) << r2->body;
  const std::vector<json> events = parse_sse(r2->body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  const json& finish = events[events.size() - 2];
  EXPECT_EQ(finish["choices"][0]["finish_reason"], "length");
  const std::vector<int64_t> second = ids_of(finish["memory"]["stored"]);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_GT(second[0], first[1]);
  EXPECT_EQ(s->store->get("wb", "ann", second[0]).text, "I live in Bergen and work as a carpenter.");
  EXPECT_EQ(s->store->get("wb", "ann", second[0]).source.speaker, "user");
  EXPECT_EQ(s->store->get("wb", "ann", second[0]).turn_index, 2);

  // Turn 3 retrieves the first turn's fact; its KV is encoded now, at its first retrieval.
  const json r3 = Api::ok(a.post("/v1/chat/completions", chat("What is my dog called?", {{"user", "ann"}, {"k", 1}})));
  ASSERT_EQ(r3["memory"]["facts"].size(), 1u);
  EXPECT_EQ(r3["memory"]["facts"][0]["id"], first[0]);
  EXPECT_EQ(r3["memory"]["facts"][0]["text"], "My dog is called Rex.");
  EXPECT_EQ(r3["memory"]["encoded"], 1);
  EXPECT_GT(r3["memory"]["injected_tokens"].get<int>(), 0);
  EXPECT_FALSE(r3["memory"].contains("stored"));  // no store asked: nothing written
  EXPECT_EQ(s->store->count("wb", "ann"), 3u);
}

// The turns are durable before the final chunk: when the client reads the finish chunk, the store
// already holds them (and the finish chunk is what names them).
TEST_F(WriteBackTest, TheWriteIsDoneBeforeTheFinishChunkIsSent) {
  json body = chat("Remember that my car is green.", {{"user", "stream-1"}, {"store", "all"}, {"conversation", "garage"}}, 16);
  body["stream"] = true;
  const std::string text = body.dump();
  RawConnection conn(s->port);
  conn.send_raw("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-InferScale-Tenant: wb\r\n"
                "Content-Type: application/json\r\nContent-Length: " + std::to_string(text.size()) + "\r\n\r\n" + text);
  const std::string upto_finish = conn.read_until("\"finish_reason\":\"length\"");
  ASSERT_NE(upto_finish.find("\"finish_reason\":\"length\""), std::string::npos) << upto_finish;
  EXPECT_EQ(s->store->count("wb", "stream-1"), 2u);  // already stored when the finish chunk arrives
  const std::string rest = conn.read_until("[DONE]");
  EXPECT_NE((upto_finish + rest).find("\"stored\""), std::string::npos);
  const std::vector<Fact> facts = s->store->list("wb", "stream-1");
  ASSERT_EQ(facts.size(), 2u);
  EXPECT_EQ(facts[0].source.conversation, "garage");
  EXPECT_EQ(facts[0].text, "Remember that my car is green.");
}

// Requests whose exchange cannot be written are 400s naming memory.store, and store nothing.
TEST_F(WriteBackTest, RequestsThatCannotStoreAreRefusedAndWriteNothing) {
  const Api a = api("wb-bad");
  auto refused = [&](json body, const std::string& param) {
    const json e = Api::fails(a.post(body.contains("prompt") ? "/v1/completions" : "/v1/chat/completions", body), 400);
    EXPECT_EQ(e["param"], param) << body.dump();
    EXPECT_FALSE(e["message"].get<std::string>().empty());
  };
  refused(chat("hi", {{"user", "bad"}, {"store", true}, {"mode", "off"}}), "memory.store");
  refused(chat("hi", {{"user", "bad"}, {"conversation", "c"}}), "memory.conversation");
  refused(chat("hi", {{"user", "bad"}, {"store", "yes"}}), "memory.store");
  refused(json{{"model", "demo"}, {"prompt", "hi"}, {"max_tokens", 4}, {"memory", {{"user", "bad"}, {"store", true}}}},
          "memory.store");
  json scoring = chat("hi", {{"user", "bad"}, {"store", true}});
  scoring["max_tokens"] = 0;
  scoring["prompt_logprobs"] = 0;
  refused(scoring, "memory.store");
  json cont = chat("hi", {{"user", "bad"}, {"store", true}});
  cont["messages"].push_back({{"role", "assistant"}, {"content", "Hel"}});
  cont["add_generation_prompt"] = false;
  cont["continue_final_message"] = true;
  refused(cont, "memory.store");
  json system_only = chat("hi", {{"user", "bad"}, {"store", true}});
  system_only["messages"] = json::array({{{"role", "system"}, {"content", "be brief"}}});
  refused(system_only, "memory.store");
  EXPECT_EQ(s->store->count("wb-bad", "bad"), 0u);
}

// Mem0's names in the memory object: user_id for user, top_k for k; one name per field.
TEST_F(WriteBackTest, TheMemoryObjectTakesMemZerosNames) {
  const Api a = api("wb-names");
  a.add("mo", {"Mo keeps bees on the roof", "Mo drives a red van"});
  const json r = Api::ok(a.post("/v1/chat/completions", chat("Where are the bees?", {{"user_id", "mo"}, {"top_k", 1}})));
  ASSERT_EQ(r["memory"]["facts"].size(), 1u);
  EXPECT_EQ(r["memory"]["facts"][0]["text"], "Mo keeps bees on the roof");
  EXPECT_EQ(Api::fails(a.post("/v1/chat/completions", chat("x", {{"user", "mo"}, {"user_id", "mo"}})), 400)["param"],
            "memory.user_id");
  EXPECT_EQ(Api::fails(a.post("/v1/chat/completions", chat("x", {{"user_id", "mo"}, {"k", 1}, {"top_k", 2}})), 400)["param"],
            "memory.top_k");
  EXPECT_EQ(Api::fails(a.post("/v1/chat/completions", chat("x", {{"user_id", "mo"}, {"top_k", 257}})), 400)["param"],
            "memory.top_k");
  EXPECT_EQ(Api::fails(a.post("/v1/chat/completions", chat("x", {{"user_id", ""}})), 400)["param"], "memory.user_id");
}
