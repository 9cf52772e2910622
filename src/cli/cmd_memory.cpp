// `inferscale memory ...`: manage the persistent fact store from the command line.
//
//   memory add           --data-dir D --user U --text T [--speaker S --date DATE --source C --metadata JSON]
//   memory import        --data-dir D --user U FILE          (JSON array or JSON Lines of fact records)
//   memory import-locomo FILE --data-dir D [--window W] [--replace] [--model M ...]  (--model: encode KV files)
//                        [--embedder E ...]                                     (--embedder: store vectors)
//   memory search        --data-dir D --user U --query Q [--top-k K] [--json] [--embedder E ...]
//                        [--retrieval bm25|dense|hybrid]    (default: BM25; hybrid with --embedder)
//                        or --query-vector '[0.1, ...]' (against the vectors imported with the facts)
//   memory list          --data-dir D --user U [--after ID] [--limit N] [--json]
//   memory delete        --data-dir D --user U (--id ID | --all)
//   memory users         --data-dir D
// Every subcommand takes --tenant (default "default"). Errors are thrown as inferscale::Error and
// printed as one line by main().
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "cli/memory_options.h"
#include "cli/model_options.h"
#include "engine/engine.h"
#include "memory/memory_service.h"
#include "memory/retrieval/bm25_retriever.h"
#include "memory/formats/fact_json.h"
#include "memory/store/fact_store.h"
#include "memory/formats/locomo.h"
#include "util/check.h"
#include "util/mapped_file.h"
#include "util/progress.h"

namespace inferscale::cli {

namespace {

struct MemoryCmdArgs {
  std::string data_dir;
  std::string store;  // --store: a PostgreSQL URL instead of --data-dir
  std::string tenant = kDefaultTenant;
  std::string user;
  // add
  std::string text, speaker, date, source, metadata;
  // import, import-locomo
  std::string file;
  int64_t window = 0;
  bool window_given = false;
  bool replace = false;
  std::vector<std::string> conversations;  // import-locomo: only these sample_ids (default: all)
  // import-locomo --model: encode every imported fact's KV (files under DATA_DIR/kv)
  ModelArgs model;
  bool encode = false;
  // import-locomo, search: --embedder (dense retrieval; vectors kept in the store)
  EmbedderArgs embedder;
  std::string fact_template = MemoryOptions{}.fact_template;
  // search, list
  std::string query;
  std::string query_vector;  // JSON array
  int64_t top_k = 10;
  bool json = false;
  int64_t after = 0;
  int64_t limit = 100;
  // delete
  int64_t id = 0;
  bool all = false;
};

// The options every subcommand shares; `user` only where the command acts on one user.
CLI::App* subcommand(CLI::App* memory, const char* name, const char* help, MemoryCmdArgs& a, bool user) {
  CLI::App* sub = memory->add_subcommand(name, help);
  add_store_option(*sub, a.store, sub->add_option("--data-dir", a.data_dir, "Directory of the memory store (SQLite)"));
  sub->add_option("--tenant", a.tenant, "Tenant of the user")->capture_default_str();
  if (user) sub->add_option("--user", a.user, "User whose memory to use")->required();
  return sub;
}

std::unique_ptr<FactStore> open_store(const MemoryCmdArgs& a, bool create) {
  return FactStore::open_at(store_location(a.data_dir, a.store, true), FactStoreOptions{create});
}

std::string read_file(const std::string& path) {
  const auto f = MappedFile::open(path);
  return std::string(reinterpret_cast<const char*>(f->data()), f->size());
}

void run_add(const MemoryCmdArgs& a) {
  auto store = open_store(a, true);
  NewFact f;
  f.text = a.text;
  f.timestamp = a.date;
  f.source.conversation = a.source;
  f.source.speaker = a.speaker;
  f.metadata = a.metadata;
  std::printf("%lld\n", static_cast<long long>(store->add_fact(a.tenant, a.user, f)));
}

void run_import(const MemoryCmdArgs& a) {
  const std::vector<NewFact> facts = parse_fact_records(read_file(a.file), a.file);
  IS_REQUIRE(!facts.empty(), kInvalidInput, "{}: no facts to import", a.file);
  auto store = open_store(a, true);
  const auto ids = store->add_facts(a.tenant, a.user, facts);  // one transaction: all or nothing
  std::printf("imported %zu facts for user %s (ids %lld..%lld)\n", ids.size(), a.user.c_str(),
              static_cast<long long>(ids.front()), static_cast<long long>(ids.back()));
}

// Encodes the KV of every imported turn (window w) with the model, into KV files.
void encode_locomo_kv(const MemoryCmdArgs& a, FactStore& store, const std::vector<LocomoConversation>& convs) {
  const Model model = load_model_from_args(a.model);
  Engine engine(make_backend(a.model, model), model.tokenizer, engine_options(a.model));
  Bm25Retriever retriever(store);
  MemoryArgs margs;
  margs.data_dir = a.data_dir;
  margs.store = a.store;
  margs.window = static_cast<int32_t>(a.window);
  margs.kv_files = true;
  margs.fact_template = a.fact_template;
  MemoryService service(store, retriever, model, engine.backend(), engine.blocks(), memory_options(margs, store));
  int64_t total = 0;
  for (const auto& c : convs) total += static_cast<int64_t>(store.count(a.tenant, c.sample_id));
  Progress::Options popts;
  popts.unit = "facts";
  Progress progress("encode KV", total, popts);
  const auto t0 = std::chrono::steady_clock::now();
  int64_t encoded = 0;
  for (const auto& c : convs) {
    std::vector<int64_t> ids;
    for (ListOptions page;;) {
      const auto facts = store.list(a.tenant, c.sample_id, page);
      for (const Fact& f : facts) ids.push_back(f.id);
      if (facts.size() < page.limit) break;
      page.after_id = facts.back().id;
    }
    encoded += service.encode_facts(a.tenant, c.sample_id, ids, static_cast<int32_t>(a.window), &progress);
  }
  progress.finish();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  uintmax_t bytes = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(a.data_dir) / "kv")) bytes += e.file_size();
  std::printf("encoded KV of %lld facts (window %lld) in %.2f s (%.1f facts/s, %.0f tokens/s through the model); "
              "KV files %.1f MiB\n",
              static_cast<long long>(encoded), static_cast<long long>(a.window), s, s > 0 ? encoded / s : 0.0,
              s > 0 ? static_cast<double>(service.tokens_encoded()) / s : 0.0,
              static_cast<double>(bytes) / (1 << 20));
}

