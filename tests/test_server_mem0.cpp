// The Mem0-compatible routes (server/mem0_handler.h) over plain HTTP: Mem0's self-hosted server
// (add, list, get, update, delete, history, search, delete all) and the platform API's own shapes
// (ping, paged get-all), the entity mapping (agent_id / run_id inside a user), one store under
// both APIs and the generation requests' memory object, tenants, and every bad input as a 4xx
// with a JSON error that also carries Mem0's "detail".
#include <gtest/gtest.h>

#include <regex>

#include "memory/store/timestamp.h"
#include "memory_server.h"

using namespace inferscale;
using namespace inferscale::test_support;

namespace {

class Mem0Routes : public MemoryServerTest {};

// A Mem0 error: the server's OpenAI-style error and Mem0's "detail" (what the mem0ai client shows).
json mem0_fails(const httplib::Result& r, int status) {
  const json e = Api::fails(r, status);
  if (r) {
    const json body = json::parse(r->body);
    EXPECT_TRUE(body.contains("detail") && body["detail"].is_string()) << r->body;
    if (body.contains("detail")) EXPECT_EQ(body["detail"], e["message"]);
  }
  return e;
}

json results(const httplib::Result& r) { return Api::ok(r)["results"]; }

std::vector<std::string> memories(const json& results) {
  std::vector<std::string> out;
  for (const json& m : results) out.push_back(m["memory"]);
  return out;
}

bool iso_micros(const json& v) {
  static const std::regex re(R"(^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}\+00:00$)");
  return v.is_string() && std::regex_match(v.get<std::string>(), re);
}

const json kTalk = json::array({{{"role", "system"}, {"content", "You are a travel agent."}},
                                {{"role", "user"}, {"content", "I moved to Austin last month"}},
                                {{"role", "assistant"}, {"content", "Nice! How do you like Texas?"}}});

using Strings = std::vector<std::string>;

}  // namespace

