// The memory REST API and memory-aware responses end to end: the demo model in an AsyncEngine +
// HttpServer with a MemoryBridge over a FactStore in a temporary data dir, on a loopback
// ephemeral port. Every test works on its own users, so tests share one server.
#include <gtest/gtest.h>

#include <thread>

#include <chrono>

#include <set>

#include "memory_server.h"

using namespace inferscale;
using namespace inferscale::test_support;

namespace {

std::string content(const json& response) { return response["choices"][0]["message"]["content"]; }

const std::vector<std::string> kAliceFacts = {"Alice adopted a cat named Miso", "Alice works as a nurse in Oslo",
                                              "Alice likes hiking in the mountains", "Alice plays the cello on Sundays"};

class ServerMemory : public MemoryServerTest {};

}  // namespace

TEST_F(ServerMemory, FactCrudRoundTrip) {
  const Api a = api();
  const json added = Api::ok(a.post("/v1/memory/users/crud/facts",
                                    json{{"facts",
                                          {{{"text", "Crud likes tea"},
                                            {"speaker", "Crud"},
                                            {"date", "2024-03-02"},
                                            {"source", {{"conversation", "c1"}, {"session", "s1"}, {"turn", "D1:1"}}},
                                            {"metadata", {{"topic", "food"}}}},
                                           {{"text", "Crud lives in Lyon"}}}}}));
  ASSERT_EQ(added["ids"].size(), 2u);
  const int64_t id = added["ids"][0];

  const json f = Api::ok(a.get("/v1/memory/users/crud/facts/" + std::to_string(id)));
  EXPECT_EQ(f["id"], id);
  EXPECT_EQ(f["text"], "Crud likes tea");
  EXPECT_EQ(f["speaker"], "Crud");
  EXPECT_EQ(f["date"], "2024-03-02");
  EXPECT_EQ(f["source"]["conversation"], "c1");
  EXPECT_EQ(f["source"]["session"], "s1");
  EXPECT_EQ(f["source"]["turn"], "D1:1");
  EXPECT_EQ(f["metadata"]["topic"], "food");
  EXPECT_EQ(f["version"], 1);
  EXPECT_GT(f["created_at"].get<int64_t>(), 1'600'000'000);
  EXPECT_EQ(f["updated_at"], f["created_at"]);

  const json patched = Api::ok(a.patch("/v1/memory/users/crud/facts/" + std::to_string(id),
                                       json{{"text", "Crud likes green tea"}, {"metadata", {{"topic", "drinks"}}}}));
  EXPECT_EQ(patched["text"], "Crud likes green tea");
  EXPECT_EQ(patched["metadata"]["topic"], "drinks");
  EXPECT_EQ(patched["version"], 2);
  EXPECT_EQ(Api::ok(a.get("/v1/memory/users/crud/facts/" + std::to_string(id)))["text"], "Crud likes green tea");
  EXPECT_TRUE(Api::ok(a.patch("/v1/memory/users/crud/facts/" + std::to_string(id), json{{"metadata", nullptr}}))["metadata"].is_null());

  const json hits = Api::ok(a.post("/v1/memory/users/crud/search", json{{"query", "Lyon"}, {"k", 5}}));
  ASSERT_FALSE(hits["data"].empty());
  EXPECT_EQ(hits["data"][0]["id"], added["ids"][1]);
  for (const char* key : {"id", "score", "text", "speaker", "date", "source"}) EXPECT_TRUE(hits["data"][0].contains(key)) << key;
  // Every key is always present, source's too (null when unknown; issue 11, defect 7).
  const json lyon = Api::ok(a.get("/v1/memory/users/crud/facts/" + std::to_string(added["ids"][1].get<int64_t>())));
  const json no_source = {{"conversation", nullptr}, {"session", nullptr}, {"turn", nullptr}, {"speaker", nullptr}};
  EXPECT_EQ(lyon["source"], no_source);
  EXPECT_EQ(hits["data"][0]["source"], no_source);
  for (const char* key : {"id", "text", "speaker", "date", "date_epoch", "source", "turn_index", "metadata", "version",
                          "created_at", "updated_at"})
    EXPECT_TRUE(lyon.contains(key)) << key;

  EXPECT_EQ(Api::ok(a.get("/v1/memory/users/crud"))["facts"], 2);
  const json del = Api::ok(a.del("/v1/memory/users/crud/facts/" + std::to_string(id)));
  EXPECT_EQ(del["deleted"], true);
  EXPECT_EQ(Api::fails(a.get("/v1/memory/users/crud/facts/" + std::to_string(id)), 404)["code"], "fact_not_found");
  EXPECT_EQ(Api::fails(a.del("/v1/memory/users/crud/facts/" + std::to_string(id)), 404)["code"], "fact_not_found");
  const json listed = Api::ok(a.get("/v1/memory/users/crud/facts"));
  ASSERT_EQ(listed["data"].size(), 1u);
  EXPECT_EQ(listed["data"][0]["text"], "Crud lives in Lyon");

  bool found = false;
  for (const json& u : Api::data(a.get("/v1/memory/users")))
    if (u["user"] == "crud") found = (u["facts"] == 1);
  EXPECT_TRUE(found);
  EXPECT_EQ(Api::ok(a.del("/v1/memory/users/crud"))["facts_deleted"], 1);
  EXPECT_EQ(Api::fails(a.get("/v1/memory/users/crud"), 404)["code"], "user_not_found");
  EXPECT_EQ(Api::fails(a.del("/v1/memory/users/crud"), 404)["code"], "user_not_found");
  for (const json& u : Api::data(a.get("/v1/memory/users"))) EXPECT_NE(u["user"], "crud");
}

TEST_F(ServerMemory, PaginationTurnsAndEncodedUserNames) {
  const Api a = api();
  std::vector<std::string> texts;
  for (int i = 0; i < 5; ++i) texts.push_back("page fact " + std::to_string(i));
  const std::vector<int64_t> ids = a.add("pager", texts);
  std::vector<int64_t> seen;
  std::string next = "0";
  for (int page = 0; page < 3; ++page) {
    const json r = Api::ok(a.get("/v1/memory/users/pager/facts?limit=2&after=" + next));
    for (const json& f : r["data"]) seen.push_back(f["id"]);
    EXPECT_EQ(r["has_more"], page < 2) << page;
    if (!r["has_more"]) {
      EXPECT_TRUE(r["next_after"].is_null());
      break;
    }
    next = std::to_string(r["next_after"].get<int64_t>());
  }
  EXPECT_EQ(seen, ids);

  // Conversation turns: each gets the conversation and the next turn index.
  const json turns = Api::ok(a.post("/v1/memory/users/pager/facts",
                                    json{{"conversation", "chat-1"},
                                         {"turns", {{{"text", "hi there"}, {"speaker", "Bo"}}, {{"text", "hello Bo"}, {"speaker", "Al"}}}}}));
  ASSERT_EQ(turns["ids"].size(), 2u);
  const json t0 = Api::ok(a.get("/v1/memory/users/pager/facts/" + std::to_string(turns["ids"][0].get<int64_t>())));
  const json t1 = Api::ok(a.get("/v1/memory/users/pager/facts/" + std::to_string(turns["ids"][1].get<int64_t>())));
  EXPECT_EQ(t0["source"]["conversation"], "chat-1");
  EXPECT_EQ(t1["turn_index"].get<int64_t>(), t0["turn_index"].get<int64_t>() + 1);

  // A user name with '/', ' ' and UTF-8 travels percent-encoded as one path segment.
  const std::string encoded = "a%2Fb%20%C3%A9";
  Api::ok(a.post("/v1/memory/users/" + encoded + "/facts", json{{"facts", {{{"text", "slash user"}}}}}));
  EXPECT_EQ(s->store->count(kDefaultTenant, "a/b \xC3\xA9"), 1u);
  EXPECT_EQ(Api::ok(a.get("/v1/memory/users/" + encoded + "/facts"))["data"][0]["text"], "slash user");
}

TEST_F(ServerMemory, EveryBadInputGetsItsStatus) {
  const Api a = api();
  const int64_t id = a.add("errs", {"errs has a fact"})[0];
  const std::string facts = "/v1/memory/users/errs/facts";
  const std::string fact = facts + "/" + std::to_string(id);
  auto code = [](const httplib::Result& r, int status) { return Api::fails(r, status)["code"]; };
  auto param = [](const httplib::Result& r, int status) { return Api::fails(r, status)["param"]; };

  // 400: JSON, fields, types, names.
  EXPECT_EQ(code(a.post(facts, std::string("{nope")), 400), "invalid_json");
  EXPECT_EQ(Api::fails(a.post(facts, std::string("[1]")), 400)["type"], "invalid_request_error");
  EXPECT_EQ(param(a.post(facts, json::object()), 400), "facts");
  EXPECT_EQ(param(a.post(facts, json{{"facts", "x"}}), 400), "facts");
  EXPECT_EQ(param(a.post(facts, json{{"facts", json::array()}}), 400), "facts");
  EXPECT_EQ(param(a.post(facts, json{{"facts", {{{"speaker", "x"}}}}}), 400), "facts[0]");
  EXPECT_EQ(param(a.post(facts, json{{"facts", {{{"text", "ok"}}, {{"text", 5}}}}}), 400), "facts[1]");
  EXPECT_EQ(param(a.post(facts, json{{"facts", {{{"text", "ok"}, {"colour", "red"}}}}}), 400), "facts[0]");
  EXPECT_EQ(param(a.post(facts, json{{"facts", {{{"text", "ok"}}}}, {"typo", 1}}), 400), "typo");
  EXPECT_EQ(param(a.post(facts, json{{"facts", {{{"text", "ok"}}}}, {"turns", {{{"text", "ok"}}}}}), 400), "turns");
  EXPECT_EQ(param(a.post(facts, json{{"turns", {{{"text", "ok"}}}}}), 400), "conversation");
  EXPECT_EQ(param(a.post(facts, json{{"facts", {{{"text", "ok"}}}}, {"conversation", "c"}}), 400), "conversation");
  EXPECT_EQ(Api::fails(a.post(facts, json{{"facts", {{{"text", "   "}}}}}), 400)["type"], "invalid_request_error");
  // A date the server cannot read and metadata that is not an object are refused, naming the
  // field, not stored as they are (issue 11, defect 7).
  auto names = [](const httplib::Result& r, const std::string& param, const std::string& field) {
    const json e = Api::fails(r, 400);
    EXPECT_EQ(e["param"], param);
    EXPECT_NE(e["message"].get<std::string>().find(field), std::string::npos) << e.dump();
  };
  names(a.post(facts, json{{"facts", {{{"text", "ok"}}, {{"text", "ok"}, {"date", "not-a-date"}}}}}), "facts[1]", "date");
  names(a.post(facts, json{{"conversation", "c"}, {"turns", {{{"text", "ok"}, {"date", "31 February 2023"}}}}}), "turns[0]", "date");
  for (const json& meta : {json("a string"), json(5), json::array({1, 2}), json(true)})
    names(a.post(facts, json{{"facts", {{{"text", "ok"}, {"metadata", meta}}}}}), "facts[0]", "metadata");
  names(a.patch(fact, json{{"metadata", "a string"}}), "metadata", "metadata");
  names(a.patch(fact, json{{"metadata", json::array()}}), "metadata", "metadata");
  EXPECT_EQ(code(a.get(facts + "/abc"), 400), "invalid_id");
  EXPECT_EQ(code(a.get(facts + "/-3"), 400), "invalid_id");
  EXPECT_EQ(param(a.get(facts + "?limit=0"), 400), "limit");
  EXPECT_EQ(param(a.get(facts + "?limit=5000"), 400), "limit");
  EXPECT_EQ(param(a.get(facts + "?after=x"), 400), "after");
  EXPECT_EQ(Api::fails(a.patch(fact, json::object()), 400)["type"], "invalid_request_error");
  EXPECT_EQ(param(a.patch(fact, json{{"text", 3}}), 400), "text");
  EXPECT_EQ(param(a.patch(fact, json{{"version", 3}}), 400), "version");
  EXPECT_EQ(param(a.post("/v1/memory/users/errs/search", json::object()), 400), "query");
  EXPECT_EQ(param(a.post("/v1/memory/users/errs/search", json{{"query", "x"}, {"k", 0}}), 400), "k");
  EXPECT_EQ(param(a.post("/v1/memory/users/errs/search", json{{"query", "x"}, {"k", "ten"}}), 400), "k");
  // One set of limits (MemoryRequest::kMax*): past them, a 400 naming the field; at them, served.
  EXPECT_EQ(param(a.post("/v1/memory/users/errs/search", json{{"query", "x"}, {"k", MemoryRequest::kMaxK + 1}}), 400), "k");
  EXPECT_EQ(Api::ok(a.post("/v1/memory/users/errs/search", json{{"query", "fact"}, {"k", MemoryRequest::kMaxK}}))["data"].size(), 1u);
  for (const auto& [field, over] : {std::pair{"k", MemoryRequest::kMaxK + 1}, std::pair{"k", -1},
                                    std::pair{"w", MemoryRequest::kMaxWindow + 1},
                                    std::pair{"recompute", MemoryRequest::kMaxRecompute + 1},
                                    std::pair{"recompute_last", MemoryRequest::kMaxRecomputeLast + 1}}) {
    const json mem = {{"user", "errs"}, {field, over}};
    EXPECT_EQ(param(a.post("/v1/chat/completions", chat("fact?", mem)), 400), std::string("memory.") + field);
    json completion = {{"model", "demo"}, {"prompt", "fact"}, {"max_tokens", 2}, {"memory", mem}};
    EXPECT_EQ(param(a.post("/v1/completions", completion), 400), std::string("memory.") + field);
  }
  for (const double over : {1.5, -0.1}) {
    EXPECT_EQ(param(a.post("/v1/chat/completions", chat("fact?", json{{"user", "errs"}, {"neighbours", over}})), 400),
              "memory.neighbours");
    EXPECT_EQ(param(a.post("/v1/chat/completions", chat("fact?", json{{"user", "errs"}, {"recompute_attention", over}})), 400),
              "memory.recompute_attention");
  }
  {
    const json at_limits = {{"user", "errs"}, {"k", MemoryRequest::kMaxK}, {"w", MemoryRequest::kMaxWindow},
                            {"recompute", MemoryRequest::kMaxRecompute}, {"recompute_last", MemoryRequest::kMaxRecomputeLast},
                            {"recompute_attention", 1.0}, {"neighbours", 1.0}};
    EXPECT_EQ(Api::ok(a.post("/v1/chat/completions", chat("fact?", at_limits, 2)))["memory"]["facts"].size(), 1u);
  }
  EXPECT_EQ(param(a.get("/v1/memory/users/" + std::string(300, 'u') + "/facts"), 400), "user");
  EXPECT_EQ(param(a.get("/v1/memory/users/bad%01name/facts"), 400), "user");
  EXPECT_EQ(code(a.get("/v1/memory/users/bad%zzname/facts"), 400), "invalid_path");
  EXPECT_EQ(param(Api{s->port, std::string(300, 't')}.get("/v1/memory/users"), 400), "X-InferScale-Tenant");

  // 404: unknown user, fact, route.
  EXPECT_EQ(code(a.get("/v1/memory/users/nobody/facts"), 404), "user_not_found");
  EXPECT_EQ(code(a.post("/v1/memory/users/nobody/search", json{{"query", "x"}}), 404), "user_not_found");
  EXPECT_EQ(code(a.get(facts + "/999999999"), 404), "fact_not_found");
  EXPECT_EQ(code(a.patch(facts + "/999999999", json{{"text", "x"}}), 404), "fact_not_found");
  EXPECT_EQ(code(a.get("/v1/memory/users/errs/nothing"), 404), "unknown_route");
  EXPECT_EQ(code(a.get("/v1/memory"), 404), "unknown_route");
  EXPECT_EQ(code(a.get("/v1/memoryx"), 404), "unknown_route");

  // 405 with Allow.
  auto r = a.post(fact, json::object());
  EXPECT_EQ(code(r, 405), "method_not_allowed");
  EXPECT_EQ(r->get_header_value("Allow"), "GET, PATCH, DELETE");
  EXPECT_EQ(code(a.del("/v1/memory/users/errs/facts"), 405), "method_not_allowed");

  // 413: a fact text over the store's limit, too many facts, a body over the server's limit (2 MiB).
  const std::string big(FactStore::kMaxTextBytes + 1, 'x');
  EXPECT_EQ(code(a.post(facts, json{{"facts", {{{"text", big}}}}}), 413), "fact_too_large");
  EXPECT_EQ(code(a.patch(fact, json{{"text", big}}), 413), "fact_too_large");
  EXPECT_EQ(code(a.post(facts, json{{"facts", std::vector<json>(5000, json{{"text", "x"}})}}), 413), "too_many_facts");
  EXPECT_EQ(code(a.post(facts, json{{"facts", {{{"text", std::string(3u << 20, 'x')}}}}}), 413), "payload_too_large");

  // Nothing above changed the user's facts, and the server still serves.
  EXPECT_EQ(s->store->count(kDefaultTenant, "errs"), 1u);
  EXPECT_EQ(Api::ok(a.get(fact))["version"], 1);
}

TEST(ServerMemoryDisabled, EveryRouteSaysMemoryIsNotEnabled) {
  Harness h;  // no MemoryProvider
  const Api a{h.port, {}};
  for (const httplib::Result& r : {a.get("/v1/memory/users"), a.get("/v1/memory/users/x/facts"),
                                   a.post("/v1/memory/users/x/facts", json{{"facts", {{{"text", "t"}}}}}),
                                   a.post("/v1/memory/users/x/search", json{{"query", "q"}}), a.del("/v1/memory/users/x")}) {
    const json e = Api::fails(r, 400);
    EXPECT_EQ(e["message"], "memory is not enabled on this server");
    EXPECT_EQ(e["code"], "memory_disabled");
  }
  EXPECT_EQ(Api::fails(a.get("/v1/memory/nope"), 404)["code"], "unknown_route");
}

TEST_F(ServerMemory, TenantsAndUsersAreIsolated) {
  const Api acme = api("acme"), other = api("other"), plain = api();
  const std::vector<int64_t> alice = acme.add("alice", kAliceFacts);
  const std::vector<int64_t> bob = plain.add("bob", {"Bob adopted a dog named Rex", "Bob works as a pilot in Rome"});

  // Another tenant sees neither the user nor its facts, by id or by search.
  EXPECT_EQ(Api::fails(other.get("/v1/memory/users/alice/facts"), 404)["code"], "user_not_found");
  EXPECT_EQ(Api::fails(plain.get("/v1/memory/users/alice/facts/" + std::to_string(alice[0])), 404)["code"], "fact_not_found");
  EXPECT_EQ(Api::fails(other.post("/v1/memory/users/alice/search", json{{"query", "cat"}}), 404)["code"], "user_not_found");
  for (const json& u : Api::data(other.get("/v1/memory/users"))) EXPECT_NE(u["user"], "alice");
  for (const json& u : Api::data(acme.get("/v1/memory/users"))) EXPECT_NE(u["user"], "bob");
  // Another user of the same tenant cannot reach a fact by id.
  const std::vector<int64_t> carol = plain.add("carol", {"Carol collects stamps"});
  EXPECT_EQ(Api::fails(plain.get("/v1/memory/users/bob/facts/" + std::to_string(carol[0])), 404)["code"], "fact_not_found");
  EXPECT_EQ(Api::fails(plain.del("/v1/memory/users/bob/facts/" + std::to_string(carol[0])), 404)["code"], "fact_not_found");
  EXPECT_EQ(Api::ok(plain.get("/v1/memory/users/carol/facts/" + std::to_string(carol[0])))["text"], "Carol collects stamps");
  for (const json& hit : Api::data(plain.post("/v1/memory/users/bob/search", json{{"query", "cat Miso nurse Oslo"}, {"k", 10}})))
    EXPECT_TRUE(std::find(bob.begin(), bob.end(), hit["id"].get<int64_t>()) != bob.end()) << hit.dump();

  // A chat for alice, asking about bob's words, receives only alice's facts.
  const json r = Api::ok(acme.post("/v1/chat/completions", chat("Does Bob fly a plane to Rome with his dog Rex?",
                                                                 {{"user", "alice"}, {"k", 10}})));
  const std::set<int64_t> mine(alice.begin(), alice.end());
  for (int64_t id : fact_ids(r)) EXPECT_TRUE(mine.count(id)) << id;
  // The same user name in the default tenant (no header) is another user: no facts at all.
  EXPECT_TRUE(fact_ids(Api::ok(plain.post("/v1/chat/completions", chat("cat?", {{"user", "alice"}, {"k", 10}})))).empty());
  // The tenant in the body must agree with the header.
  EXPECT_EQ(Api::fails(other.post("/v1/chat/completions", chat("cat?", {{"user", "alice"}, {"tenant", "acme"}})), 400)["param"],
            "memory.tenant");
  EXPECT_FALSE(fact_ids(Api::ok(plain.post("/v1/chat/completions", chat("cat?", {{"user", "alice"}, {"tenant", "acme"}})))).empty());
}

TEST_F(ServerMemory, InjectAndTextPlaceTheSameFacts) {
  const Api a = api();
  a.add("carol", {"Carol adopted a cat named Miso", "Carol works as a nurse in Oslo", "Carol likes hiking in the mountains"});
  const json mem = {{"user", "carol"}, {"k", 2}, {"w", 1}};
  const json inject = Api::ok(a.post("/v1/chat/completions", chat("What is the name of Carol's cat?", mem)));
  json text_mem = mem;
  text_mem["mode"] = "text";
  const json text = Api::ok(a.post("/v1/chat/completions", chat("What is the name of Carol's cat?", text_mem)));

  EXPECT_EQ(inject["usage"]["prompt_tokens"], text["usage"]["prompt_tokens"]);
  EXPECT_EQ(inject["memory"]["facts"], text["memory"]["facts"]);
  ASSERT_EQ(inject["memory"]["facts"].size(), 2u);
  EXPECT_EQ(inject["memory"]["facts"][1]["text"], "Carol adopted a cat named Miso");  // best-ranked last
  EXPECT_EQ(inject["memory"]["mode"], "inject");
  EXPECT_EQ(text["memory"]["mode"], "text");
  EXPECT_GT(inject["memory"]["injected_tokens"].get<int>(), 20);
  EXPECT_EQ(text["memory"]["injected_tokens"], 0);
  EXPECT_EQ(inject["memory"]["encoded"], 2);  // first use: encoded on demand
  EXPECT_EQ(text["memory"]["encoded"], 0);
  for (const char* key : {"loaded", "retrieve_ms", "kv_ms"}) EXPECT_TRUE(inject["memory"].contains(key)) << key;
  // Again: the facts' KV is resident now.
  const json again = Api::ok(a.post("/v1/chat/completions", chat("What is the name of Carol's cat?", mem)));
  EXPECT_EQ(again["memory"]["encoded"], 0);
  EXPECT_GT(again["memory"]["retrieve_ms"].get<double>(), 0.0) << "the retrieval's time, also when prepare reuses it";
  EXPECT_EQ(content(again), content(inject));

  // Completions carry the object too.
  json completion = {{"model", "demo"}, {"prompt", "Carol's cat is called"}, {"max_tokens", 4}, {"temperature", 0},
                     {"memory", mem}};
  const json c = Api::ok(a.post("/v1/completions", completion));
  EXPECT_EQ(c["memory"]["facts"].size(), 2u);
}

// Issue 9, part 1 (its background-encoding paragraph): facts written through the API get their KV
// encoded between requests, so the first request that retrieves them encodes none; /metrics
// says what is queued and what was encoded.
// A counter or gauge of /metrics, -1 when absent.
static int64_t metric_value(const Api& a, const std::string& name) {
  const auto r = a.get("/metrics");
  if (!r) return -1;
  const size_t at = r->body.find("\n" + name + " ");
  return at == std::string::npos ? -1 : static_cast<int64_t>(std::stoll(r->body.substr(at + name.size() + 2)));
}

TEST(ServerMemoryBackground, WrittenFactsAreEncodedBeforeTheirFirstRequest) {
  MemoryServer s(2u << 20, nullptr, /*background=*/true);
  const Api a{s.port, ""};
  a.add("dora", {"Dora adopted a cat named Miso", "Dora works as a nurse in Oslo", "Dora likes hiking in the mountains"});
  const auto metric = [&](const std::string& name) { return metric_value(a, name); };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while ((metric("inferscale_memory_background_encoded_total") < 3 || metric("inferscale_memory_background_queued") != 0) &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(metric("inferscale_memory_background_encoded_total"), 3);
  EXPECT_EQ(metric("inferscale_memory_background_queued"), 0);
  const json mem = {{"user", "dora"}, {"k", 3}};  // the server's default window (1), as the background used
  const json r = Api::ok(a.post("/v1/chat/completions", chat("What is the name of Dora's cat?", mem)));
  EXPECT_EQ(r["memory"]["mode"], "inject");
  EXPECT_EQ(r["memory"]["facts"].size(), 3u);
  EXPECT_EQ(r["memory"]["encoded"], 0) << "encoded in the background, not by the request";
  // Another window than the server's default is encoded on demand, as before.
  const json w0 = Api::ok(a.post("/v1/chat/completions", chat("What is the name of Dora's cat?", {{"user", "dora"}, {"k", 3}, {"w", 0}})));
  EXPECT_EQ(w0["memory"]["encoded"], 3);
}

// Facts written before the engine thread ran any background work are queued too: the service
// starts queueing when the engine is built (AsyncEngineOptions::on_start), not at the first idle
// piece. (When it started there, under load, a write could come first and was never queued.)
TEST(ServerMemoryBackground, FactsWrittenBeforeTheFirstIdlePieceAreQueued) {
  std::promise<void> go;
  MemoryServer s(2u << 20, nullptr, /*background=*/true, go.get_future().share());
  const Api a{s.port, ""};
  a.add("erin", {"Erin adopted a dog named Pip", "Erin works as a baker in Porto"});
  go.set_value();  // only now may the first background piece run
  const auto metric = [&](const std::string& name) { return metric_value(a, name); };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (metric("inferscale_memory_background_encoded_total") < 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(metric("inferscale_memory_background_encoded_total"), 2);
  const json r = Api::ok(a.post("/v1/chat/completions", chat("What is the name of Erin's dog?", {{"user", "erin"}, {"k", 2}})));
  EXPECT_EQ(r["memory"]["encoded"], 0) << "encoded in the background, not by the request";
}

// Issue 8, part 5: chat and completion prompts come from one builder (memory/compose/prompt_layout.h), so
// k = 0 and mode off give exactly the prompt of a plain request on both endpoints (compared token
// for token through return_token_ids), and a completion's facts go before its prompt text.
TEST_F(ServerMemory, ModeOffAndKZeroEqualAPlainRequest) {
  const Api a = api();
  a.add("dave", {"Dave adopted a cat named Miso", "Dave works as a nurse in Oslo"});
  auto prompt_ids = [](const json& r) {
    const json& ids = r.contains("prompt_token_ids") ? r["prompt_token_ids"] : r["choices"][0]["prompt_token_ids"];
    return ids.get<std::vector<int32_t>>();
  };
  auto text_of = [](const json& r) {
    const json& c = r["choices"][0];
    return c.contains("message") ? c["message"]["content"].get<std::string>() : c["text"].get<std::string>();
  };
  const json completion = {{"model", "demo"}, {"prompt", "Tell me about Dave's cat:"}, {"max_tokens", 12},
                           {"temperature", 0}, {"ignore_eos", true}};
  const json by_ids = {{"model", "demo"}, {"prompt", {256, 84, 101, 108, 108}}, {"max_tokens", 12}, {"temperature", 0},
                       {"ignore_eos", true}};
  for (const auto& [path, request] : {std::pair{"/v1/chat/completions", chat("Tell me about Dave's cat", nullptr, 12)},
                                      std::pair{"/v1/completions", completion}, std::pair{"/v1/completions", by_ids}}) {
    json body = request;
    body["return_token_ids"] = true;
    const json plain = Api::ok(a.post(path, body));
    EXPECT_FALSE(plain.contains("memory"));
    for (const json& mem : {json{{"user", "dave"}, {"mode", "off"}}, json{{"user", "dave"}, {"k", 0}},
                            json{{"user", "dave"}, {"k", 0}, {"mode", "text"}}}) {
      body["memory"] = mem;
      const json r = Api::ok(a.post(path, body));
      const std::string what = std::string(path) + " " + body["prompt"].dump() + " " + mem.dump();
      EXPECT_EQ(prompt_ids(r), prompt_ids(plain)) << what;
      EXPECT_EQ(text_of(r), text_of(plain)) << what;
      EXPECT_EQ(r["usage"]["prompt_tokens"], plain["usage"]["prompt_tokens"]) << what;
      EXPECT_TRUE(r["memory"]["facts"].empty()) << what;
      EXPECT_EQ(r["memory"]["mode"], mem.value("mode", "inject"));
      EXPECT_EQ(r["memory"]["injected_tokens"], 0);
    }
  }
  // With facts, a completion is not turned into a chat: [BOS][header][facts][footer][prompt], the
  // plain prompt's text (after its BOS) ends the memory prompt, and inject and text agree.
  json body = completion;
  body["return_token_ids"] = true;
  const std::vector<int32_t> plain = prompt_ids(Api::ok(a.post("/v1/completions", body)));
  std::vector<std::vector<int32_t>> served;
  for (const char* mode : {"text", "inject"}) {
    body["memory"] = {{"user", "dave"}, {"k", 2}, {"mode", mode}};
    const json r = Api::ok(a.post("/v1/completions", body));
    ASSERT_EQ(r["memory"]["facts"].size(), 2u) << mode;
    served.push_back(prompt_ids(r));
    const std::vector<int32_t>& ids = served.back();
    ASSERT_GT(ids.size(), plain.size());
    EXPECT_EQ(ids.front(), plain.front());  // BOS
    EXPECT_TRUE(std::equal(plain.begin() + 1, plain.end(), ids.end() - static_cast<long>(plain.size() - 1))) << mode;
    const std::string text = TestModel::demo().tokenizer->decode(ids, /*skip_special=*/false);
    EXPECT_EQ(text.find("<|im_start|>"), std::string::npos) << text;  // no chat template
    EXPECT_LT(text.find("Dave adopted a cat named Miso"), text.find("Tell me about Dave's cat:")) << text;
  }
  EXPECT_EQ(served[0], served[1]);
}

TEST_F(ServerMemory, DeletedAndUpdatedFactsReachTheNextRequest) {
  const Api a = api();
  const std::vector<int64_t> ids = a.add("erin", {"Erin adopted a cat named Miso", "Erin works as a nurse in Oslo"});
  const json mem = {{"user", "erin"}, {"k", 4}};
  auto ask = [&] { return Api::ok(a.post("/v1/chat/completions", chat("What is Erin's cat called?", mem))); };
  const json before = ask();
  auto has = [](const json& r, int64_t id) {
    const std::vector<int64_t> got = fact_ids(r);
    return std::find(got.begin(), got.end(), id) != got.end();
  };
  ASSERT_TRUE(has(before, ids[0]));
  Api::ok(a.patch("/v1/memory/users/erin/facts/" + std::to_string(ids[1]), json{{"text", "Erin works as a cat vet in Oslo"}}));
  Api::ok(a.del("/v1/memory/users/erin/facts/" + std::to_string(ids[0])));
  const json after = ask();
  EXPECT_FALSE(has(after, ids[0]));
  ASSERT_EQ(after["memory"]["facts"].size(), 1u);
  EXPECT_EQ(after["memory"]["facts"][0]["text"], "Erin works as a cat vet in Oslo");
  EXPECT_EQ(after["memory"]["encoded"], 1);  // the new version's KV, not the stale one
}

TEST_F(ServerMemory, StreamingFirstChunkCarriesTheMemoryObject) {
  const Api a = api();
  a.add("fay", {"Fay adopted a cat named Miso", "Fay works as a nurse in Oslo"});
  const json mem = {{"user", "fay"}, {"k", 2}};
  const json plain = Api::ok(a.post("/v1/chat/completions", chat("What is Fay's cat called?", mem, 10)));
  json body = chat("What is Fay's cat called?", mem, 10);
  body["stream"] = true;
  auto r = a.post("/v1/chat/completions", body);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const std::vector<json> events = parse_sse(r->body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(events[0]["memory"]["facts"], plain["memory"]["facts"]);
  EXPECT_EQ(events[0]["memory"]["mode"], "inject");
  std::string text;
  for (size_t i = 1; i < events.size(); ++i) {
    if (events[i] == "[DONE]") continue;
    EXPECT_FALSE(events[i].contains("memory")) << i;
    text += events[i]["choices"][0]["delta"].value("content", "");
  }
  EXPECT_EQ(text, content(plain));

  // Completions: a leading chunk with empty text carries it.
  json completion = {{"model", "demo"}, {"prompt", "Fay's cat is called"}, {"max_tokens", 4}, {"temperature", 0},
                     {"memory", mem}, {"stream", true}};
  const std::vector<json> cev = parse_sse(a.post("/v1/completions", completion)->body);
  ASSERT_GE(cev.size(), 3u);
  EXPECT_EQ(cev[0]["choices"][0]["text"], "");
  EXPECT_EQ(cev[0]["memory"]["facts"].size(), 2u);
  // Without memory, completions stream no leading empty chunk.
  completion.erase("memory");
  EXPECT_FALSE(parse_sse(a.post("/v1/completions", completion)->body)[0].contains("memory"));
}

TEST_F(ServerMemory, MetricsCountMemoryRequests) {
  const Api a = api();
  a.add("gus", {"Gus adopted a cat named Miso", "Gus works as a nurse in Oslo"});
  auto metrics = [&] { return parse_prometheus(a.get("/metrics")->body); };
  auto at = [](const std::map<std::string, double>& m, const std::string& k) { return m.count(k) ? m.at(k) : 0.0; };
  const auto m0 = metrics();
  Api::ok(a.post("/v1/chat/completions", chat("Gus's cat?", {{"user", "gus"}, {"k", 2}})));
  Api::ok(a.post("/v1/chat/completions", chat("Gus's cat?", {{"user", "gus"}, {"k", 2}, {"mode", "text"}})));
  Api::ok(a.post("/v1/chat/completions", chat("Gus's cat?", {{"user", "gus"}, {"mode", "off"}})));
  const auto m1 = metrics();
  for (const char* mode : {"inject", "text", "off"})
    EXPECT_EQ(at(m1, fmt::format("inferscale_memory_requests_total{{mode=\"{}\"}}", mode)) -
                  at(m0, fmt::format("inferscale_memory_requests_total{{mode=\"{}\"}}", mode)), 1) << mode;
  EXPECT_EQ(at(m1, "inferscale_memory_facts_total{mode=\"inject\"}") - at(m0, "inferscale_memory_facts_total{mode=\"inject\"}"), 2);
  EXPECT_EQ(at(m1, "inferscale_memory_facts_total{mode=\"text\"}") - at(m0, "inferscale_memory_facts_total{mode=\"text\"}"), 2);
  EXPECT_EQ(at(m1, "inferscale_memory_facts_encoded_total") - at(m0, "inferscale_memory_facts_encoded_total"), 2);
  EXPECT_TRUE(m1.count("inferscale_memory_facts_loaded_total"));
  EXPECT_TRUE(m1.count("inferscale_memory_kv_seconds_total"));
  EXPECT_EQ(at(m1, "inferscale_memory_retrieval_seconds_count") - at(m0, "inferscale_memory_retrieval_seconds_count"), 2);
  EXPECT_EQ(m1.at("inferscale_memory_retrieval_seconds_bucket{le=\"+Inf\"}"), m1.at("inferscale_memory_retrieval_seconds_count"));
  // The CPU backend reads the injected facts in place: nothing is copied.
  EXPECT_EQ(at(m1, "inferscale_memory_fact_reads_total{path=\"in_place\"}") -
                at(m0, "inferscale_memory_fact_reads_total{path=\"in_place\"}"), 1);
  EXPECT_EQ(at(m1, "inferscale_memory_fact_reads_total{path=\"copy\"}"), at(m0, "inferscale_memory_fact_reads_total{path=\"copy\"}"));
  EXPECT_EQ(m1.at("inferscale_injected_tokens_total"), at(m0, "inferscale_injected_tokens_total"));
}

TEST_F(ServerMemory, ClientVectorsRetrieveByQueryVector) {
  const Api a = api();
  // Facts with client vectors (unit axes): the query vector picks the fact whatever the text says.
  json facts = json::array();
  for (size_t i = 0; i < kAliceFacts.size(); ++i) {
    std::vector<float> v(4, 0.0f);
    v[i] = 1.0f;
    facts.push_back({{"text", kAliceFacts[i]}, {"vector", v}});
  }
  const std::vector<int64_t> ids = Api::ok(a.post("/v1/memory/users/vecs/facts", json{{"facts", facts}}))["ids"];
  ASSERT_EQ(ids.size(), 4u);
  const std::string search = "/v1/memory/users/vecs/search";

  const json hits = Api::data(a.post(search, json{{"vector", {0.1, 0.0, 0.9, 0.3}}, {"k", 2}}));
  ASSERT_EQ(hits.size(), 2u);
  EXPECT_EQ(hits[0]["id"], ids[2]);
  EXPECT_EQ(hits[1]["id"], ids[3]);
  EXPECT_NEAR(hits[0]["score"].get<double>(), 0.9, 1e-6);
  EXPECT_EQ(Api::fails(a.post(search, json{{"vector", {1, 0}}}), 400)["param"], nullptr);  // dim 2 vs 4: named in the message
  EXPECT_EQ(Api::fails(a.post(search, json{{"vector", {1, 0, 0, 0}}, {"query", "cat"}}), 400)["param"], "vector");
  // Text search still goes through BM25 on the same server.
  EXPECT_EQ(Api::data(a.post(search, json{{"query", "cello Sundays"}, {"k", 1}}))[0]["id"], ids[3]);

  // A chat request retrieves by its query vector; the question text plays no part.
  const json mem = {{"user", "vecs"}, {"k", 1}, {"w", 0}, {"query_vector", {0.0, 1.0, 0.0, 0.0}}};
  const json r = Api::ok(a.post("/v1/chat/completions", chat("Tell me about the cat", mem)));
  EXPECT_EQ(fact_ids(r), (std::vector<int64_t>{ids[1]}));
  EXPECT_GT(r["memory"]["injected_tokens"].get<int>(), 0);
  // A user with no vectors retrieves nothing; a wrong dim is a 400.
  a.add("novecs", {"novecs keeps text only"});
  const json none = Api::ok(a.post("/v1/chat/completions",
                                   chat("hello", {{"user", "novecs"}, {"query_vector", {1.0, 0.0, 0.0, 0.0}}})));
  EXPECT_TRUE(none["memory"]["facts"].empty());
  Api::fails(a.post("/v1/chat/completions", chat("hello", {{"user", "vecs"}, {"query_vector", {1.0, 0.0}}})), 400);
}

// Scoring with memory (LoCoMo's gold-answer likelihood): mode text is exactly a plain request with
// its prompt tokens, and mode inject scores the same tokens from injected KV, finite and close.
TEST_F(ServerMemory, LogprobsOfTextModeEqualAPlainRequestAndInjectIsClose) {
  const Api a = api();
  a.add("gina", {"Gina adopted a cat named Miso", "Gina works as a nurse in Oslo", "Gina likes hiking"});
  auto scored = [&](const std::string& mode) {
    json body = chat("What is the name of Gina's cat?", {{"user", "gina"}, {"k", 2}, {"w", 1}, {"mode", mode}}, 4);
    body["messages"].push_back({{"role", "assistant"}, {"content", "Her cat is called Miso."}});
    body["add_generation_prompt"] = false;
    body["continue_final_message"] = true;
    body["logprobs"] = true;
    body["top_logprobs"] = 2;
    body["prompt_logprobs"] = 2;
    body["return_token_ids"] = true;
    return Api::ok(a.post("/v1/chat/completions", body));
  };
  const json text = scored("text");
  const json inject = scored("inject");
  const std::vector<int32_t> ids = text["prompt_token_ids"];
  EXPECT_EQ(inject["prompt_token_ids"].get<std::vector<int32_t>>(), ids);  // the same tokens, other KV
  EXPECT_EQ(text["usage"]["prompt_tokens_details"]["injected_tokens"], 0);
  const int injected = inject["memory"]["injected_tokens"];
  EXPECT_GT(injected, 20);
  EXPECT_EQ(inject["usage"]["prompt_tokens_details"]["injected_tokens"], injected);

  // The plain request: a completion of exactly those tokens (prompt logprobs skip the prefix
  // cache, so both ran the same single forward).
  const json plain = Api::ok(a.post("/v1/completions", json{{"model", "demo"}, {"prompt", ids}, {"max_tokens", 4},
                                                            {"temperature", 0}, {"ignore_eos", true}, {"logprobs", 2},
                                                            {"prompt_logprobs", 2}, {"return_token_ids", true}}));
  EXPECT_EQ(plain["choices"][0]["prompt_logprobs"], text["prompt_logprobs"]);
  EXPECT_EQ(plain["choices"][0]["token_ids"], text["choices"][0]["token_ids"]);
  const json& lp = plain["choices"][0]["logprobs"]["token_logprobs"];
  const json& content = text["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(content[i]["logprob"], lp[i]) << i;

  // Inject: the tokens right after injected positions have no logits (null), all others are
  // finite and close to text mode's; so are the generated tokens'.
  const json& pi = inject["prompt_logprobs"];
  const json& pt = text["prompt_logprobs"];
  ASSERT_EQ(pi.size(), ids.size());
  int nulls = 0;
  double worst = 0;
  for (size_t i = 1; i < ids.size(); ++i) {
    if (pi[i].is_null()) {
      ++nulls;
      continue;
    }
    const std::string key = std::to_string(ids[i]);
    const double v = pi[i][key]["logprob"];
    EXPECT_TRUE(std::isfinite(v));
    worst = std::max(worst, std::abs(v - pt[i][key]["logprob"].get<double>()));
  }
  EXPECT_EQ(nulls, injected);  // one per injected position: the token after it
  const json& ci = inject["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(ci.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_TRUE(std::isfinite(ci[i]["logprob"].get<double>()));
    worst = std::max(worst, std::abs(ci[i]["logprob"].get<double>() - content[i]["logprob"].get<double>()));
  }
  EXPECT_LT(worst, 0.5) << "inject and text logprobs differ by " << worst << " nats";
  std::printf("inject vs text: max |logprob difference| %.3g nats over %zu prompt and 4 generated tokens\n", worst, ids.size());
}

// Issue 11, defect 7: ids count per tenant, so a tenant's ids tell nothing of other tenants'
// writes; the same id in two tenants is two facts, in the REST API and in a chat's memory.
TEST_F(ServerMemory, FactIdsArePerTenant) {
  const Api a = api("ids-a"), b = api("ids-b");
  EXPECT_EQ(a.add("u", {"ids-a has a red kite", "ids-a has a blue kite"}), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(b.add("u", {"ids-b has a green kite"}), (std::vector<int64_t>{1}));
  EXPECT_EQ(Api::ok(a.get("/v1/memory/users/u/facts/1"))["text"], "ids-a has a red kite");
  EXPECT_EQ(Api::ok(b.get("/v1/memory/users/u/facts/1"))["text"], "ids-b has a green kite");
  EXPECT_EQ(Api::fails(b.get("/v1/memory/users/u/facts/2"), 404)["code"], "fact_not_found");
  for (const Api* t : {&a, &b}) {
    const json r = Api::ok(t->post("/v1/chat/completions", chat("kite?", {{"user", "u"}, {"query", "kite"}, {"k", 1}})));
    ASSERT_EQ(r["memory"]["facts"].size(), 1u);
    EXPECT_EQ(r["memory"]["facts"][0]["id"], 1);
    EXPECT_EQ(r["memory"]["facts"][0]["text"], t == &a ? "ids-a has a red kite" : "ids-b has a green kite");
  }
  Api::ok(a.del("/v1/memory/users/u/facts/2"));
  EXPECT_EQ(a.add("u", {"ids-a has a new kite"}), (std::vector<int64_t>{3}));  // never reused
}

// Issue 11, defect 8: a write retried with the same Idempotency-Key (say after a lost answer)
// returns the first answer and writes nothing; the key is the tenant's; another request under a
// used key is a 422.
TEST_F(ServerMemory, IdempotencyKeyMakesRetriesSafe) {
  const Api a = api("idem-a"), b = api("idem-b");
  auto with_key = [](const Api& t, const std::string& key) {
    httplib::Headers h = t.headers();
    h.emplace("Idempotency-Key", key);
    return h;
  };
  const std::string facts = "/v1/memory/users/u/facts";
  const std::string body = json{{"facts", {{{"text", "idem fact one"}}, {{"text", "idem fact two"}}}}}.dump();
  auto first = a.client().Post(facts.c_str(), with_key(a, "add-1"), body, "application/json");
  ASSERT_TRUE(first);
  EXPECT_EQ(first->status, 200) << first->body;
  auto again = a.client().Post(facts.c_str(), with_key(a, "add-1"), body, "application/json");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 200);
  EXPECT_EQ(again->body, first->body);
  EXPECT_EQ(again->get_header_value("Idempotent-Replayed"), "true");
  EXPECT_EQ(Api::ok(a.get("/v1/memory/users/u"))["facts"], 2);  // nothing written twice
  // The same key with another body: refused, nothing written.
  const json reused = Api::fails(a.client().Post(facts.c_str(), with_key(a, "add-1"),
                                                json{{"facts", {{{"text", "something else"}}}}}.dump(), "application/json"),
                                 422);
  EXPECT_EQ(reused["code"], "idempotency_key_reused");
  EXPECT_EQ(reused["param"], "Idempotency-Key");
  EXPECT_EQ(Api::ok(a.get("/v1/memory/users/u"))["facts"], 2);
  // Keys are per tenant: the same key in another tenant is another write.
  auto other = b.client().Post(facts.c_str(), with_key(b, "add-1"), body, "application/json");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 200);
  EXPECT_EQ(other->get_header_value("Idempotent-Replayed"), "");
  EXPECT_EQ(Api::ok(b.get("/v1/memory/users/u"))["facts"], 2);

  // PATCH and DELETE replay their first answer too.
  const int64_t id = json::parse(first->body)["ids"][0];
  const std::string fact = facts + "/" + std::to_string(id);
  const std::string patch = json{{"text", "idem fact one, edited"}}.dump();
  auto p1 = a.client().Patch(fact.c_str(), with_key(a, "edit-1"), patch, "application/json");
  auto p2 = a.client().Patch(fact.c_str(), with_key(a, "edit-1"), patch, "application/json");
  ASSERT_TRUE(p1 && p2);
  EXPECT_EQ(p2->body, p1->body);
  EXPECT_EQ(Api::ok(a.get(fact))["version"], 2);  // one edit, not two
  auto d1 = a.client().Delete(fact.c_str(), with_key(a, "del-1"));
  auto d2 = a.client().Delete(fact.c_str(), with_key(a, "del-1"));
  ASSERT_TRUE(d1 && d2);
  EXPECT_EQ(d1->status, 200);
  EXPECT_EQ(d2->status, 200);  // the first answer, not a 404
  EXPECT_EQ(d2->body, d1->body);
  // A key that is not one.
  EXPECT_EQ(Api::fails(a.client().Post(facts.c_str(), with_key(a, std::string(300, 'k')), body, "application/json"), 400)["param"],
            "Idempotency-Key");
  EXPECT_EQ(Api::fails(a.client().Post(facts.c_str(), with_key(a, "tab\tkey"), body, "application/json"), 400)["param"],
            "Idempotency-Key");
}
