// API keys and tenant isolation end to end (issue 8, parts 1 and 6): a server with memory behind
// keys of two tenants, acme and globex. A table of every route is tried without a key, with a
// wrong key, with globex's key and a tenant header naming acme, and with globex's key on acme's
// data: 401, 401, 403, and 403/404 or globex's own (empty) data, never a byte of acme's; acme's
// data is unchanged afterwards. Also: the three ways of sending a key, memory.tenant against the
// key, the prefix cache and the memory pool per tenant, and a rejected request's connection.
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "server/api_keys.h"
#include "memory_server.h"

using namespace inferscale;
using namespace inferscale::test_support;

namespace {

const std::vector<std::string> kAcmeFacts = {"Acme's Alice adopted a cat named Miso", "Acme's Alice works as a nurse in Oslo"};

// On both store engines (store_backends.h): one server each, made by the first test that needs it.
class ServerAuth : public inferscale::testing::StoreTest {
 protected:
  void SetUp() override {
    skip_without_postgres();
    if (IsSkipped()) return;
    auto& server = servers[GetParam()];
    if (!server) server = make_server(GetParam());
    s = server.get();
  }
  static void TearDownTestSuite() {
    servers.clear();
    keys_dir.reset();
  }
  static std::unique_ptr<MemoryServer> make_server(inferscale::testing::Backend backend) {
    if (!keys_dir) keys_dir = std::make_unique<inferscale::testing::TempDir>();
    const auto file = keys_dir->path() / "keys.txt";
    std::ofstream(file) << "# two tenants, and two more with no data but one test's\nkey-acme acme\nkey-acme-2 acme\n"
                        << "key-charlie charlie\nkey-delta delta\nsha256:"
                        << [] {
                             std::string h;
                             for (unsigned char c : server::sha256("key-globex")) h += fmt::format("{:02x}", c);
                             return h;
                           }()
                        << " globex\n";
    return std::make_unique<MemoryServer>(2u << 20, std::make_shared<server::ApiKeys>(file), false,
                                          std::shared_future<void>{}, backend);
  }
  Api with(httplib::Headers auth, const std::string& tenant = {}) const { return Api{s->port, tenant, std::move(auth)}; }
  Api acme() const { return with({{"Authorization", "Bearer key-acme"}}); }
  Api globex() const { return with({{"Authorization", "Token key-globex"}}); }

  MemoryServer* s = nullptr;
  static std::map<inferscale::testing::Backend, std::unique_ptr<MemoryServer>> servers;
  static std::unique_ptr<inferscale::testing::TempDir> keys_dir;
};
std::map<inferscale::testing::Backend, std::unique_ptr<MemoryServer>> ServerAuth::servers;
std::unique_ptr<inferscale::testing::TempDir> ServerAuth::keys_dir;
INSTANTIATE_STORE_TESTS(ServerAuth);

json completion(const std::string& prompt, const json& memory) {
  json body = {{"model", "demo"}, {"prompt", prompt}, {"max_tokens", 4}, {"temperature", 0}, {"ignore_eos", true}};
  if (!memory.is_null()) body["memory"] = memory;
  return body;
}

// What globex may get on a route that holds acme's data under the same names.
enum class Cross {
  kNotFound,  // 404
  kOwnData,   // 200 with globex's own data (none of acme's)
};

struct Route {
  const char* method;
  std::string path;
  json body;
  Cross cross;
};

}  // namespace