TEST_F(Mem0Routes, SelfHostedServerRoundTrip) {
  const Api a = api("m0");
  const json added = results(
      a.post("/memories", json{{"messages", kTalk}, {"user_id", "alice"}, {"metadata", {{"source", "onboarding"}}}, {"infer", true}}));
  ASSERT_EQ(added.size(), 2u);  // the system message is not a memory
  const json& first = added[0];
  EXPECT_TRUE(first["id"].is_string());
  EXPECT_EQ(first["memory"], "I moved to Austin last month");
  EXPECT_EQ(first["event"], "ADD");
  EXPECT_EQ(first["user_id"], "alice");
  EXPECT_TRUE(first["agent_id"].is_null());
  EXPECT_TRUE(first["run_id"].is_null());
  EXPECT_EQ(first["role"], "user");
  EXPECT_EQ(added[1]["role"], "assistant");
  EXPECT_EQ(first["metadata"], (json{{"source", "onboarding"}}));
  EXPECT_TRUE(iso_micros(first["created_at"])) << first["created_at"];
  EXPECT_EQ(first["created_at"], first["updated_at"]);
  const std::string id = first["id"];

  // The same facts under InferScale's own API: turns of the user's "chat" conversation.
  const json facts = Api::data(a.get("/v1/memory/users/alice/facts"));
  ASSERT_EQ(facts.size(), 2u);
  EXPECT_EQ(std::to_string(facts[0]["id"].get<int64_t>()), id);
  EXPECT_EQ(facts[0]["source"]["conversation"], "chat");
  EXPECT_EQ(facts[0]["speaker"], "user");
  EXPECT_EQ(facts[0]["turn_index"], 0);
  EXPECT_EQ(facts[1]["turn_index"], 1);
  EXPECT_TRUE(parse_timestamp(facts[0]["date"].get<std::string>()).has_value());

  EXPECT_EQ(memories(results(a.get("/memories?user_id=alice"))), (Strings{"I moved to Austin last month", "Nice! How do you like Texas?"}));
  EXPECT_EQ(results(a.get("/memories?user_id=alice&limit=1")).size(), 1u);
  const json one = Api::ok(a.get("/memories/" + id));
  EXPECT_EQ(one["memory"], "I moved to Austin last month");
  EXPECT_EQ(one["user_id"], "alice");

  const json hits = results(a.post("/search", json{{"query", "Where did I move? Austin"}, {"user_id", "alice"}, {"top_k", 1}}));
  ASSERT_EQ(hits.size(), 1u);
  EXPECT_EQ(hits[0]["id"], id);
  EXPECT_GT(hits[0]["score"].get<double>(), 0.0);
  EXPECT_EQ(results(a.post("/search", json{{"query", "Austin Texas"}, {"filters", {{"user_id", "alice"}}}, {"limit", 5}})).size(), 2u);
  EXPECT_TRUE(results(a.post("/search", json{{"query", "Austin"}, {"user_id", "alice"}, {"threshold", 1e9}})).empty());

  const json updated = Api::ok(a.put("/memories/" + id, json{{"text", "I moved to Denver last month"}}));
  EXPECT_EQ(updated["memory"], "I moved to Denver last month");
  EXPECT_EQ(updated["event"], "UPDATE");
  EXPECT_EQ(updated["metadata"], (json{{"source", "onboarding"}}));  // untouched by a text update
  EXPECT_EQ(updated["role"], "user");
  const json meta = Api::ok(a.put("/memories/" + id, json{{"metadata", {{"mood", "happy"}, {"role", "forged"}}}}));
  EXPECT_EQ(meta["metadata"], (json{{"mood", "happy"}}));
  EXPECT_EQ(meta["role"], "user");  // Mem0's entity keys do not change after the add
  EXPECT_EQ(Api::ok(a.put("/memories/" + id, json{{"data", "I moved to Boulder"}}))["memory"], "I moved to Boulder");

  ASSERT_EQ(Api::ok(a.del("/memories/" + id))["message"], "Memory deleted successfully!");
  const json gone = mem0_fails(a.get("/memories/" + id), 404);
  EXPECT_EQ(gone["code"], "memory_not_found");
  EXPECT_NE(gone["message"].get<std::string>().find("was deleted"), std::string::npos);

  const json h = Api::ok(a.get("/memories/" + id + "/history"));
  ASSERT_EQ(h.size(), 5u);
  const Strings events = {h[0]["event"], h[1]["event"], h[2]["event"], h[3]["event"], h[4]["event"]};
  EXPECT_EQ(events, (Strings{"ADD", "UPDATE", "UPDATE", "UPDATE", "DELETE"}));
  EXPECT_TRUE(h[0]["old_memory"].is_null());
  EXPECT_EQ(h[0]["new_memory"], "I moved to Austin last month");
  EXPECT_EQ(h[1]["old_memory"], "I moved to Austin last month");
  EXPECT_EQ(h[1]["new_memory"], "I moved to Denver last month");
  EXPECT_EQ(h[4]["old_memory"], "I moved to Boulder");
  EXPECT_TRUE(h[4]["new_memory"].is_null());
  EXPECT_TRUE(h[4]["is_deleted"].get<bool>());
  for (const json& e : h) {
    EXPECT_EQ(e["memory_id"], id);
    EXPECT_EQ(e["user_id"], "alice");
    EXPECT_TRUE(iso_micros(e["created_at"]));
  }

  EXPECT_EQ(Api::ok(a.del("/memories?user_id=alice"))["deleted"], 1);
  EXPECT_TRUE(results(a.get("/memories?user_id=alice")).empty());
  EXPECT_EQ(Api::ok(a.del("/memories?user_id=alice"))["deleted"], 0);
}

