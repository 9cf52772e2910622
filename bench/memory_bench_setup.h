// The host side of the memory path on random weights, for benchmarks that time or count what the
// preparation does (not the forward): a model of --config's shape (a small config keeps encoding
// short) on the CPU backend, an engine, a fact store in a temporary directory, BM25 and the
// memory service. The store's directory goes with the object.
#pragma once

#include <unistd.h>

#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "backend/backend.h"
#include "engine/engine.h"
#include "memory/retrieval/bm25_retriever.h"
#include "memory/store/fact_store.h"
#include "memory/memory_service.h"
#include "model/model.h"
#include "tokenizer/load_tokenizer.h"

namespace inferscale::bench {

// The options every such benchmark takes.
struct StackArgs {
  std::string config, tokenizer, locomo;
  int window = 2;
  void add_to(CLI::App& app) {
    app.add_option("--config", config, "HF config.json (random weights of its shape)")->required();
    app.add_option("--tokenizer", tokenizer, "tokenizer file or directory")->required();
    app.add_option("--locomo", locomo, "locomo10.json")->required();
    app.add_option("--window", window, "CWE window");
  }
};

struct RandomMemoryStack {
  Model model;
  std::unique_ptr<Engine> engine;
  std::filesystem::path dir;
  std::unique_ptr<FactStore> store;
  std::unique_ptr<Bm25Retriever> retriever;
  MemoryOptions options;
  std::unique_ptr<MemoryService> service;

  // pool_blocks: memory-pool capacity in blocks of 16 tokens (every fact stays resident).
  RandomMemoryStack(const StackArgs& args, int pool_blocks) {
    model.config = ModelConfig::from_hf_file(args.config);
    LoadedTokenizer lt = load_tokenizer(args.tokenizer);
    model.tokenizer = lt.tokenizer;
    model.chat_template = lt.chat;
    model.fingerprint = "bench-random-" + model.config.fingerprint();
    model.random_weights = true;
    model.weights = make_random_weights(model.config, 1);
    BackendOptions bo;
    bo.block_size = 16;
    bo.num_cache_blocks = 4096;
    bo.num_pool_blocks = pool_blocks;
    engine = std::make_unique<Engine>(make_cpu_backend(model.config, model.weights, bo), model.tokenizer,
                                      EngineOptions{});
    dir = std::filesystem::temp_directory_path() / ("inferscale-bench-memory-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    store = FactStore::open(dir);
    retriever = std::make_unique<Bm25Retriever>(*store);
    options.default_window = args.window;
    service = std::make_unique<MemoryService>(*store, *retriever, model, engine->backend(), engine->blocks(), options);
    engine->set_memory(service.get());
  }
  // One inject request's preparation as the engine runs it at admission: the connector's plan,
  // ready, then the request's end (every fact stays resident, so the plan's pool slots stay
  // valid). Empty, with a message, when it was not ready with its facts injected.
  std::optional<MemoryPlan> prepare_injected(const std::string& user, int k, const std::string& question) {
    MemoryRequest req;
    req.user = user;
    req.k = k;
    req.mode = MemoryMode::kInject;
    RequestMemory m(req, PromptSource::of_chat({{"user", question}}));
    MemoryPlan p = service->plan(m);
    service->request_finished(m);
    if (p.state != MemoryPlan::State::kReady || !p.injected) {
      std::fprintf(stderr, "a request's memory was not ready with its facts injected (state %d)\n", static_cast<int>(p.state));
      return std::nullopt;
    }
    return p;
  }

  ~RandomMemoryStack() {
    service.reset();
    retriever.reset();
    store.reset();
    std::filesystem::remove_all(dir);
  }
  RandomMemoryStack(const RandomMemoryStack&) = delete;
  RandomMemoryStack& operator=(const RandomMemoryStack&) = delete;
};

}  // namespace inferscale::bench
