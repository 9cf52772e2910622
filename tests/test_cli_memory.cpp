// `inferscale memory ...` end to end: the built binary is run as a child process and its exit
// code, stdout and stderr are checked, including `search --json` and the error exits.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "backend/backend.h"
#include "memory/store/fact_store.h"
#include "memory/retrieval/model_embedder.h"
#include "memory/retrieval/vector_retriever.h"
#include "model/model.h"
#include "cli_process.h"
#include "test_fact_store_util.h"

using namespace inferscale;
using nlohmann::json;
using inferscale::test_support::CliResult;
using inferscale::test_support::run_cli;

namespace {

class CliMemory : public ::testing::Test {
 protected:
  inferscale::testing::TempDir tmp;
  std::string data = (tmp.path() / "data").string();

  // Runs `inferscale <args...>` with stdout and stderr captured in files.
  CliResult run(const std::vector<std::string>& args) { return run_cli(args, tmp.path()); }

  // A run that must succeed.
  std::string ok(std::vector<std::string> args) {
    const CliResult r = run(args);
    EXPECT_EQ(r.code, 0) << "stderr: " << r.err;
    return r.out;
  }

  // A run that must fail cleanly: a non-zero exit that is neither a crash (signal) nor an
  // internal error (70), and an error naming the problem (one line for our own errors).
  void fails(std::vector<std::string> args, const std::string& needle) {
    const CliResult r = run(args);
    EXPECT_NE(r.code, 0) << "stdout: " << r.out;
    EXPECT_NE(r.code, 70) << "internal error: " << r.err;
    EXPECT_LT(r.code, 128) << "crash: " << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << "stderr: " << r.err;
    if (r.err.rfind("error: ", 0) == 0) EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }

  std::string write(const std::string& name, const std::string& text) {
    const auto p = tmp.path() / name;
    std::ofstream(p) << text;
    return p.string();
  }

  json search(const std::string& user, const std::string& query, int k, const std::string& tenant = "default") {
    return json::parse(ok({"memory", "search", "--data-dir", data, "--tenant", tenant, "--user", user, "--query", query,
                           "--top-k", std::to_string(k), "--json"}));
  }
};

}  // namespace

TEST_F(CliMemory, AddListSearchJsonDelete) {
  const std::string id1 = ok({"memory", "add", "--data-dir", data, "--user", "alice", "--text",
                              "Alice adopted a cat named Miso", "--speaker", "Alice", "--date", "2024-03-02"});
  const std::string id2 = ok({"memory", "add", "--data-dir", data, "--user", "alice", "--text",
                              "Alice works as a nurse in Oslo", "--metadata", R"({"topic":"job"})"});
  ok({"memory", "add", "--data-dir", data, "--user", "bob", "--text", "Bob also has a cat"});
  EXPECT_EQ(std::stoll(id2), std::stoll(id1) + 1);

  const json hits = search("alice", "what is the name of the cat", 5);
  ASSERT_TRUE(hits.is_array());
  ASSERT_EQ(hits.size(), 1u);  // bob's cat is not alice's
  EXPECT_EQ(hits[0]["id"], std::stoll(id1));
  EXPECT_EQ(hits[0]["text"], "Alice adopted a cat named Miso");
  EXPECT_EQ(hits[0]["source"]["speaker"], "Alice");
  EXPECT_GT(hits[0]["score"].get<double>(), 0.0);
  for (const char* key : {"id", "score", "text", "source"}) EXPECT_TRUE(hits[0].contains(key)) << key;

  const std::string plain = ok({"memory", "search", "--data-dir", data, "--user", "alice", "--query", "nurse Oslo"});
  EXPECT_NE(plain.find("Alice works as a nurse in Oslo"), std::string::npos) << plain;

  const json listed = json::parse(ok({"memory", "list", "--data-dir", data, "--user", "alice", "--json"}));
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed[0]["date"], "2024-03-02");
  EXPECT_EQ(listed[0]["date_epoch"], 1709337600);
  EXPECT_EQ(listed[1]["metadata"]["topic"], "job");
  EXPECT_EQ(listed[1]["version"], 1);
  const CliResult page = run({"memory", "list", "--data-dir", data, "--user", "alice", "--limit", "1"});
  EXPECT_EQ(page.code, 0);
  EXPECT_NE(page.out.find("Miso"), std::string::npos);
  EXPECT_EQ(page.out.find("nurse"), std::string::npos);
  EXPECT_NE(page.err.find("--after " + id1.substr(0, id1.size() - 1)), std::string::npos) << page.err;

  ok({"memory", "delete", "--data-dir", data, "--user", "alice", "--id", id1.substr(0, id1.size() - 1)});
  EXPECT_EQ(search("alice", "cat", 5).size(), 0u);
  EXPECT_NE(ok({"memory", "delete", "--data-dir", data, "--user", "alice", "--all"}).find("deleted 1 facts"),
            std::string::npos);
  EXPECT_EQ(ok({"memory", "list", "--data-dir", data, "--user", "alice"}), "");
  EXPECT_EQ(search("bob", "cat", 5).size(), 1u);
}