// Every route of the server. A route added to the server belongs here (the Mem0-compatible routes
// too, once merged): the auth layer covers it whatever this table says, the table proves it.
TEST_P(ServerAuth, EveryRouteNeedsAKeyAndKeepsTenantsApart) {
  const Api a = acme();
  const std::vector<int64_t> ids = a.add("alice", kAcmeFacts);
  ASSERT_EQ(ids.size(), 2u);
  const std::string user = "/v1/memory/users/alice";
  const std::string fact = user + "/facts/" + std::to_string(ids[0]);
  const json mem = {{"user", "alice"}, {"k", 4}, {"query", "cat"}};
  const std::vector<Route> routes = {
      {"GET", "/v1/models", nullptr, Cross::kOwnData},
      {"GET", "/v1/models/demo", nullptr, Cross::kOwnData},
      {"GET", "/metrics", nullptr, Cross::kOwnData},
      {"POST", "/v1/chat/completions", chat("What is my cat called?", mem), Cross::kOwnData},
      {"POST", "/v1/completions", completion("My cat is called", mem), Cross::kOwnData},
      {"GET", "/v1/memory/users", nullptr, Cross::kOwnData},
      {"GET", user, nullptr, Cross::kNotFound},
      {"GET", user + "/facts", nullptr, Cross::kNotFound},
      {"GET", fact, nullptr, Cross::kNotFound},
      {"PATCH", fact, json{{"text", "globex was here"}}, Cross::kNotFound},
      {"DELETE", fact, nullptr, Cross::kNotFound},
      {"POST", user + "/search", json{{"query", "cat"}, {"k", 4}}, Cross::kNotFound},
      {"DELETE", user, nullptr, Cross::kNotFound},
      // Mem0's two surfaces (ids are per tenant: globex has no memory with acme's id).
      {"GET", "/memories?user_id=alice", nullptr, Cross::kOwnData},
      {"GET", "/memories/" + std::to_string(ids[0]), nullptr, Cross::kNotFound},
      {"GET", "/memories/" + std::to_string(ids[0]) + "/history", nullptr, Cross::kNotFound},
      {"PUT", "/memories/" + std::to_string(ids[0]), json{{"text", "globex was here"}}, Cross::kNotFound},
      {"DELETE", "/memories/" + std::to_string(ids[0]), nullptr, Cross::kNotFound},
      {"POST", "/search", json{{"query", "cat"}, {"user_id", "alice"}}, Cross::kOwnData},
      {"GET", "/v1/ping/", nullptr, Cross::kOwnData},
      {"POST", "/v3/memories/search/", json{{"query", "cat"}, {"filters", {{"user_id", "alice"}}}}, Cross::kOwnData},
      {"POST", "/v3/memories/", json{{"filters", {{"user_id", "alice"}}}}, Cross::kOwnData},
      {"GET", "/v1/memories/" + std::to_string(ids[0]) + "/", nullptr, Cross::kNotFound},
      {"GET", "/v1/memories/" + std::to_string(ids[0]) + "/history/", nullptr, Cross::kNotFound},
      {"DELETE", "/v1/memories/" + std::to_string(ids[0]) + "/", nullptr, Cross::kNotFound},
      {"DELETE", "/v1/memories/?user_id=alice", nullptr, Cross::kOwnData},
      {"GET", "/v1/nowhere", nullptr, Cross::kNotFound},  // unknown routes are behind the layer too
      // Last: a write under the same user name creates globex's own alice, apart from acme's.
      {"POST", user + "/facts", json{{"facts", {{{"text", "Globex's Alice owns a bike"}}}}}, Cross::kOwnData},
  };
  const Api anon = with({}), wrong = with({{"Authorization", "Bearer key-nope"}}), spoof = with(globex().auth, "acme");
  for (const Route& r : routes) {
    const std::string what = std::string(r.method) + " " + r.path;
    for (const auto& [client, code] : {std::pair{&anon, "missing_api_key"}, std::pair{&wrong, "invalid_api_key"}}) {
      const httplib::Result res = client->send(r.method, r.path, r.body);
      EXPECT_EQ(Api::fails(res, 401)["code"], code) << what;
      if (res) EXPECT_EQ(res->get_header_value("WWW-Authenticate"), "Bearer realm=\"inferscale\"") << what;
    }
    const json e = Api::fails(spoof.send(r.method, r.path, r.body), 403);
    EXPECT_EQ(e["code"], "tenant_mismatch") << what;
    EXPECT_EQ(e["param"], "X-InferScale-Tenant") << what;

    const httplib::Result res = globex().send(r.method, r.path, r.body);
    ASSERT_TRUE(res) << what;
    EXPECT_EQ(res->status, r.cross == Cross::kNotFound ? 404 : 200) << what << ": " << res->body;
    if (r.path != "/metrics") EXPECT_NE(res->get_header_value("Content-Type").find("application/json"), std::string::npos) << what;
    for (const std::string& t : kAcmeFacts) EXPECT_EQ(res->body.find(t), std::string::npos) << what << " leaked: " << res->body;
    if (r.method == std::string("POST") && r.path.find("completions") != std::string::npos)
      EXPECT_TRUE(json::parse(res->body)["memory"]["facts"].empty()) << what;
  }
  // acme's data is untouched, and its own key still reaches it.
  EXPECT_EQ(s->store->count("acme", "alice"), 2u);
  EXPECT_EQ(Api::ok(a.get(fact))["text"], kAcmeFacts[0]);
  EXPECT_EQ(Api::ok(a.get(fact))["version"], 1);
  EXPECT_EQ(Api::ok(a.get(user))["facts"], 2);
  EXPECT_EQ(s->store->count("globex", "alice"), 1u);
  EXPECT_EQ(Api::ok(globex().get(user + "/facts/1"))["text"], "Globex's Alice owns a bike");  // globex's own id 1
  const json hits = Api::data(a.post(user + "/search", json{{"query", "cat"}}));
  ASSERT_EQ(hits.size(), 1u);
  EXPECT_EQ(hits[0]["text"], kAcmeFacts[0]);
}

