// Options of the subcommands that use per-user memory with a model (serve, chat, memory
// import-locomo): where the store lives, retrieval and encoding defaults.
#pragma once
#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "memory/fact_store.h"
#include "memory/memory_service.h"
#include "memory/retriever.h"

namespace inferscale::cli {

struct MemoryArgs {
  std::string data_dir;
  int32_t k = 10;
  int32_t window = 2;
  bool no_kv_files = false;
  std::string fact_template = MemoryOptions{}.fact_template;
  bool sink = false;
};

// `required`: the subcommand cannot run without --data-dir.
void add_memory_options(CLI::App& cmd, MemoryArgs& args, bool required);
MemoryOptions memory_options(const MemoryArgs& args);

// The store and its BM25 retriever, opened together (the retriever listens to the store).
struct OpenedMemory {
  std::unique_ptr<FactStore> store;
  std::unique_ptr<Retriever> retriever;
};
OpenedMemory open_memory(const MemoryArgs& args);

}  // namespace inferscale::cli