// agent_id and run_id narrow a user's memories; without a user_id they name their own.
TEST_F(Mem0Routes, AgentsAndRunsNarrowTheUsersMemories) {
  const Api a = api("m0-entities");
  a.post("/memories", json{{"messages", "I prefer window seats"}, {"user_id", "bo"}, {"agent_id", "travel"}, {"run_id", "r1"}});
  a.post("/memories", json{{"messages", "I am allergic to peanuts"}, {"user_id", "bo"}, {"agent_id", "food"},
                           {"metadata", {{"topic", "health"}}}});
  const json agent_own = results(a.post("/memories", json{{"messages", {{{"role", "user"}, {"content", "Book trains first"}, {"name", "ops"}}}},
                                                         {"agent_id", "travel"}}));
  ASSERT_EQ(agent_own.size(), 1u);
  EXPECT_TRUE(agent_own[0]["user_id"].is_null());
  EXPECT_EQ(agent_own[0]["agent_id"], "travel");
  EXPECT_EQ(agent_own[0]["actor_id"], "ops");

  EXPECT_EQ(memories(results(a.get("/memories?user_id=bo"))), (Strings{"I prefer window seats", "I am allergic to peanuts"}));
  EXPECT_EQ(memories(results(a.get("/memories?user_id=bo&agent_id=travel"))), (Strings{"I prefer window seats"}));
  EXPECT_EQ(memories(results(a.get("/memories?user_id=bo&run_id=r1"))), (Strings{"I prefer window seats"}));
  EXPECT_TRUE(results(a.get("/memories?user_id=bo&run_id=r2")).empty());
  EXPECT_EQ(memories(results(a.get("/memories?agent_id=travel"))), (Strings{"Book trains first"}));
  const json r1 = results(a.get("/memories?user_id=bo&run_id=r1"));
  EXPECT_EQ(r1[0]["agent_id"], "travel");
  EXPECT_EQ(r1[0]["run_id"], "r1");
  EXPECT_TRUE(r1[0]["metadata"].is_null());

  const json filtered = results(a.post("/search", json{{"query", "window seats peanuts"},
                                                       {"filters", {{"AND", {{{"user_id", "bo"}}, {{"agent_id", "food"}}}}}}}));
  EXPECT_EQ(memories(filtered), (Strings{"I am allergic to peanuts"}));
  EXPECT_EQ(memories(results(a.post("/search", json{{"query", "peanuts seats"}, {"filters", {{"user_id", "bo"}, {"topic", "health"}}}}))),
            (Strings{"I am allergic to peanuts"}));
  EXPECT_EQ(results(a.post("/search", json{{"query", "peanuts seats"}, {"filters", {{"user_id", "bo"}, {"topic", "*"}}}})).size(), 1u);

  // One store: the generation request's memory object reads what the Mem0 add wrote.
  const json chat_r = Api::ok(a.post("/v1/chat/completions", chat("Which seats do I like? window", {{"user_id", "bo"}, {"top_k", 1}})));
  ASSERT_EQ(chat_r["memory"]["facts"].size(), 1u);
  EXPECT_EQ(chat_r["memory"]["facts"][0]["text"], "I prefer window seats");
  const json agent_chat = Api::ok(a.post("/v1/chat/completions", chat("trains", {{"user_id", "agent:travel"}, {"top_k", 1}})));
  EXPECT_EQ(agent_chat["memory"]["facts"][0]["text"], "Book trains first");

  EXPECT_EQ(Api::ok(a.del("/memories?user_id=bo&agent_id=travel"))["deleted"], 1);
  EXPECT_EQ(memories(results(a.get("/memories?user_id=bo"))), (Strings{"I am allergic to peanuts"}));
  EXPECT_EQ(memories(results(a.get("/memories?agent_id=travel"))), (Strings{"Book trains first"}));
}

