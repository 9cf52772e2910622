// Test support for the server tests with memory: the demo model in an AsyncEngine + HttpServer
// with a MemoryBridge over a FactStore (SQLite in a temporary data dir, or a fresh database on the
// test PostgreSQL server: store_backends.h), on a loopback ephemeral port (optionally behind API
// keys); a client of one tenant; a chat request body.
#pragma once
#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <string>
#include <vector>

#include "memory/retrieval/bm25_retriever.h"
#include "memory/retrieval/combined_retriever.h"
#include "server/memory_bridge.h"
#include "server_http_client.h"
#include "store_backends.h"
#include "test_fact_store_util.h"

namespace inferscale::test_support {

// AsyncEngine + HttpServer with memory; torn down engine first, then the bridge, then the store.
class MemoryServer {
 public:
  // background: written facts' KV is encoded between requests, as `serve` does by default
  // (AsyncEngineOptions::idle_work); off, only on demand.
  // first_idle (background only): the engine thread's first piece of idle work waits for it, so a
  // test can write facts before any background work has run.
  explicit MemoryServer(size_t max_body_bytes, std::shared_ptr<const server::ApiKeys> keys = nullptr,
                        bool background = false, std::shared_future<void> first_idle = {},
                        inferscale::testing::Backend backend = inferscale::testing::Backend::kSqlite)
      : location(backend) {
    store = location.open();
    retriever = std::make_unique<CombinedRetriever>(*store, std::make_unique<Bm25Retriever>(*store));
    MemoryOptions mo;
    mo.default_k = 4;
    mo.default_window = 1;
    mo.kv_dir = dir.path() / "kv";
    bridge = std::make_unique<server::MemoryBridge>(*store, *retriever, TestModel::demo(), mo);
    server::AsyncEngineOptions ao;
    bridge->attach(ao, background);
    if (background && first_idle.valid())
      ao.idle_work = [inner = ao.idle_work, first_idle](Engine& e) {
        first_idle.wait();
        return inner(e);
      };
    engine = std::make_unique<server::AsyncEngine>([] {
      BackendOptions bo;
      bo.block_size = 16;
      bo.num_cache_blocks = 128;
      bo.num_pool_blocks = 128;
      bo.num_threads = 1;
      return TestModel().engine(128, make_cpu_backend(TestModel::demo().config, TestModel::demo().weights, bo));
    }, ao);
    if (background) bridge->set_wake([e = engine.get()] { e->request_idle_work(); });
    server::HttpServerOptions ho;
    ho.host = "127.0.0.1";
    ho.port = 0;
    ho.max_body_bytes = max_body_bytes;
    ho.api_keys = std::move(keys);
    http = std::make_unique<server::HttpServer>(TestModel().served(), *engine, ho, bridge.get());
    port = http->start();
  }
  ~MemoryServer() {
    engine->shutdown();
    http->stop();
  }

  inferscale::testing::TempDir dir;  // KV files
  inferscale::testing::StoreLocation location;
  std::unique_ptr<FactStore> store;
  std::unique_ptr<Retriever> retriever;
  std::unique_ptr<server::MemoryBridge> bridge;
  std::unique_ptr<server::AsyncEngine> engine;
  std::unique_ptr<server::HttpServer> http;
  int port = 0;
};

// A client of one tenant ("" = no header: the default tenant), with `auth` headers (an API key)
// on every request.
struct Api {
  int port;
  std::string tenant;
  httplib::Headers auth = {};

  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(120, 0);
    return c;
  }
  httplib::Headers headers() const {
    httplib::Headers h = auth;
    if (!tenant.empty()) h.emplace("X-InferScale-Tenant", tenant);
    return h;
  }
  httplib::Result get(const std::string& p) const { return client().Get(p.c_str(), headers()); }
  httplib::Result del(const std::string& p) const { return client().Delete(p.c_str(), headers()); }
  httplib::Result post(const std::string& p, const std::string& body) const {
    return client().Post(p.c_str(), headers(), body, "application/json");
  }
  httplib::Result post(const std::string& p, const json& body) const { return post(p, body.dump()); }
  httplib::Result patch(const std::string& p, const json& body) const {
    return client().Patch(p.c_str(), headers(), body.dump(), "application/json");
  }
  httplib::Result put(const std::string& p, const json& body) const {
    return client().Put(p.c_str(), headers(), body.dump(), "application/json");
  }
  // Any method; `body` is sent when not null.
  httplib::Result send(const std::string& method, const std::string& p, const json& body = nullptr) const {
    const std::string b = body.is_null() ? std::string() : body.dump();
    if (method == "GET") return client().Get(p.c_str(), headers());
    if (method == "DELETE") return client().Delete(p.c_str(), headers(), b, "application/json");
    if (method == "PATCH") return client().Patch(p.c_str(), headers(), b, "application/json");
    if (method == "PUT") return client().Put(p.c_str(), headers(), b, "application/json");
    return client().Post(p.c_str(), headers(), b, "application/json");
  }
  // Adds facts (texts) for `user`; returns their ids.
  std::vector<int64_t> add(const std::string& user, const std::vector<std::string>& texts) const {
    json facts = json::array();
    for (const std::string& t : texts) facts.push_back({{"text", t}, {"speaker", user}});
    const json r = ok(post("/v1/memory/users/" + user + "/facts", json{{"facts", facts}}));
    return r["ids"].get<std::vector<int64_t>>();
  }

  static json ok(const httplib::Result& r) {
    if (!r) {
      ADD_FAILURE() << "no response";
      return json::object();
    }
    EXPECT_EQ(r->status, 200) << r->body;
    return json::parse(r->body);
  }
  // The "data" array of a list response, by value: a range-for over `ok(r)["data"]` would iterate
  // a destroyed temporary.
  static json data(const httplib::Result& r) { return ok(r)["data"]; }
  // The error object of a response that must have `status`, after checking its OpenAI shape.
  static json fails(const httplib::Result& r, int status) {
    if (!r) {
      ADD_FAILURE() << "no response";
      return json::object();
    }
    EXPECT_EQ(r->status, status) << r->body;
    const json e = json::parse(r->body).value("error", json::object());
    for (const char* key : {"message", "type", "param", "code"}) EXPECT_TRUE(e.contains(key)) << key << " in " << r->body;
    return e;
  }
};

// A fixture whose test suite shares one MemoryServer (2 MiB bodies), started before its first test.
class MemoryServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { s = new MemoryServer(2u << 20); }
  static void TearDownTestSuite() {
    delete s;
    s = nullptr;
  }
  static Api api(const std::string& tenant = {}) { return Api{s->port, tenant}; }
  static inline MemoryServer* s = nullptr;
};

// A greedy chat request body (system "be brief", then `question`), with `memory` unless null.
inline json chat(const std::string& question, const json& memory, int max_tokens = 8) {
  json body = {{"model", "demo"},
               {"messages", {{{"role", "system"}, {"content", "be brief"}}, {{"role", "user"}, {"content", question}}}},
               {"max_tokens", max_tokens},
               {"temperature", 0},
               {"ignore_eos", true}};
  if (!memory.is_null()) body["memory"] = memory;
  return body;
}

inline std::vector<int64_t> fact_ids(const json& response) {
  std::vector<int64_t> ids;
  for (const json& f : response["memory"]["facts"]) ids.push_back(f["id"]);
  return ids;
}

}  // namespace inferscale::test_support