// Each conversation becomes a user named by its sample_id, each turn a fact (one transaction per
// conversation, so a conversation is imported whole or not at all).
void run_import_locomo(const MemoryCmdArgs& a) {
  IS_REQUIRE(a.window >= 0, kInvalidInput, "--window must be 0 or more, got {}", a.window);
  IS_REQUIRE(a.window <= MemoryRequest::kMaxWindow, kInvalidInput, "--window must be at most {} (memory.w's limit), got {}",
             MemoryRequest::kMaxWindow, a.window);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<LocomoConversation> convs = load_locomo(a.file);
  if (!a.conversations.empty()) {
    for (const std::string& id : a.conversations)
      IS_REQUIRE(std::any_of(convs.begin(), convs.end(), [&](const LocomoConversation& c) { return c.sample_id == id; }),
                 kInvalidInput, "--conversation {}: {} has no conversation with that sample_id", id, a.file);
    std::erase_if(convs, [&](const LocomoConversation& c) {
      return std::find(a.conversations.begin(), a.conversations.end(), c.sample_id) == a.conversations.end();
    });
  }
  auto store = open_store(a, true);
  if (!a.replace) {
    for (const auto& c : convs) {
      const size_t have = store->count(a.tenant, c.sample_id);
      IS_REQUIRE(have == 0, kInvalidInput, "user '{}' already has {} facts; pass --replace to import it again",
                 c.sample_id, have);
    }
  }
  if (a.window_given) store->set_setting(kWindowSetting, std::to_string(a.window));
  size_t total = 0, skipped = 0;
  for (const auto& c : convs) total += c.num_turns();
  Progress::Options popts;
  popts.unit = "facts";
  Progress progress("import-locomo", static_cast<int64_t>(total), popts);
  size_t imported = 0;
  for (const auto& c : convs) {
    if (a.replace) store->remove_user(a.tenant, c.sample_id);
    imported += store->add_turns(a.tenant, c.sample_id, c.sample_id, locomo_turns(c, &skipped)).size();
    progress.add(static_cast<int64_t>(c.num_turns()));
  }
  progress.finish();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("imported %zu turns of %zu conversations in %.2f s (%.0f facts/s)%s\n", imported, convs.size(), s,
              s > 0 ? static_cast<double>(imported) / s : 0.0,
              skipped > 0 ? fmt::format("; skipped {} empty turns", skipped).c_str() : "");
  if (a.encode) encode_locomo_kv(a, *store, convs);
  if (!a.embedder.model.empty()) {
    const auto t1 = std::chrono::steady_clock::now();
    EmbedderArgs dense = a.embedder;
    dense.retrieval = "dense";  // only the vectors matter here: no BM25 index
    const auto retriever = make_retriever(dense, *store, gpu_selected(a.model));
    const size_t n = embed_all_missing(*retriever, *store);
    const double es = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    std::printf("embedded %zu facts with %s in %.2f s\n", n, retriever->name().c_str(), es);
  }
}