// The platform API's own shapes (the MemoryClient paths, trailing '/'): ping, paged get-all.
TEST_F(Mem0Routes, PlatformPingAndPagedGetAll) {
  const Api a = api("m0-platform");
  const json ping = Api::ok(a.get("/v1/ping/"));
  EXPECT_EQ(ping["status"], "ok");
  EXPECT_EQ(ping["project_id"], "m0-platform");
  EXPECT_FALSE(ping["org_id"].get<std::string>().empty());
  const json added = results(a.post("/v3/memories/add/", json{{"messages", kTalk}, {"user_id", "cy"}}));
  ASSERT_EQ(added.size(), 2u);
  EXPECT_EQ(results(a.post("/v1/memories/", json{{"messages", "Third note"}, {"filters", {{"user_id", "cy"}}}})).size(), 1u);

  const json p1 = Api::ok(a.post("/v3/memories/?page=1&page_size=2", json{{"filters", {{"user_id", "cy"}}}}));
  EXPECT_EQ(p1["count"], 3);
  EXPECT_EQ(memories(p1["results"]), (Strings{"I moved to Austin last month", "Nice! How do you like Texas?"}));
  EXPECT_TRUE(p1["previous"].is_null());
  ASSERT_TRUE(p1["next"].is_string());
  const json p2 = Api::ok(a.post(p1["next"].get<std::string>(), json{{"filters", {{"user_id", "cy"}}}}));
  EXPECT_EQ(memories(p2["results"]), (Strings{"Third note"}));
  EXPECT_TRUE(p2["next"].is_null());
  EXPECT_TRUE(p2["previous"].is_string());
  EXPECT_EQ(Api::ok(a.post("/v2/memories/", json{{"filters", {{"user_id", "cy"}}}, {"page_size", 1}}))["results"].size(), 1u);

  const json hits = results(a.post("/v3/memories/search/", json{{"query", "Texas"}, {"filters", {{"user_id", "cy"}}}, {"top_k", 3}}));
  ASSERT_FALSE(hits.empty());
  EXPECT_EQ(hits[0]["memory"], "Nice! How do you like Texas?");
  const std::string id = added[0]["id"];
  EXPECT_EQ(Api::ok(a.put("/v1/memories/" + id + "/", json{{"text", "I moved to Reno"}}))["memory"], "I moved to Reno");
  EXPECT_EQ(Api::ok(a.get("/v1/memories/" + id + "/"))["memory"], "I moved to Reno");
  EXPECT_EQ(Api::ok(a.get("/v1/memories/" + id + "/history/")).size(), 2u);
  EXPECT_EQ(Api::ok(a.del("/v1/memories/" + id + "/"))["id"], id);
  EXPECT_EQ(Api::ok(a.del("/v1/memories/?user_id=cy"))["deleted"], 2);
  EXPECT_EQ(Api::ok(a.post("/v3/memories/", json{{"filters", {{"user_id", "cy"}}}}))["count"], 0);
}

