#include "cli/memory_options.h"

#include "memory/bm25_retriever.h"

namespace inferscale::cli {

void add_memory_options(CLI::App& cmd, MemoryArgs& a, bool required) {
  auto* d = cmd.add_option("--data-dir", a.data_dir, required ? "memory data directory" : "memory data directory (enables memory)");
  if (required) d->required();
  cmd.add_option("--memory-k", a.k, "facts retrieved per request by default")->capture_default_str()->check(CLI::Range(0, 1000));
  cmd.add_option("--window,-w", a.window, "Context-Window Encoding: turns encoded before each fact (default: the data dir's)")
      ->check(CLI::Range(0, 1000));
  cmd.add_flag("--kv-files", a.kv_files, "also keep fact KV in files under DATA_DIR/kv, so a restart need not re-encode");
  cmd.add_option("--fact-template", a.fact_template, "how a fact is rendered ({date}, {speaker}, {text})")->capture_default_str();
  cmd.add_flag("--sink", a.sink, "encode each fact after a BOS token (its KV discarded)");
}

MemoryOptions memory_options(const MemoryArgs& a, const FactStore& store) {
  MemoryOptions o;
  o.fact_template = a.fact_template;
  o.default_k = a.k;
  o.default_window = a.window;
  if (a.window < 0) {
    const auto stored = store.get_setting(kWindowSetting);
    o.default_window = stored ? std::stoi(*stored) : MemoryOptions{}.default_window;
  }
  o.sink = a.sink;
  if (a.kv_files) o.kv_dir = std::filesystem::path(a.data_dir) / "kv";
  return o;
}

OpenedMemory open_memory(const MemoryArgs& a) {
  OpenedMemory m;
  m.store = FactStore::open(a.data_dir);
  m.retriever = std::make_unique<Bm25Retriever>(*m.store);
  return m;
}

}  // namespace inferscale::cli