std::vector<float> parse_query_vector(const std::string& text) {
  // Not JSON: a discarded value, which floats_from_json refuses as "not a list".
  std::vector<float> v = floats_from_json(nlohmann::json::parse(text, nullptr, false), "--query-vector");
  IS_REQUIRE(!v.empty(), kInvalidInput, "--query-vector must be a non-empty JSON array of numbers");
  return v;
}

void run_search(const MemoryCmdArgs& a) {
  IS_REQUIRE(a.top_k >= 1 && a.top_k <= MemoryRequest::kMaxK, kInvalidInput, "--top-k must be in [1, {}], got {}",
             MemoryRequest::kMaxK, a.top_k);
  auto store = open_store(a, false);
  // Dense: embeds this user's facts that have no vector yet (kept in the store), then searches.
  const auto retriever = make_retriever(a.embedder, *store);
  const std::vector<ScoredFact> hits =
      a.query_vector.empty() ? retriever->search(a.tenant, a.user, a.query, static_cast<size_t>(a.top_k))
                             : retriever->search_vector(a.tenant, a.user, parse_query_vector(a.query_vector),
                                                        static_cast<size_t>(a.top_k));
  const std::vector<FactHit> found = fetch_hits(*store, a.tenant, a.user, hits);
  if (a.json) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const FactHit& hit : found) {
      nlohmann::ordered_json h = {{"id", hit.fact.id},
                          {"score", hit.score},
                          {"text", hit.fact.text},
                          {"source", source_to_json(hit.fact.source)}};
      if (!hit.fact.timestamp.empty()) h["date"] = hit.fact.timestamp;
      out.push_back(std::move(h));
    }
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  if (found.empty()) std::fprintf(stderr, "no facts of user '%s' match\n", a.user.c_str());
  for (size_t i = 0; i < found.size(); ++i) {
    const Fact& f = found[i].fact;
    std::string who = f.source.turn;
    if (!f.source.speaker.empty()) who += (who.empty() ? "" : " ") + f.source.speaker;
    std::printf("%2zu. [%lld] %.4f  %s%s%s\n", i + 1, static_cast<long long>(f.id), found[i].score, who.c_str(),
                who.empty() ? "" : ": ", f.text.c_str());
  }
}

void run_list(const MemoryCmdArgs& a) {
  IS_REQUIRE(a.limit >= 1, kInvalidInput, "--limit must be at least 1, got {}", a.limit);
  auto store = open_store(a, false);
  const std::vector<Fact> facts =
      store->list(a.tenant, a.user, ListOptions{a.after, static_cast<size_t>(a.limit)});
  if (a.json) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const Fact& f : facts) out.push_back(fact_to_json(f));
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    for (const Fact& f : facts) {
      std::string line = fmt::format("[{}] v{} ", f.id, f.version);
      if (!f.timestamp.empty()) line += fmt::format("({}) ", f.timestamp);
      if (!f.source.speaker.empty()) line += f.source.speaker + ": ";
      std::printf("%s%s\n", line.c_str(), f.text.c_str());
    }
  }
  if (facts.size() == static_cast<size_t>(a.limit))
    std::fprintf(stderr, "more facts may follow: --after %lld\n", static_cast<long long>(facts.back().id));
}

