// --tensor-parallel-size through the CLI (cli/rank_processes.h): rank 0 and `rank-worker`
// processes on the CPU, the all-reduce a channel sum. The same greedy text as one rank from
// `generate` (the demo model, 2 and 4 ranks) and from `serve` with injected memory (2 ranks); a
// size that does not split the model is a one-line error; the workers leave with the server.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <nlohmann/json.hpp>

#include "cli_process.h"
#include "test_fact_store_util.h"

using namespace inferscale;
using namespace inferscale::test_support;
using nlohmann::json;

namespace {

std::vector<std::string> generate(int tp) {
  return {"generate", "--model", "demo", "--prompt", "tensor parallel ranks", "--max-tokens", "32", "--temperature", "0",
          "--tp", std::to_string(tp)};
}

json post(int port, const std::string& path, const json& body) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60, 0);
  const auto r = c.Post(path.c_str(), body.dump(), "application/json");
  if (!r) throw std::runtime_error("no response from " + path);
  EXPECT_EQ(r->status, 200) << r->body;
  return json::parse(r->body);
}

// A server's greedy answers to three questions about facts it was given, injected.
std::vector<std::string> answers(int port) {
  json facts = json::array();
  for (const char* t : {"Ana keeps bees on the roof", "Ana's sister lives in Lisbon", "Ana rides a red bicycle to work",
                        "the bees made 12 kilos of honey"})
    facts.push_back({{"text", t}});
  post(port, "/v1/memory/users/ana/facts", {{"facts", facts}});
  std::vector<std::string> out;
  for (const char* q : {"Where does her sister live?", "What does Ana keep?", "How does she get to work?"}) {
    const json chat = post(port, "/v1/chat/completions",
                           {{"model", "demo"}, {"max_tokens", 24}, {"temperature", 0},
                            {"messages", {{{"role", "user"}, {"content", q}}}},
                            {"memory", {{"user", "ana"}, {"mode", "inject"}, {"k", 3}}}});
    EXPECT_GE(chat["memory"]["facts"].size(), 1u) << chat.dump();  // BM25: the facts sharing a word
    out.push_back(chat["choices"][0]["message"]["content"]);
  }
  return out;
}

}  // namespace

TEST(CliTensorParallel, GenerateAtTwoAndFourRanksEqualsOne) {
  inferscale::testing::TempDir tmp;
  const CliResult one = run_cli(generate(1), tmp.path(), 120);
  ASSERT_EQ(one.code, 0) << one.err;
  ASSERT_FALSE(one.out.empty());
  for (int tp : {2, 4}) {
    const CliResult n = run_cli(generate(tp), tmp.path(), 120);
    ASSERT_EQ(n.code, 0) << n.err;
    EXPECT_EQ(n.out, one.out) << "tp " << tp;
    EXPECT_NE(n.err.find(std::to_string(tp) + " tensor-parallel ranks: this process and " + std::to_string(tp - 1) +
                         " rank-worker processes"),
              std::string::npos)
        << n.err;
  }
}

TEST(CliTensorParallel, ASizeThatDoesNotSplitTheModelIsAClearError) {
  inferscale::testing::TempDir tmp;
  const CliResult r = run_cli(generate(3), tmp.path(), 60);
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("error: a tensor-parallel size of 3 does not split this model"), std::string::npos) << r.err;
}

TEST(CliTensorParallel, ServeWithInjectedMemoryAtTwoRanksAnswersAsOne) {
  inferscale::testing::TempDir tmp;
  std::vector<std::string> one, two;
  {
    ServeProcess s({"--data-dir", (tmp.path() / "one").string()}, tmp.path(), "one");
    one = answers(s.port());
    s.signal(SIGTERM);
    EXPECT_EQ(s.wait(30), 0) << s.err();
  }
  {
    ServeProcess s({"--data-dir", (tmp.path() / "two").string(), "--tp", "2"}, tmp.path(), "two");
    two = answers(s.port());
    s.signal(SIGTERM);
    EXPECT_EQ(s.wait(30), 0) << s.err();  // after its rank worker left
    EXPECT_NE(s.err().find("2 tensor-parallel ranks"), std::string::npos) << s.err();
  }
  EXPECT_EQ(two, one);
}