// Every bad input: a 4xx with a JSON error (and "detail"), and nothing written.
TEST_F(Mem0Routes, BadInputGetsA4xxAndChangesNothing) {
  const Api a = api("m0-bad");
  const json kept = results(a.post("/memories", json{{"messages", "keep me"}, {"user_id", "dee"}}));
  const std::string id = kept.at(0)["id"];
  auto text = [](const json& e, const char* key) { return e.contains(key) && e[key].is_string() ? e[key].get<std::string>() : "<none>"; };
  auto code = [&](const json& e) { return text(e, "code"); };
  auto param = [&](const json& e) { return text(e, "param"); };

  // No entity id anywhere.
  for (const auto& [path, body] : std::vector<std::pair<std::string, json>>{
           {"/memories", json{{"messages", "x"}}},
           {"/v3/memories/add/", json{{"messages", "x"}, {"metadata", {{"user_id", "dee"}}}}},
           {"/search", json{{"query", "x"}}},
           {"/v3/memories/search/", json{{"query", "x"}, {"filters", json::object()}}},
           {"/v3/memories/", json::object()}})
    EXPECT_EQ(code(mem0_fails(a.post(path, body), 400)), "missing_entity") << path;
  EXPECT_EQ(code(mem0_fails(a.get("/memories"), 400)), "missing_entity");
  EXPECT_EQ(code(mem0_fails(a.del("/memories"), 400)), "missing_entity");
  EXPECT_EQ(code(mem0_fails(a.del("/v1/memories/"), 400)), "missing_entity");

  // top_k (and its older name limit) 0 or over the limit.
  for (const char* key : {"top_k", "limit"})
    for (int v : {0, 257, -1})
      EXPECT_EQ(param(mem0_fails(a.post("/search", json{{"query", "x"}, {"user_id", "dee"}, {key, v}}), 400)), key) << key << v;
  EXPECT_EQ(param(mem0_fails(a.post("/search", json{{"query", "x"}, {"user_id", "dee"}, {"top_k", 3}, {"limit", 4}}), 400)), "limit");
  EXPECT_EQ(param(mem0_fails(a.get("/memories?user_id=dee&limit=0"), 400)), "limit");
  EXPECT_EQ(param(mem0_fails(a.post("/v3/memories/?page=0", json{{"filters", {{"user_id", "dee"}}}}), 400)), "page");

  // An update (or read, delete, history) of a deleted memory.
  const std::string doomed = results(a.post("/memories", json{{"messages", "doomed"}, {"user_id", "dee"}})).at(0)["id"];
  Api::ok(a.del("/memories/" + doomed));
  for (const auto& r : {a.put("/memories/" + doomed, json{{"text", "revived"}}), a.put("/v1/memories/" + doomed + "/", json{{"text", "x"}}),
                        a.del("/memories/" + doomed), a.get("/v1/memories/" + doomed + "/")})
    EXPECT_EQ(code(mem0_fails(r, 404)), "memory_not_found");
  EXPECT_EQ(code(mem0_fails(a.get("/memories/999999/history"), 404)), "memory_not_found");
  EXPECT_EQ(Api::ok(a.get("/memories/" + doomed + "/history")).size(), 2u);  // ADD, DELETE: the update left nothing

  // Bodies and fields.
  EXPECT_EQ(code(mem0_fails(a.post("/memories", std::string("{not json")), 400)), "invalid_json");
  EXPECT_EQ(param(mem0_fails(a.post("/memories", json{{"user_id", "dee"}}), 400)), "messages");
  EXPECT_EQ(param(mem0_fails(a.post("/memories", json{{"user_id", "dee"}, {"messages", json::array()}}), 400)), "messages");
  EXPECT_EQ(param(mem0_fails(a.post("/memories", json{{"user_id", "dee"}, {"messages", {{{"role", "user"}}}}}), 400)),
            "messages[0].content");
  EXPECT_EQ(code(mem0_fails(a.post("/memories", json{{"user_id", "dee"},
                                                     {"messages", {{{"role", "user"}, {"content", {{"type", "image_url"}}}}}}}),
                            400)),
            "unsupported");
  EXPECT_EQ(param(mem0_fails(a.post("/memories", json{{"messages", "x"}, {"user_id", "dee"}, {"metadata", "tag"}}), 400)), "metadata");
  EXPECT_EQ(param(mem0_fails(a.post("/memories", json{{"messages", "x"}, {"user_id", "dee"}, {"infer", "yes"}}), 400)), "infer");
  EXPECT_EQ(param(mem0_fails(a.post("/memories", json{{"messages", "x"}, {"user_id", 7}}), 400)), "user_id");
  EXPECT_EQ(param(mem0_fails(a.post("/memories", json{{"messages", "x"}, {"user_id", ""}}), 400)), "user_id");
  EXPECT_EQ(param(mem0_fails(a.post("/memories", json{{"messages", "x"}, {"user_id", "dee"}, {"filters", {{"user_id", "eve"}}}}), 400)),
            "filters.user_id");
  for (const char* key : {"expiration_date", "memory_type", "app_id"})
    EXPECT_EQ(code(mem0_fails(a.post("/memories", json{{"messages", "x"}, {"user_id", "dee"}, {key, "v"}}), 400)), "unsupported") << key;
  EXPECT_EQ(code(mem0_fails(a.post("/search", json{{"query", "x"}, {"filters", {{"OR", {{{"user_id", "dee"}}}}}}}), 400)), "unsupported");
  EXPECT_EQ(code(mem0_fails(a.post("/search", json{{"query", "x"}, {"filters", {{"user_id", {{"in", {"dee"}}}}}}}), 400)), "unsupported");
  EXPECT_EQ(code(mem0_fails(a.post("/search", json{{"query", "x"}, {"filters", {{"user_id", "dee"}, {"topic", {{"ne", "a"}}}}}}), 400)),
            "unsupported");
  for (const char* key : {"categories", "start_date", "end_date"}) {
    EXPECT_EQ(code(mem0_fails(a.post("/search", json{{"query", "x"}, {"user_id", "dee"}, {key, "2024-01-01"}}), 400)), "unsupported") << key;
    EXPECT_EQ(code(mem0_fails(a.post("/v3/memories/", json{{"filters", {{"user_id", "dee"}}}, {key, "2024-01-01"}}), 400)), "unsupported") << key;
  }
  EXPECT_EQ(param(mem0_fails(a.post("/search", json{{"user_id", "dee"}}), 400)), "query");
  EXPECT_EQ(param(mem0_fails(a.post("/search", json{{"query", "  "}, {"user_id", "dee"}}), 400)), "query");
  EXPECT_EQ(param(mem0_fails(a.put("/memories/" + id, json::object()), 400)), "text");
  EXPECT_EQ(param(mem0_fails(a.put("/memories/" + id, json{{"metadata", 3}}), 400)), "metadata");
  EXPECT_EQ(code(mem0_fails(a.put("/memories/" + id, json{{"text", "x"}, {"timestamp", 5}}), 400)), "unsupported");
  EXPECT_EQ(code(mem0_fails(a.get("/memories/abc"), 400)), "invalid_id");
  EXPECT_EQ(code(mem0_fails(a.get("/memories/-3"), 400)), "invalid_id");
  EXPECT_EQ(code(mem0_fails(a.patch("/memories/" + id, json::object()), 405)), "method_not_allowed");
  EXPECT_EQ(code(mem0_fails(a.get("/v1/memories/" + id + "/extra/"), 404)), "unknown_route");
  EXPECT_EQ(code(mem0_fails(a.post("/memories", json{{"messages", std::string(FactStore::kMaxTextBytes + 1, 'a')}, {"user_id", "dee"}}), 413)),
            "fact_too_large");

  // Nothing changed.
  EXPECT_EQ(memories(results(a.get("/memories?user_id=dee"))), (Strings{"keep me"}));
  EXPECT_EQ(Api::ok(a.get("/memories/" + id + "/history")).size(), 1u);
  EXPECT_EQ(s->store->count("m0-bad", "eve"), 0u);
}

