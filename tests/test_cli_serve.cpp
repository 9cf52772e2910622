// `inferscale serve` as a real process, next to other real processes: another CLI writing to the
// same data directory, a second server on the same port, shutdown on SIGTERM. Loopback only,
// ephemeral ports; every wait is bounded.
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include "cli_process.h"
#include "server_http_client.h"
#include "test_fact_store_util.h"

using namespace inferscale;
using namespace inferscale::test_support;
using nlohmann::json;

namespace {

httplib::Client client(int port) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(10, 0);
  c.set_read_timeout(60, 0);
  return c;
}

json ok(const httplib::Result& r) {
  if (!r) throw std::runtime_error("no response");
  EXPECT_EQ(r->status, 200) << r->body;
  return json::parse(r->body);
}

std::vector<std::string> search_texts(int port, const std::string& user, const std::string& query) {
  std::vector<std::string> out;
  const json hits = ok(client(port).Post(("/v1/memory/users/" + user + "/search").c_str(),
                                         json{{"query", query}, {"k", 10}}.dump(), "application/json"));
  for (const json& h : hits["data"]) out.push_back(h["text"]);
  return out;
}

bool has(const std::vector<std::string>& v, const std::string& s) { return std::find(v.begin(), v.end(), s) != v.end(); }

class CliServe : public ::testing::Test {
 protected:
  inferscale::testing::TempDir tmp;
  std::string data = (tmp.path() / "data").string();
};

}  // namespace

// Issue 11, defect 1: the README's flow, serve and then `memory add` from another process on the
// same data directory. The server must see the other process's facts (count, search, a chat's
// memory) and keep taking writes.
TEST_F(CliServe, AnotherProcessWritingTheDataDirIsSeenAndDoesNotLockTheServer) {
  ServeProcess server({"--data-dir", data, "--memory-k", "10", "--window", "0"}, tmp.path());
  const int port = server.port();
  auto post_fact = [&](const std::string& text) {
    return client(port).Post("/v1/memory/users/u/facts", json{{"facts", {{{"text", text}}}}}.dump(), "application/json");
  };
  ok(post_fact("the server wrote about a red bicycle"));
  EXPECT_EQ(ok(client(port).Get("/v1/memory/users/u"))["facts"], 1);

  const CliResult add = run_cli({"memory", "add", "--data-dir", data, "--user", "u", "--text", "the cli wrote about a green kayak"},
                                tmp.path(), 120);
  ASSERT_EQ(add.code, 0) << add.err;
  const int64_t cli_id = std::stoll(add.out);

  EXPECT_EQ(ok(client(port).Get("/v1/memory/users/u"))["facts"], 2);
  EXPECT_TRUE(has(search_texts(port, "u", "green kayak"), "the cli wrote about a green kayak"));
  const json chat = ok(client(port).Post(
      "/v1/chat/completions",
      json{{"model", "demo"}, {"max_tokens", 2}, {"messages", {{{"role", "user"}, {"content", "kayak?"}}}},
           {"memory", {{"user", "u"}, {"query", "green kayak"}}}}
          .dump(),
      "application/json"));
  bool placed = false;
  for (const json& f : chat["memory"]["facts"]) placed = placed || f["id"] == cli_id;
  EXPECT_TRUE(placed) << chat["memory"].dump();
  // The server still writes (it used to answer 503 "database is locked" from here on).
  ok(post_fact("the server wrote again"));
  EXPECT_EQ(ok(client(port).Get("/v1/memory/users/u"))["facts"], 3);

  // A delete by the other process reaches the server's index too.
  const CliResult del = run_cli({"memory", "delete", "--data-dir", data, "--user", "u", "--id", std::to_string(cli_id)},
                                tmp.path(), 120);
  ASSERT_EQ(del.code, 0) << del.err;
  EXPECT_FALSE(has(search_texts(port, "u", "green kayak"), "the cli wrote about a green kayak"));
  EXPECT_EQ(ok(client(port).Get("/v1/memory/users/u"))["facts"], 2);

  server.signal(SIGTERM);
  EXPECT_EQ(server.wait(30), 0) << server.err();
}

// Issue 11, defect 3: cpp-httplib's default SO_REUSEPORT let a second server share the port (the
// kernel then splits connections between them). The second one must fail at start instead.
TEST_F(CliServe, ASecondServerOnAPortInUseFailsAtStart) {
  ServeProcess first({}, tmp.path(), "first");
  const std::string port = std::to_string(first.port());
  ChildProcess second({"serve", "--model", "demo", "--host", "127.0.0.1", "--port", port}, tmp.path(), "second");
  const auto code = second.wait(60);
  ASSERT_TRUE(code.has_value()) << "the second server is still running: " << second.err();
  EXPECT_EQ(*code, 1) << second.err();
  EXPECT_NE(second.err().find("error: port " + port + " is already in use"), std::string::npos) << second.err();
  EXPECT_EQ(ok(client(first.port()).Get("/health"))["status"], "ok");  // the first one is untouched
}