TEST_F(CliMemory, ImportJsonArrayAndJsonLines) {
  const std::string arr = write("facts.json", R"([
    {"text": "Sam ran the Berlin marathon", "speaker": "Sam", "date": "2023-09-24"},
    {"text": "Sam's sister lives in Lisbon", "source": {"conversation": "chat-7", "turn": "t3"}, "metadata": {"k": 1}},
    {"text": "Sam prefers tea over coffee", "vector": [0.1, 0.2]}
  ])");
  EXPECT_NE(ok({"memory", "import", "--data-dir", data, "--user", "sam", arr}).find("imported 3 facts"), std::string::npos);
  const std::string lines = write("facts.jsonl",
                                  "{\"text\": \"Sam trains every Sunday\"}\n\n{\"text\": \"Sam owns a bike\", \"source\": \"notes\"}\n");
  EXPECT_NE(ok({"memory", "import", "--data-dir", data, "--user", "sam", lines}).find("imported 2 facts"), std::string::npos);

  const json hits = search("sam", "sister in Lisbon", 2);
  ASSERT_GE(hits.size(), 1u);
  EXPECT_EQ(hits[0]["text"], "Sam's sister lives in Lisbon");
  EXPECT_EQ(hits[0]["source"], json({{"conversation", "chat-7"}, {"session", nullptr}, {"turn", "t3"}, {"speaker", nullptr}}));
  EXPECT_EQ(search("sam", "marathon", 5)[0]["date"], "2023-09-24");
  const json top = search("sam", "Sam", 3);  // every fact matches: exactly k, descending
  ASSERT_EQ(top.size(), 3u);
  EXPECT_GE(top[0]["score"].get<double>(), top[1]["score"].get<double>());
  EXPECT_GE(top[1]["score"].get<double>(), top[2]["score"].get<double>());

  auto store = FactStore::open(data, FactStoreOptions{false});
  EXPECT_EQ(store->count("default", "sam"), 5u);
  const EmbeddingMatrix client = store->embeddings("default", "sam", kClientEmbedder);
  EXPECT_EQ(client.data, (std::vector<float>{0.1f, 0.2f}));

  // --query-vector searches the imported vectors (only the tea fact has one).
  const json by_vec = json::parse(ok({"memory", "search", "--data-dir", data, "--user", "sam", "--query-vector",
                                      "[1, 1]", "--json"}));
  ASSERT_EQ(by_vec.size(), 1u);
  EXPECT_EQ(by_vec[0]["text"], "Sam prefers tea over coffee");
  EXPECT_NEAR(by_vec[0]["score"].get<double>(), 0.3, 1e-6);
  fails({"memory", "search", "--data-dir", data, "--user", "sam", "--query-vector", "[1, 2, 3]"}, "dim");
  fails({"memory", "search", "--data-dir", data, "--user", "sam", "--query-vector", "tea"}, "--query-vector");
  fails({"memory", "search", "--data-dir", data, "--user", "sam"}, "--query or --query-vector");
}