// A memory id names a fact of the request's tenant only: another tenant gets 404 and no data.
TEST_F(Mem0Routes, TenantsAreIsolated) {
  const Api a = api("m0-a"), b = api("m0-b");
  // Ids count per tenant: b's first memory is "1", so a's is taken past it.
  a.post("/memories", json{{"messages", "first of tenant a"}, {"user_id", "u0"}});
  const std::string id = results(a.post("/memories", json{{"messages", "secret of tenant a"}, {"user_id", "u"}})).at(0)["id"];
  b.post("/memories", json{{"messages", "b's own note"}, {"user_id", "other"}});
  for (const auto& r : {b.get("/memories/" + id), b.get("/memories/" + id + "/history"), b.put("/memories/" + id, json{{"text", "x"}}),
                        b.del("/memories/" + id)})
    EXPECT_EQ(mem0_fails(r, 404)["code"], "memory_not_found");
  EXPECT_EQ(Api::ok(b.get("/memories/1"))["memory"], "b's own note");  // the same id names each tenant's own
  EXPECT_EQ(Api::ok(a.get("/memories/1"))["memory"], "first of tenant a");
  EXPECT_TRUE(results(b.get("/memories?user_id=u")).empty());
  EXPECT_TRUE(results(b.post("/search", json{{"query", "secret tenant"}, {"user_id", "u"}})).empty());
  EXPECT_EQ(Api::ok(b.del("/memories?user_id=u"))["deleted"], 0);
  EXPECT_EQ(Api::ok(a.get("/memories/" + id))["memory"], "secret of tenant a");
  EXPECT_EQ(Api::ok(a.get("/memories/" + id + "/history")).size(), 1u);
}

TEST(Mem0RoutesDisabled, EveryRouteSaysMemoryIsNotEnabled) {
  Harness h;
  httplib::Client c = h.client();
  for (const auto& r : {c.Get("/v1/ping/"), c.Post("/memories", R"({"messages": "x", "user_id": "u"})", "application/json"),
                        c.Get("/memories/1"), c.Post("/v3/memories/search/", R"({"query": "x"})", "application/json")}) {
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << r->body;
    const json body = json::parse(r->body);
    EXPECT_EQ(body["error"]["code"], "memory_disabled");
    EXPECT_TRUE(body.contains("detail"));
  }
}
