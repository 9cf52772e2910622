#include "cli/memory_options.h"

#include "cli/model_options.h"

#include <spdlog/spdlog.h>

#ifdef INFERSCALE_HAS_CUDA
#include "memory/cuda/cuda_vector_index.h"
#endif
#include "memory/retrieval/bm25_retriever.h"
#include "memory/retrieval/combined_retriever.h"
#include "memory/retrieval/dense_retriever.h"
#include "memory/retrieval/hybrid_retriever.h"
#include "memory/retrieval/model_embedder.h"
#include "memory/store/postgres.h"
#include "memory/retrieval/sentence_transformers.h"
#include "model/model.h"
#include "util/check.h"
#include "util/progress.h"

namespace inferscale::cli {

void add_embedder_options(CLI::App& cmd, EmbedderArgs& a) {
  cmd.add_option("--embedder", a.model, "dense retrieval with this embedding model (demo, HF directory, .gguf); default BM25");
  cmd.add_option("--embedder-pooling", a.pooling, "auto (the model's sentence-transformers config, else last) | last | mean | cls")
      ->capture_default_str()->check(CLI::IsMember({"auto", "last", "mean", "cls"}));
  cmd.add_option("--embedder-eos", a.eos, "auto | none | a token appended to every embedded text")->capture_default_str();
  cmd.add_option("--embedder-instruct", a.instruct, "query task: queries become 'Instruct: TASK\\nQuery: QUERY'");
  cmd.add_option("--embedder-max-tokens", a.max_tokens,
                 "texts are truncated to this many tokens (and to a sentence-transformers model's max_seq_length)")
      ->capture_default_str()->check(CLI::Range(2, 1 << 20));
}

void add_retrieval_option(CLI::App& cmd, EmbedderArgs& a) {
  cmd.add_option("--retrieval", a.retrieval,
                 "how text queries rank facts: bm25 | dense | hybrid (RRF of both, k_rrf 60, depth 100); auto: hybrid "
                 "with --embedder, else bm25")
      ->capture_default_str()->check(CLI::IsMember({"auto", "bm25", "dense", "hybrid"}));
  cmd.add_option("--retrieval-neighbours", a.neighbours,
                 "the weight a retrieved conversation turn lends the turns beside it (same session); 0: off; a "
                 "request's memory.neighbours overrides it")
      ->capture_default_str()->check(CLI::Range(0.0, 1.0));
}

RetrievalMode retrieval_mode(const EmbedderArgs& a) {
  if (a.retrieval == "auto") return a.model.empty() ? RetrievalMode::kBm25 : RetrievalMode::kHybrid;
  if (a.retrieval == "bm25") return RetrievalMode::kBm25;
  IS_REQUIRE(a.retrieval == "dense" || a.retrieval == "hybrid", kInvalidInput,
             "--retrieval must be auto, bm25, dense or hybrid, got '{}'", a.retrieval);
  IS_REQUIRE(!a.model.empty(), kInvalidInput, "--retrieval {} needs an embedding model (--embedder)", a.retrieval);
  return a.retrieval == "dense" ? RetrievalMode::kDense : RetrievalMode::kHybrid;
}

namespace {

// The DenseRetriever inside `r` (plain, or a hybrid's dense half), or null.
DenseRetriever* dense_part(Retriever& r) {
  if (auto* hybrid = dynamic_cast<HybridRetriever*>(&r)) return dynamic_cast<DenseRetriever*>(&hybrid->dense());
  return dynamic_cast<DenseRetriever*>(&r);
}

std::shared_ptr<ModelEmbedder> load_embedder(const EmbedderArgs& a, bool cuda) {
  auto model = std::make_shared<const Model>(load_model(a.model));
  const Tokenizer& tok = *model->tokenizer;
  ModelEmbedderOptions o;
  // A sentence-transformers directory (all-MiniLM-L6-v2, bge, e5, gte) says how it pools,
  // whether it normalizes and how long its inputs may be.
  const std::optional<SentenceTransformersConfig> st = read_sentence_transformers_config(a.model);
  if (a.pooling == "auto") {
    o.pooling = st ? st->pooling : Pooling::kLastToken;
  } else {
    o.pooling = a.pooling == "mean" ? Pooling::kMean : a.pooling == "cls" ? Pooling::kCls : Pooling::kLastToken;
  }
  o.max_tokens = a.max_tokens;
  if (st && st->max_seq_length > 0) o.max_tokens = std::min(o.max_tokens, st->max_seq_length);
  if (st && !st->normalize) spdlog::info("embedder {}: no Normalize module; vectors are L2-normalized anyway (cosine search)", a.model);
  if (a.eos == "auto") {
    o.eos_id = default_embedder_eos(tok, o.pooling);
  } else if (a.eos != "none") {
    o.eos_id = tok.token_to_id(a.eos);
    IS_REQUIRE(o.eos_id.has_value(), kInvalidInput, "--embedder-eos: '{}' is not a token of the embedder's vocabulary", a.eos);
  }
  if (!a.instruct.empty()) o.query_prefix = "Instruct: " + a.instruct + "\nQuery: ";
  BackendOptions bo;
  bo.num_cache_blocks = embedder_cache_blocks(o, bo.block_size);
  auto be = make_helper_backend(cuda, *model, bo);
  const std::string backend_name = be->name();
  auto emb = std::make_shared<ModelEmbedder>(model, std::move(be), o);
  spdlog::info("embedder {} ({} layers, dim {}{}), pooling {}, eos {}, max {} tokens, {} backend", emb->name(),
               model->config.num_layers, emb->dim(), model->random_weights ? ", random weights: vectors are meaningless" : "",
               pooling_name(o.pooling), o.eos_id ? tok.id_to_token(*o.eos_id) : "none", o.max_tokens, backend_name);
  return emb;
}

}  // namespace

std::unique_ptr<Retriever> make_retriever(const EmbedderArgs& a, FactStore& store, bool gpu) {
  VectorIndexFactory make_index = make_cpu_vector_index;
#ifdef INFERSCALE_HAS_CUDA
  if (gpu) make_index = [](int32_t dim) { return make_cuda_vector_index(dim); };
#endif
  const RetrievalMode mode = retrieval_mode(a);
  if (mode == RetrievalMode::kBm25 && !a.model.empty())
    spdlog::warn("--retrieval bm25: the embedder {} is not loaded and its vectors are not kept up to date", a.model);
  // BM25 with neighbour expansion, alone or as hybrid retrieval's lexical side (neighbour_retriever.h).
  auto lexical = [&] {
    return std::make_unique<NeighbourRetriever>(store, std::make_unique<Bm25Retriever>(store), a.neighbours);
  };
  std::unique_ptr<Retriever> text;
  if (mode == RetrievalMode::kBm25) {
    text = lexical();
  } else {
    auto dense = std::make_unique<DenseRetriever>(store, load_embedder(a, gpu), 32, make_index);
    if (mode == RetrievalMode::kDense) {
      text = std::move(dense);
    } else {
      text = std::make_unique<HybridRetriever>(lexical(), std::move(dense));
    }
  }
  spdlog::info("retrieval: {}", text->name());
  return std::make_unique<CombinedRetriever>(store, std::move(text), std::move(make_index));
}

size_t embed_all_missing(Retriever& retriever, const FactStore& store) {
  Retriever* text = &retriever;
  if (auto* combined = dynamic_cast<CombinedRetriever*>(text)) text = &combined->text();
  DenseRetriever* dense = dense_part(*text);
  if (!dense) return 0;
  int64_t missing = 0;
  for (const UserRef& u : store.users()) missing += static_cast<int64_t>(dense->missing(u.tenant, u.user));
  if (missing == 0) return dense->refresh_all();
  Progress::Options po;
  po.unit = "facts";
  Progress progress("embed", missing, po);
  const size_t stored = dense->refresh_all(&progress);
  progress.finish();
  return stored;
}

void add_store_option(CLI::App& cmd, std::string& store, CLI::Option* data_dir) {
  auto* s = cmd.add_option("--store", store,
                           "memory store in PostgreSQL, shared by replicas: postgresql://USER[:PASS]@HOST[:PORT]/DB "
                           "(instead of --data-dir's SQLite)")
                ->envname("INFERSCALE_STORE");
  s->excludes(data_dir);
  data_dir->excludes(s);
}

std::string store_location(const std::string& data_dir, const std::string& store, bool required) {
  if (!store.empty()) {
    IS_REQUIRE(postgres::is_url(store), kInvalidInput,
               "--store must be a postgresql:// URL (postgresql://USER@HOST:PORT/DB), not '{}'; a local store is --data-dir",
               store.substr(0, 80));
    return store;
  }
  IS_REQUIRE(!required || !data_dir.empty(), kInvalidInput, "no memory store: give --data-dir DIR or --store postgresql://...");
  return data_dir;
}

bool memory_enabled(const MemoryArgs& a) { return !a.data_dir.empty() || !a.store.empty(); }

void add_memory_options(CLI::App& cmd, MemoryArgs& a, bool required) {
  auto* d = cmd.add_option("--data-dir", a.data_dir,
                           required ? "memory data directory (SQLite)" : "memory data directory (SQLite; enables memory)");
  add_store_option(cmd, a.store, d);
  cmd.add_option("--memory-k", a.k, "facts retrieved per request by default")->capture_default_str()->check(CLI::Range(0, MemoryRequest::kMaxK));
  cmd.add_option("--window,-w", a.window, "Context-Window Encoding: turns encoded before each fact (default: the data dir's)")
      ->check(CLI::Range(0, MemoryRequest::kMaxWindow));
  cmd.add_option("--memory-recompute", a.recompute,
                 "inject: recompute the first N tokens of each fact at serving time (EPIC-style; default for memory.recompute)")
      ->capture_default_str()->check(CLI::Range(0, MemoryRequest::kMaxRecompute));
  cmd.add_option("--memory-recompute-last", a.recompute_last,
                 "inject: recompute the last M placed facts (nearest the question) whole (default for memory.recompute_last)")
      ->capture_default_str()->check(CLI::Range(0, MemoryRequest::kMaxRecomputeLast));
  cmd.add_option("--memory-recompute-attention", a.recompute_attention,
                 "inject: recompute this fraction of the facts' tokens, those the question attends to most in a probe "
                 "pass (default for memory.recompute_attention)")
      ->capture_default_str()->check(CLI::Range(0.0, 1.0));
  cmd.add_flag("--kv-files", a.kv_files, "also keep fact KV in files under DATA_DIR/kv, so a restart need not re-encode");
  cmd.add_option("--kv-dir", a.kv_dir,
                 "keep fact KV files in this directory (implies --kv-files): one that replicas share lets a user's "
                 "facts encoded on one replica load on another");
  cmd.add_option("--fact-template", a.fact_template, "how a fact is rendered ({date}, {speaker}, {text})")->capture_default_str();
  cmd.add_option("--memory-header", a.header, "the memory block's text before the facts ({user}: the user's name)")
      ->capture_default_str();
  cmd.add_option("--memory-footer", a.footer, "the memory block's text after the facts ({user}: the user's name)")
      ->capture_default_str();
  cmd.add_flag("--sink", a.sink, "encode each fact after a BOS token (its KV discarded)");
  add_embedder_options(cmd, a.embedder);
  add_retrieval_option(cmd, a.embedder);
}

MemoryOptions memory_options(const MemoryArgs& a, const FactStore& store) {
  MemoryOptions o;
  o.fact_template = a.fact_template;
  o.header = a.header;
  o.footer = a.footer;
  o.default_k = a.k;
  o.default_window = a.window;
  if (a.window < 0) {
    const auto stored = store.get_setting(kWindowSetting);
    o.default_window = stored ? std::stoi(*stored) : MemoryOptions{}.default_window;
  }
  o.default_recompute = a.recompute;
  o.default_recompute_last = a.recompute_last;
  o.default_recompute_attention = a.recompute_attention;
  o.sink = a.sink;
  if (!a.kv_dir.empty()) {
    o.kv_dir = a.kv_dir;
  } else if (a.kv_files) {
    IS_REQUIRE(!a.data_dir.empty(), kInvalidInput, "--kv-files keeps KV under DATA_DIR/kv: with --store, name a directory with --kv-dir");
    o.kv_dir = std::filesystem::path(a.data_dir) / "kv";
  }
  check_memory_limits(o.default_k, o.default_window, o.default_recompute, o.default_recompute_last);  // the data dir's window too
  return o;
}

OpenedMemory open_memory(const MemoryArgs& a, bool gpu) {
  OpenedMemory m;
  m.store = FactStore::open_at(store_location(a.data_dir, a.store, true));
  m.retriever = make_retriever(a.embedder, *m.store, gpu);
  embed_all_missing(*m.retriever, *m.store);
  return m;
}

}  // namespace inferscale::cli