TEST_F(CliMemory, ImportLocomoWithProgressWindowAndReplace) {
  const std::string fixture = std::string(INFERSCALE_FIXTURES) + "/locomo_mini.json";
  const CliResult r = run({"memory", "import-locomo", fixture, "--data-dir", data, "--window", "5"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("imported 7 turns of 2 conversations"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("7/7"), std::string::npos) << r.err;  // the final progress line (not a TTY: plain lines)
  EXPECT_EQ(r.err.find('\r'), std::string::npos);

  // The turn that matches best, the turn after it in its session (neighbour expansion lends it
  // half that turn's score, more than the other cello turn matches by itself), then the other.
  const json hits = search("mini-1", "started learning cello", 5);
  ASSERT_EQ(hits.size(), 3u);
  EXPECT_EQ(hits[0]["source"], json({{"conversation", "mini-1"}, {"session", "session_1"}, {"turn", "D1:1"}, {"speaker", "Ada"}}));
  EXPECT_EQ(hits[0]["date"], "9:15 am on 3 March, 2022");
  EXPECT_EQ(hits[1]["source"]["turn"], "D1:2");
  EXPECT_EQ(hits[2]["source"]["turn"], "D2:1");
  EXPECT_EQ(json::parse(ok({"memory", "search", "--data-dir", data, "--user", "mini-1", "--query", "started learning cello",
                            "--retrieval-neighbours", "0", "--json"}))
                .size(),
            2u);
  EXPECT_EQ(search("mini-2", "cello", 5).size(), 0u);

  {
    auto store = FactStore::open(data, FactStoreOptions{false});
    EXPECT_EQ(store->get_setting("kv.window"), "5");
    EXPECT_EQ(store->users(), (std::vector<UserRef>{{"default", "mini-1"}, {"default", "mini-2"}}));
    const auto facts = store->list("default", "mini-1");
    ASSERT_EQ(facts.size(), 6u);
    // Turns in session order (1, 2, 10), so the window of D10:1 is D1:2, D2:1.
    std::vector<std::string> turns;
    for (const auto& f : store->window("default", "mini-1", facts[3].id, 2)) turns.push_back(f.source.turn);
    EXPECT_EQ(facts[3].source.turn, "D10:1");
    EXPECT_EQ(turns, (std::vector<std::string>{"D1:2", "D2:1"}));
    EXPECT_EQ(json::parse(facts[1].metadata)["blip_caption"], "a photo of a red bicycle");
    EXPECT_EQ(facts[0].timestamp_epoch, 1646298900);  // 2022-03-03T09:15:00Z
  }
  fails({"memory", "import-locomo", fixture, "--data-dir", data}, "user 'mini-1' already has 6 facts; pass --replace");
  ok({"memory", "import-locomo", fixture, "--data-dir", data, "--replace"});
  auto store = FactStore::open(data, FactStoreOptions{false});
  EXPECT_EQ(store->count("default", "mini-1"), 6u);
  EXPECT_EQ(store->count("default", "mini-2"), 1u);
  EXPECT_EQ(store->get_setting("kv.window"), "5");
}

TEST_F(CliMemory, TenantsAreSeparate) {
  ok({"memory", "add", "--data-dir", data, "--tenant", "acme", "--user", "u", "--text", "acme secret plan"});
  EXPECT_EQ(search("u", "secret plan", 5).size(), 0u);
  EXPECT_EQ(search("u", "secret plan", 5, "acme").size(), 1u);
  EXPECT_NE(ok({"memory", "users", "--data-dir", data}).find("acme\tu\t1"), std::string::npos);
}

TEST_F(CliMemory, SearchWithDemoEmbedderIsDenseAndStoresVectors) {
  const std::vector<std::string> texts = {"Alice adopted a cat named Miso", "Alice works as a nurse in Oslo",
                                          "Alice's brother lives in Lisbon"};
  for (const auto& t : texts) ok({"memory", "add", "--data-dir", data, "--user", "alice", "--text", t});
  ok({"memory", "add", "--data-dir", data, "--user", "bob", "--text", "Bob also has a cat"});
  auto dense = [&](const std::string& query, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"memory", "search", "--data-dir", data, "--user", "alice", "--query", query,
                                     "--top-k", "5", "--json", "--embedder", "demo", "--retrieval", "dense"};
    args.insert(args.end(), extra.begin(), extra.end());
    return json::parse(ok(args));
  };
  // Every fact of alice (dense ranks them all), none of bob's; the query equal to a fact's text
  // has cosine 1 with it, the maximum.
  const json hits = dense(texts[1]);
  ASSERT_EQ(hits.size(), 3u);
  EXPECT_EQ(hits[0]["text"], texts[1]);
  EXPECT_NEAR(hits[0]["score"].get<double>(), 1.0, 1e-5);
  for (size_t i = 1; i < hits.size(); ++i) {
    EXPECT_LE(hits[i]["score"].get<double>(), hits[i - 1]["score"].get<double>());
    EXPECT_GE(hits[i]["score"].get<double>(), -1.0);
  }
  // The vectors were stored under the embedder's name for the searched user only, so the next
  // search embeds just the query.
  {
    auto store = FactStore::open(data, FactStoreOptions{false});
    auto m = std::make_shared<const Model>(load_model("demo"));
    ModelEmbedderOptions o;
    o.eos_id = default_embedder_eos(*m->tokenizer, o.pooling);
    BackendOptions bo;
    bo.num_cache_blocks = embedder_cache_blocks(o, bo.block_size);
    const ModelEmbedder emb(m, make_cpu_backend(m->config, m->weights, bo), o);
    EXPECT_EQ(store->embeddings("default", "alice", vector_space(emb)).ids.size(), 3u);
    EXPECT_EQ(store->embeddings("default", "bob", vector_space(emb)).ids.size(), 0u);
  }
  EXPECT_EQ(dense(texts[2])[0]["text"], texts[2]);
  EXPECT_EQ(dense(texts[0], {"--embedder-pooling", "mean"})[0]["text"], texts[0]);
  const CliResult bad = run({"memory", "search", "--data-dir", data, "--user", "alice", "--query", "q", "--embedder", "demo",
                          "--embedder-eos", "<|no-such-token|>"});
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.err.find("not a token"), std::string::npos) << bad.err;

  // With --embedder the default is hybrid: RRF scores (1/61 + 1/61 at the top at most), every
  // fact ranked by the dense half; the query equal to a fact ranks it first in both.
  std::vector<std::string> hybrid_args = {"memory", "search", "--data-dir", data, "--user", "alice", "--query",
                                          texts[1], "--top-k", "5", "--json", "--embedder", "demo"};
  const json fused = json::parse(ok(hybrid_args));
  ASSERT_EQ(fused.size(), 3u);
  EXPECT_EQ(fused[0]["text"], texts[1]);
  EXPECT_NEAR(fused[0]["score"].get<double>(), 2.0 / 61.0, 1e-12);
  hybrid_args.insert(hybrid_args.end(), {"--retrieval", "bm25"});
  EXPECT_EQ(json::parse(ok(hybrid_args))[0]["text"], texts[1]);  // BM25 scores, embedder not loaded
  fails({"memory", "search", "--data-dir", data, "--user", "alice", "--query", "q", "--retrieval", "hybrid"},
        "--retrieval hybrid needs an embedding model (--embedder)");
  fails({"memory", "search", "--data-dir", data, "--user", "alice", "--query", "q", "--retrieval", "sparse"},
        "--retrieval");

  // import-locomo --embedder stores every imported turn's vector.
  const std::string fixture = std::string(INFERSCALE_FIXTURES) + "/locomo_mini.json";
  const std::string out = ok({"memory", "import-locomo", fixture, "--data-dir", data + "-locomo", "--embedder", "demo"});
  EXPECT_NE(out.find("embedded 7 facts with dense:demo:last:l2:"), std::string::npos) << out;
}