// Issue 11, defect 6: SIGTERM with streams running past --shutdown-timeout and idle keep-alive
// connections open. The process must exit within the timeout plus a second (it used to wait
// another keep-alive timeout for the idle connections), and each cut stream ends with an error
// event followed by [DONE].
TEST_F(CliServe, ShutdownEndsWithinTheTimeoutAndCutStreamsEndWithDone) {
  ServeProcess server({"--threads", "1", "--shutdown-timeout", "1", "--keep-alive-timeout", "30"}, tmp.path());
  const int port = server.port();
  std::vector<std::unique_ptr<RawConnection>> idle;
  for (int i = 0; i < 3; ++i) {
    idle.push_back(std::make_unique<RawConnection>(port));
    idle.back()->send_raw("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    EXPECT_NE(idle.back()->read_until("\"ok\"}").find("200 OK"), std::string::npos);  // then kept alive
  }
  std::vector<std::unique_ptr<RawConnection>> streams;
  for (int i = 0; i < 2; ++i) {
    streams.push_back(std::make_unique<RawConnection>(port));
    streams.back()->send_post("/v1/completions", json{{"model", "demo"}, {"prompt", "a long story " + std::to_string(i)},
                                                      {"max_tokens", 4000}, {"ignore_eos", true}, {"stream", true}}
                                                     .dump());
  }
  std::vector<std::string> got;
  for (auto& s : streams) got.push_back(s->read_until("data: "));  // both are streaming now
  const auto t0 = std::chrono::steady_clock::now();
  server.signal(SIGTERM);
  const auto code = server.wait(10);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(code.has_value()) << server.err();
  EXPECT_EQ(*code, 0) << server.err();
  EXPECT_LT(took, 1.0 + 1.0) << server.err();
  for (size_t i = 0; i < streams.size(); ++i) {
    got[i] += streams[i]->read_until("\r\n0\r\n\r\n");  // the chunked body's end (or the close)
    EXPECT_NE(got[i].find("\"code\":\"shutting_down\""), std::string::npos) << got[i].substr(std::max<size_t>(got[i].size(), 400) - 400);
    const size_t done = got[i].rfind("data: [DONE]");
    ASSERT_NE(done, std::string::npos) << got[i].substr(std::max<size_t>(got[i].size(), 400) - 400);
    EXPECT_GT(done, got[i].find("shutting_down"));
  }
}

// `serve --served-model-name NAME`: the name clients send and /v1/models lists; the model's own
// name is then a 404 like any other; a name with a control character fails the start.
TEST_F(CliServe, ServedModelNameIsTheNameClientsUse) {
  ServeProcess server({"--served-model-name", "gpt-4o-mini"}, tmp.path());
  const json models = ok(client(server.port()).Get("/v1/models"));
  ASSERT_EQ(models["data"].size(), 1u);
  EXPECT_EQ(models["data"][0]["id"], "gpt-4o-mini");
  auto complete = [&](const std::string& model) {
    const json body = {{"model", model}, {"prompt", "hello"}, {"max_tokens", 2}, {"temperature", 0}};
    const auto r = client(server.port()).Post("/v1/completions", body.dump(), "application/json");
    return r ? r->status : -1;
  };
  EXPECT_EQ(complete("gpt-4o-mini"), 200);
  EXPECT_EQ(complete("demo"), 404);
  server.signal(SIGTERM);
  EXPECT_EQ(server.wait(30), 0) << server.err();
}

// `--enforce-eager` (vLLM's flag: no CUDA graphs) is a model option of every command; on the CPU
// backend it changes nothing, so the greedy text is the same with and without it.
TEST_F(CliServe, EnforceEagerIsAcceptedAndKeepsTheOutput) {
  const std::vector<std::string> gen = {"generate", "--model", "demo", "--device", "cpu", "--prompt", "hello",
                                        "--max-tokens", "6", "--temperature", "0"};
  std::vector<std::string> eager = gen;
  eager.push_back("--enforce-eager");
  const CliResult a = run_cli(gen, tmp.path(), 60), b = run_cli(eager, tmp.path(), 60);
  ASSERT_EQ(a.code, 0) << a.err;
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_FALSE(a.out.empty());
}