void run_delete(const MemoryCmdArgs& a) {
  IS_REQUIRE((a.id != 0) != a.all, kInvalidInput, "memory delete needs exactly one of --id ID or --all");
  IS_REQUIRE(a.all || a.id > 0, kInvalidInput, "--id must be a positive fact id, got {}", a.id);
  auto store = open_store(a, false);
  if (a.all) {
    const size_t n = store->remove_user(a.tenant, a.user);
    std::printf("deleted %zu facts of user %s\n", n, a.user.c_str());
  } else {
    store->remove(a.tenant, a.user, a.id);
    std::printf("deleted fact %lld\n", static_cast<long long>(a.id));
  }
}

void run_users(const MemoryCmdArgs& a) {
  auto store = open_store(a, false);
  for (const UserRef& u : store->users())
    std::printf("%s\t%s\t%zu\n", u.tenant.c_str(), u.user.c_str(), store->count(u.tenant, u.user));
}

}  // namespace

void register_memory(CLI::App& app) {
  auto a = std::make_shared<MemoryCmdArgs>();
  CLI::App* memory = app.add_subcommand("memory", "Manage per-user memory: add, import, search, list, delete facts");
  memory->require_subcommand(1);

  CLI::App* add = subcommand(memory, "add", "Add one fact", *a, true);
  add->add_option("--text", a->text, "The fact")->required();
  add->add_option("--speaker", a->speaker, "Who said it");
  add->add_option("--date", a->date, "When (e.g. 2023-05-08 or '1:56 pm on 8 May, 2023')");
  add->add_option("--source", a->source, "Conversation or document it came from");
  add->add_option("--metadata", a->metadata, "Metadata as JSON text");
  add->callback([a] { run_add(*a); });

  CLI::App* imp = subcommand(memory, "import", "Import facts from a JSON array or JSON Lines file", *a, true);
  imp->add_option("file", a->file, "File of {text, speaker?, date?, source?, metadata?} records")->required();
  imp->callback([a] { run_import(*a); });

  CLI::App* loc = subcommand(memory, "import-locomo", "Import LoCoMo conversations (one user per sample_id)", *a, false);
  loc->add_option("file", a->file, "locomo10.json")->required();
  CLI::Option* window = loc->add_option("--window", a->window, "Encoding window w (preceding turns) to record for KV encoding");
  add_model_options(*loc, a->model);
  loc->add_option("--fact-template", a->fact_template, "how a fact is rendered for encoding")->capture_default_str();
  loc->add_flag("--replace", a->replace, "Delete the conversations' users first when they already have facts");
  loc->add_option("--conversation", a->conversations, "Import only this conversation (a sample_id such as conv-26); repeatable");
  add_embedder_options(*loc, a->embedder);
  loc->callback([a, window, loc] {
    a->window_given = window->count() > 0;
    a->encode = loc->get_option("--model")->count() > 0;
    run_import_locomo(*a);
  });

  CLI::App* search = subcommand(memory, "search", "Top-k facts of a user for a query (BM25; hybrid or dense with --embedder)", *a, true);
  auto* query = search->add_option("--query", a->query, "Query text");
  auto* vec = search->add_option("--query-vector", a->query_vector,
                                 "A JSON array: search the vectors imported with the facts instead of text");
  query->excludes(vec);
  search->callback([a, query, vec] {
    IS_REQUIRE(query->count() + vec->count() == 1, kInvalidInput, "memory search needs --query or --query-vector");
    run_search(*a);
  });
  search->add_option("--top-k", a->top_k, "How many facts, 1 to 256 (the server's limit)")->capture_default_str();
  search->add_flag("--json", a->json, "Print a JSON array of {id, score, text, source}");
  add_embedder_options(*search, a->embedder);
  add_retrieval_option(*search, a->embedder);

  CLI::App* list = subcommand(memory, "list", "List a user's facts by id", *a, true);
  list->add_option("--after", a->after, "Start after this fact id")->capture_default_str();
  list->add_option("--limit", a->limit, "Page size")->capture_default_str();
  list->add_flag("--json", a->json, "Print JSON");
  list->callback([a] { run_list(*a); });

  CLI::App* del = subcommand(memory, "delete", "Delete one fact (--id) or all of a user's facts (--all)", *a, true);
  del->add_option("--id", a->id, "Fact id");
  del->add_flag("--all", a->all, "Delete every fact of the user");
  del->callback([a] { run_delete(*a); });

  CLI::App* users = subcommand(memory, "users", "List users with facts (tenant, user, count)", *a, false);
  users->callback([a] { run_users(*a); });
}

}  // namespace inferscale::cli
