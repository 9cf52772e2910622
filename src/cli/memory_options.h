// Options of the subcommands that use per-user memory with a model (serve, chat, memory
// import-locomo): where the store lives, retrieval and encoding defaults. The embedder options
// are also taken by `memory search` and `memory import-locomo`.
#pragma once
#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "memory/store/fact_store.h"
#include "memory/memory_service.h"
#include "memory/retrieval/neighbour_retriever.h"
#include "memory/retrieval/retriever.h"

namespace inferscale::cli {

// Setting under which the data dir records the encoding window its KV was (or will be) built with.
inline constexpr const char* kWindowSetting = "kv.window";

// --embedder: dense retrieval with an embedding model run by the engine; --retrieval picks how text
// queries are ranked (bm25 | dense | hybrid; auto: hybrid with --embedder, else bm25).
struct EmbedderArgs {
  std::string retrieval = "auto";  // auto | bm25 | dense | hybrid
  std::string model;               // demo, an HF directory or a .gguf; empty: BM25
  std::string pooling = "auto";    // auto (sentence-transformers config, else last) | last | mean | cls
  std::string eos = "auto";        // auto | none | a token appended to every text
  std::string instruct;            // query task: queries become "Instruct: {task}\nQuery: {query}"
  int32_t max_tokens = 512;        // longer texts are truncated
  double neighbours = kDefaultNeighbourWeight;  // NeighbourRetriever's default weight; 0: off
};

void add_embedder_options(CLI::App& cmd, EmbedderArgs& args);
// --retrieval and --retrieval-neighbours (serve, chat, memory search).
void add_retrieval_option(CLI::App& cmd, EmbedderArgs& args);

enum class RetrievalMode { kBm25, kDense, kHybrid };
// --retrieval resolved: "auto" is hybrid with --embedder, else bm25; dense and hybrid without
// --embedder are kInvalidInput.
RetrievalMode retrieval_mode(const EmbedderArgs& args);

// Text queries by retrieval_mode(): BM25; a DenseRetriever over a ModelEmbedder (CPU backend),
// which embeds each user's missing vectors before that user's first search; or both fused by a
// HybridRetriever (RRF, hybrid_retriever.h). With --retrieval bm25 an --embedder is not loaded
// (a warning says so). Query vectors: the
// vectors the client supplied with the facts (a CombinedRetriever holds both). BM25, alone or in
// hybrid, is wrapped in a NeighbourRetriever (--retrieval-neighbours): a retrieved turn lends part
// of its score to the turns beside it.
// `gpu` (gpu_selected(--device)): the users' vector indexes live on the GPU and the embedding
// model runs on the CUDA backend when its shape allows.
std::unique_ptr<Retriever> make_retriever(const EmbedderArgs& args, FactStore& store, bool gpu = false);
// Embeds every user's missing vectors now (progress on stderr) when `retriever` is dense; returns
// how many were stored.
size_t embed_all_missing(Retriever& retriever, const FactStore& store);

struct MemoryArgs {
  EmbedderArgs embedder;
  std::string data_dir;  // SQLite in this directory
  std::string store;     // or a PostgreSQL URL (--store, INFERSCALE_STORE): the store replicas share
  int32_t k = 10;
  int32_t window = -1;  // -1: the data dir's kv.window setting, else MemoryOptions' default
  int32_t recompute = 0;  // memory.recompute when a request gives none
  int32_t recompute_last = 0;  // memory.recompute_last when a request gives none
  double recompute_attention = 0;  // memory.recompute_attention when a request gives none
  bool kv_files = false;
  std::string kv_dir;  // --kv-dir: fact KV files here (a directory replicas may share); implies kv_files
  std::string fact_template = MemoryOptions{}.fact_template;
  std::string header = MemoryOptions{}.header;  // {user}: the user's name
  std::string footer = MemoryOptions{}.footer;
  bool sink = false;
};

// `required`: the subcommand cannot run without a store (--data-dir or --store).
void add_memory_options(CLI::App& cmd, MemoryArgs& args, bool required);
// --store (with INFERSCALE_STORE) beside a --data-dir option, the one excluding the other.
void add_store_option(CLI::App& cmd, std::string& store, CLI::Option* data_dir);
// Whether memory is on (a store was named), and where the store is: the --store URL, else the
// data directory. kInvalidInput when `required` and neither was given.
bool memory_enabled(const MemoryArgs& args);
std::string store_location(const std::string& data_dir, const std::string& store, bool required);
// Without an explicit --window, the window the data dir was encoded with (setting kv.window) wins.
// KV files: --kv-dir, else DATA_DIR/kv with --kv-files (kInvalidInput with --store alone).
MemoryOptions memory_options(const MemoryArgs& args, const FactStore& store);

// The store and its retriever (make_retriever; with an embedder, missing vectors embedded now),
// opened together (the retriever listens to the store).
struct OpenedMemory {
  std::unique_ptr<FactStore> store;
  std::unique_ptr<Retriever> retriever;
};
OpenedMemory open_memory(const MemoryArgs& args, bool gpu = false);

}  // namespace inferscale::cli