// `--kv-cache-dtype fp8` (the paged KV cache in E4M3 with scales) is a model option of every
// command and runs on the CPU backend; a value it does not know is refused by name.
TEST_F(CliServe, KvCacheDtypeFp8RunsAndABadValueIsRefused) {
  const std::vector<std::string> gen = {"generate", "--model", "demo", "--device", "cpu", "--prompt", "hello",
                                        "--max-tokens", "6", "--temperature", "0", "--kv-cache-dtype"};
  std::vector<std::string> fp8 = gen, bad = gen;
  fp8.push_back("fp8");
  bad.push_back("fp4");
  const CliResult a = run_cli(fp8, tmp.path(), 60), b = run_cli(bad, tmp.path(), 60);
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_FALSE(a.out.empty());
  EXPECT_NE(b.code, 0);
  EXPECT_NE(b.err.find("--kv-cache-dtype"), std::string::npos) << b.err;
}

// `--quantization fp8` is a model option of every command: on the CPU backend the projections'
// numbers are emulated (said in the log), so the command runs; `none` runs, and a value it does
// not know is refused by name.
TEST_F(CliServe, QuantizationFp8RunsEmulatedOnTheCpuAndABadValueIsRefused) {
  const std::vector<std::string> gen = {"generate", "--model", "demo", "--device", "cpu", "--prompt", "hello",
                                        "--max-tokens", "4", "--temperature", "0", "--quantization"};
  std::vector<std::string> fp8 = gen, none = gen, bad = gen;
  fp8.push_back("fp8");
  none.push_back("none");
  bad.push_back("int4");
  const CliResult a = run_cli(fp8, tmp.path(), 60), b = run_cli(none, tmp.path(), 60), c = run_cli(bad, tmp.path(), 60);
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_FALSE(a.out.empty());
  EXPECT_NE(a.err.find("--quantization fp8 on the CPU backend"), std::string::npos) << a.err;
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_FALSE(b.out.empty());
  EXPECT_NE(c.code, 0);
  EXPECT_NE(c.err.find("--quantization"), std::string::npos) << c.err;
}

// Issue 8, part 1: `serve --api-keys FILE`; SIGHUP reloads the file, and a bad file keeps the keys
// in use (the log says why); the server goes on serving throughout.
TEST_F(CliServe, ApiKeysReloadOnSighupAndABadFileKeepsTheOldKeys) {
  const auto file = tmp.path() / "keys.txt";
  std::ofstream(file) << "key-one acme\n";
  ServeProcess server({"--api-keys", file.string()}, tmp.path());
  auto status = [&](const std::string& key) {
    const auto r = client(server.port()).Get("/v1/models", {{"Authorization", "Bearer " + key}});
    return r ? r->status : -1;
  };
  EXPECT_NE(server.err().find("API keys: 1 key(s) from"), std::string::npos) << server.err();
  EXPECT_EQ(status("key-one"), 200);
  EXPECT_EQ(status("key-two"), 401);
  EXPECT_EQ(ok(client(server.port()).Get("/health"))["status"], "ok");  // no key needed

  std::ofstream(file, std::ios::trunc) << "key-two acme\n";
  server.signal(SIGHUP);
  server.wait_for_stderr(std::regex("API keys: reloaded .*: 1 key"), 30);
  EXPECT_EQ(status("key-one"), 401);
  EXPECT_EQ(status("key-two"), 200);

  std::ofstream(file, std::ios::trunc) << "key-three acme\nnot a valid line\n";
  server.signal(SIGHUP);
  server.wait_for_stderr(std::regex("reload failed, the 1 key\\(s\\) in use stay: .*keys.txt:2"), 30);
  EXPECT_EQ(status("key-two"), 200);
  EXPECT_EQ(status("key-three"), 401);

  server.signal(SIGTERM);
  EXPECT_EQ(server.wait(30), 0) << server.err();
}

TEST_F(CliServe, ABadKeyFileFailsTheStartAndAnOpenPublicAddressIsWarnedAbout) {
  const auto file = tmp.path() / "bad.txt";
  std::ofstream(file) << "only-a-key\n";
  const CliResult bad = run_cli({"serve", "--model", "demo", "--port", "0", "--api-keys", file.string()}, tmp.path(), 60);
  EXPECT_EQ(bad.code, 1) << bad.err;
  EXPECT_NE(bad.err.find("bad.txt:1: expected 'KEY TENANT'"), std::string::npos) << bad.err;

  // Not loopback and no keys: it serves, with a warning (the port is ephemeral; nothing connects).
  ChildProcess open({"serve", "--model", "demo", "--host", "0.0.0.0", "--port", "0"}, tmp.path(), "open");
  open.wait_for_stderr(std::regex("serving '[^']*' at http://0\\.0\\.0\\.0:\\d+/v1"), 120);
  EXPECT_NE(open.err().find("without API keys: anyone who can reach it"), std::string::npos) << open.err();
  open.signal(SIGTERM);
  EXPECT_EQ(open.wait(30), 0);
  // Loopback without keys: no warning.
  ServeProcess local({}, tmp.path(), "local");
  EXPECT_EQ(local.err().find("without API keys"), std::string::npos) << local.err();
}