TEST_P(ServerAuth, HealthIsOpenAndTheThreeKeyFormsWork) {
  const Api anon = with({});
  EXPECT_EQ(Api::ok(anon.get("/health"))["status"], "ok");
  EXPECT_EQ(Api::fails(anon.post("/health", json::object()), 401)["code"], "missing_api_key");
  for (const httplib::Headers& h : std::vector<httplib::Headers>{{{"Authorization", "Bearer key-acme"}},
                                                                  {{"authorization", "bearer key-acme"}},
                                                                  {{"Authorization", "Token key-acme"}},
                                                                  {{"X-API-Key", "key-acme"}},
                                                                  {{"Authorization", "Bearer key-acme-2"}}}) {
    const Api c = with(h);
    EXPECT_EQ(Api::ok(c.get("/v1/models"))["data"][0]["id"], "demo") << h.begin()->second;
    EXPECT_EQ(Api::ok(c.get("/v1/memory/users"))["object"], "list");
  }
  // The key's tenant with its own name in the header is fine; the sha256 line's key works.
  EXPECT_EQ(Api::ok(with(acme().auth, "acme").get("/v1/memory/users"))["object"], "list");
  EXPECT_EQ(Api::ok(with({{"X-API-Key", "key-globex"}}, "globex").get("/v1/models"))["object"], "list");
  // Two different keys at once.
  EXPECT_EQ(Api::fails(with({{"Authorization", "Bearer key-acme"}, {"X-API-Key", "key-globex"}}).get("/v1/models"), 401)["code"],
            "invalid_api_key");
}

TEST_P(ServerAuth, MemoryTenantMustBeTheKeys) {
  const Api a = acme();
  a.add("mt", {"mt likes green tea"});
  const json e = Api::fails(globex().post("/v1/chat/completions", chat("tea?", {{"user", "mt"}, {"tenant", "acme"}})), 403);
  EXPECT_EQ(e["code"], "tenant_mismatch");
  EXPECT_EQ(e["param"], "memory.tenant");
  EXPECT_EQ(Api::fails(globex().post("/v1/completions", completion("tea", {{"user", "mt"}, {"tenant", "acme"}})), 403)["code"],
            "tenant_mismatch");
  const json r = Api::ok(a.post("/v1/chat/completions", chat("tea?", {{"user", "mt"}, {"tenant", "acme"}})));
  ASSERT_EQ(r["memory"]["facts"].size(), 1u);
  EXPECT_EQ(r["memory"]["facts"][0]["text"], "mt likes green tea");
}