// The real sentence encoder end to end through the CLI (WordPiece from tokenizer.json, the BERT
// forward, the sentence-transformers pooling, hybrid retrieval): a question that shares no word
// with its answer finds it by meaning, where BM25 finds nothing.
TEST_F(CliMemory, MiniLmFindsAFactByMeaning) {
  const std::string minilm = std::string(INFERSCALE_SOURCE_DIR) + "/models/all-MiniLM-L6-v2";
  if (!std::filesystem::exists(minilm + "/model.safetensors"))
    GTEST_SKIP() << "all-MiniLM-L6-v2 not fetched (scripts/fetch_models.sh): " << minilm;
  for (const char* t : {"Alice adopted a kitten named Miso", "Alice works as a nurse in Oslo",
                        "Alice ran the Berlin marathon in 2019"})
    ok({"memory", "add", "--data-dir", data, "--user", "alice", "--text", t});
  const std::string query = "Which pet does she have?";
  EXPECT_TRUE(search("alice", query, 3).empty()) << "BM25 shares no word with the facts";
  for (const char* mode : {"dense", "hybrid"}) {
    const json hits = json::parse(ok({"memory", "search", "--data-dir", data, "--user", "alice", "--query", query,
                                      "--top-k", "3", "--json", "--embedder", minilm, "--retrieval", mode}));
    ASSERT_FALSE(hits.empty()) << mode;
    EXPECT_EQ(hits[0]["text"], "Alice adopted a kitten named Miso") << mode;
  }
}

