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

// Setting under which the data dir records the encoding window its KV was (or will be) built with.
inline constexpr const char* kWindowSetting = "kv.window";

struct MemoryArgs {
  std::string data_dir;
  int32_t k = 10;
  int32_t window = -1;  // -1: the data dir's kv.window setting, else MemoryOptions' default
  bool kv_files = false;
  std::string fact_template = MemoryOptions{}.fact_template;
  bool sink = false;
};

// `required`: the subcommand cannot run without --data-dir.
void add_memory_options(CLI::App& cmd, MemoryArgs& args, bool required);
// Without an explicit --window, the window the data dir was encoded with (setting kv.window) wins.
MemoryOptions memory_options(const MemoryArgs& args, const FactStore& store);

// The store and its BM25 retriever, opened together (the retriever listens to the store).
struct OpenedMemory {
  std::unique_ptr<FactStore> store;
  std::unique_ptr<Retriever> retriever;
};
OpenedMemory open_memory(const MemoryArgs& args);

}  // namespace inferscale::cli