// The tenant salts every prefix-cache block (vLLM's cache_salt): a tenant's second identical
// prompt hits its own blocks, another tenant's never does.
TEST_P(ServerAuth, PrefixCacheBlocksAreNeverSharedAcrossTenants) {
  // A system prompt no other test sends, so no block of it is cached yet in any tenant.
  json body = chat("Please tell me everything you know", nullptr, 2);
  body["messages"][0]["content"] = "You know the history of the northern lighthouse keepers, one by one, in detail";
  auto cached = [&](const Api& c) {
    const json r = Api::ok(c.post("/v1/chat/completions", body));
    return r["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
  };
  EXPECT_EQ(cached(acme()), 0);
  EXPECT_GT(cached(acme()), 32);
  EXPECT_GT(cached(with({{"X-API-Key", "key-acme-2"}})), 32);  // another key of the same tenant
  EXPECT_EQ(cached(globex()), 0);
  EXPECT_GT(cached(globex()), 32);
}

// Fact ids count per tenant, so two fresh tenants both have a fact 1 of a user "same"; the pool
// and the KV files are keyed by the store-wide fact key, so each is served its own KV.
TEST_P(ServerAuth, SameFactIdsInjectEachTenantsOwnFacts) {
  const Api charlie = with({{"Authorization", "Bearer key-charlie"}}), delta = with({{"X-API-Key", "key-delta"}});
  const std::vector<int64_t> a = charlie.add("same", {"The secret word of charlie is tangerine"});
  const std::vector<int64_t> g = delta.add("same", {"The secret word of delta is marmalade"});
  ASSERT_EQ(a, std::vector<int64_t>{1});
  ASSERT_EQ(g, std::vector<int64_t>{1});  // the same id in both tenants
  auto kv_files = [this] {
    const auto kv = s->dir.path() / "kv";  // made with the first KV file
    return std::filesystem::exists(kv) ? static_cast<size_t>(std::distance(std::filesystem::directory_iterator(kv),
                                                                           std::filesystem::directory_iterator()))
                                       : size_t{0};
  };
  const size_t files_before = kv_files();
  for (const auto& [client, text] : {std::pair{charlie, "The secret word of charlie is tangerine"},
                                     std::pair{delta, "The secret word of delta is marmalade"}}) {
    for (int i = 0; i < 2; ++i) {  // encoded, then from the pool
      const json r = Api::ok(client.post("/v1/chat/completions", chat("secret word?", {{"user", "same"}, {"k", 2}, {"w", 0}})));
      ASSERT_EQ(r["memory"]["facts"].size(), 1u);
      EXPECT_EQ(r["memory"]["facts"][0]["id"], a[0]);
      EXPECT_EQ(r["memory"]["facts"][0]["text"], text);
      EXPECT_EQ(r["memory"]["mode"], "inject");
      EXPECT_EQ(r["memory"]["encoded"], i == 0 ? 1 : 0) << text;
    }
  }
  EXPECT_EQ(kv_files(), files_before + 2);  // one KV file per tenant's fact
}

// A rejected request's body is never read, so its connection is closed after the 401 (its bytes
// must not be taken for a next request).
TEST_P(ServerAuth, ARejectedRequestClosesItsConnection) {
  RawConnection c(s->port);
  // The body is itself a well-formed request: it must not be served.
  const std::string inner = "GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer key-acme\r\n\r\n";
  c.send_post("/v1/memory/users", inner);
  const std::string got = c.read_until("\r\n\r\n");
  EXPECT_NE(got.find("HTTP/1.1 401"), std::string::npos) << got;
  EXPECT_NE(got.find("Connection: close"), std::string::npos) << got;
  EXPECT_TRUE(c.closed_within(5));
}

// Idempotency keys are the client's own names, so two tenants may pick the same one: each
// tenant's write is stored and answered on its own, never replayed from (or refused because of)
// the other tenant's record.
TEST_P(ServerAuth, IdempotencyKeysArePerTenant) {
  const httplib::Headers idem = {{"Idempotency-Key", "same-key-in-two-tenants"}};
  auto client = [&](const char* key) {
    httplib::Headers h = idem;
    h.emplace("Authorization", std::string("Bearer ") + key);
    return with(h);
  };
  const std::string path = "/v1/memory/users/idem/facts";
  const json a = Api::ok(client("key-acme").post(path, json{{"facts", {{{"text", "acme's idem fact"}}}}}));
  const json g = Api::ok(client("key-globex").post(path, json{{"facts", {{{"text", "globex's idem fact"}}}}}));
  ASSERT_EQ(a["ids"].size(), 1u);
  ASSERT_EQ(g["ids"].size(), 1u);
  EXPECT_EQ(s->store->count("acme", "idem"), 1u);
  EXPECT_EQ(s->store->count("globex", "idem"), 1u);
  const std::string fact = path + "/" + std::to_string(g["ids"][0].get<int64_t>());
  EXPECT_EQ(Api::ok(globex().get(fact))["text"], "globex's idem fact");
  // A retry within a tenant is still a replay: nothing more is written.
  EXPECT_EQ(Api::ok(client("key-globex").post(path, json{{"facts", {{{"text", "globex's idem fact"}}}}}))["ids"], g["ids"]);
  EXPECT_EQ(s->store->count("globex", "idem"), 1u);
}