TEST_F(CliMemory, ErrorsAreOneLineAndNonZero) {
  fails({"memory", "search", "--data-dir", data, "--user", "u", "--query", "q"}, "error: no memory store in");
  fails({"memory", "list", "--data-dir", data, "--user", "u"}, "no memory store");
  fails({"memory", "add", "--data-dir", data, "--user", "u", "--text", "  "}, "error: text is empty");
  fails({"memory", "add", "--data-dir", data, "--user", "u", "--text", "x", "--metadata", "{bad"}, "metadata is not valid JSON");
  ok({"memory", "add", "--data-dir", data, "--user", "u", "--text", "a fact"});
  fails({"memory", "delete", "--data-dir", data, "--user", "u", "--id", "999"}, "error: fact 999 not found for user 'u'");
  fails({"memory", "delete", "--data-dir", data, "--user", "u"}, "exactly one of --id ID or --all");
  fails({"memory", "delete", "--data-dir", data, "--user", "u", "--id", "1", "--all"}, "exactly one of");
  fails({"memory", "import", "--data-dir", data, "--user", "u", (tmp.path() / "missing.json").string()}, "missing.json");
  fails({"memory", "import", "--data-dir", data, "--user", "u", write("bad.jsonl", "{\"text\": \"ok\"}\n{\"txt\": \"typo\"}\n")},
        "bad.jsonl line 2: unknown key \"txt\"");
  fails({"memory", "import", "--data-dir", data, "--user", "u", write("bad.json", "[{\"text\": \"ok\"}, {\"speaker\": \"x\"}]")},
        "bad.json entry 2: missing \"text\"");
  fails({"memory", "import", "--data-dir", data, "--user", "u", write("broken.json", "[{\"text\": ")}, "broken.json: not valid JSON");
  fails({"memory", "import-locomo", write("notlocomo.json", "{\"a\": 1}"), "--data-dir", data}, "expected a list of LoCoMo samples");
  fails({"memory", "search", "--data-dir", data, "--user", "u", "--query", "q", "--top-k", "0"},
        "error: --top-k must be in [1, 256], got 0");
  fails({"memory", "search", "--data-dir", data, "--user", "u", "--query", "q", "--top-k", "100000"},
        "error: --top-k must be in [1, 256], got 100000");  // the server's limit
  fails({"memory", "import-locomo", "x.json", "--data-dir", data, "--window", "-3"}, "--window must be 0 or more");
  fails({"memory", "search", "--data-dir", data, "--user", "u"}, "--query");
  fails({"memory"}, "");
  // Failed imports are all or nothing.
  auto store = FactStore::open(data, FactStoreOptions{false});
  EXPECT_EQ(store->count("default", "u"), 1u);
}

// --conversation imports only the named conversations (the README's quick example: one of ten).
TEST_F(CliMemory, ImportLocomoOfOneConversation) {
  const std::string fixture = std::string(INFERSCALE_FIXTURES) + "/locomo_mini.json";
  const std::string out = ok({"memory", "import-locomo", fixture, "--data-dir", data, "--conversation", "mini-2"});
  EXPECT_NE(out.find("imported 1 turns of 1 conversations"), std::string::npos) << out;
  {
    auto store = FactStore::open(data, FactStoreOptions{false});
    EXPECT_EQ(store->users(), (std::vector<UserRef>{{"default", "mini-2"}}));
  }
  fails({"memory", "import-locomo", fixture, "--data-dir", data, "--conversation", "conv-99"},
        "--conversation conv-99: " + fixture + " has no conversation with that sample_id");
}
