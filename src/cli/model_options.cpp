#include "cli/model_options.h"

#include <spdlog/spdlog.h>

#include "util/check.h"

namespace inferscale::cli {

void add_model_options(CLI::App& cmd, ModelArgs& a) {
  cmd.add_option("--model,-m", a.model, "model: demo (built in), an HF directory, a .gguf file, or a config.json with --random-weights")
      ->capture_default_str();
  cmd.add_flag("--random-weights", a.random_weights, "seeded random weights of the config's shape (benchmarks)");
  cmd.add_option("--weights-seed", a.weights_seed, "seed of --random-weights")->capture_default_str();
  cmd.add_option("--random-dtype", a.random_dtype, "dtype of --random-weights: f32, f16, bf16")->capture_default_str();
  cmd.add_option("--tokenizer", a.tokenizer, "tokenizer file or directory (default: beside the model)");
  cmd.add_option("--block-size", a.block_size, "KV cache block size in tokens")->capture_default_str()->check(CLI::Range(1, 1024));
  cmd.add_option("--kv-cache-mb", a.kv_cache_mb, "paged KV cache size in MiB")->capture_default_str()->check(CLI::Range(1, 1 << 22));
  cmd.add_option("--memory-pool-mb", a.memory_pool_mb, "memory (fact KV) pool size in MiB")->capture_default_str()->check(CLI::Range(0, 1 << 22));
  cmd.add_option("--threads", a.threads, "CPU threads (0 = all cores)")->capture_default_str()->check(CLI::Range(0, 1024));
  cmd.add_option("--max-batched-tokens", a.max_batched_tokens, "tokens per engine step")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  cmd.add_option("--max-num-seqs", a.max_num_seqs, "requests per engine step")->capture_default_str()->check(CLI::Range(1, 1 << 16));
  cmd.add_option("--max-model-len", a.max_model_len, "longest request in tokens (0 = the model's limit)")->capture_default_str();
}

Model load_model_from_args(const ModelArgs& a) {
  LoadOptions lo;
  lo.random_weights = a.random_weights;
  lo.seed = a.weights_seed;
  lo.tokenizer_path = a.tokenizer;
  if (a.random_dtype == "f32") lo.random_dtype = DType::kF32;
  else if (a.random_dtype == "f16") lo.random_dtype = DType::kF16;
  else if (a.random_dtype == "bf16") lo.random_dtype = DType::kBF16;
  else IS_THROW(kInvalidInput, "--random-dtype must be f32, f16 or bf16, not '{}'", a.random_dtype);
  Model m = load_model(a.model, lo);
  spdlog::info("model {} ({}, {} layers, hidden {}, vocab {}), tokenizer {}, chat template {}", m.name,
               m.config.architecture, m.config.num_layers, m.config.hidden_size, m.config.vocab_size, m.tokenizer->kind(),
               chat_family_name(m.chat_template.family()));
  if (m.random_weights)
    spdlog::warn("{} has random weights: its text is meaningless (use it for plumbing and speed, not answers)", m.name);
  return m;
}

BackendOptions backend_options(const ModelArgs& a, const ModelConfig& cfg) {
  BackendOptions bo;
  bo.block_size = a.block_size;
  bo.cache_memory_bytes = a.kv_cache_mb << 20;
  const int64_t block_bytes = cfg.kv_bytes_per_token(4) * a.block_size;
  bo.num_pool_blocks = (a.memory_pool_mb << 20) / block_bytes;
  bo.num_threads = a.threads;
  return bo;
}

EngineOptions engine_options(const ModelArgs& a) {
  EngineOptions eo;
  eo.scheduler.max_num_batched_tokens = a.max_batched_tokens;
  eo.scheduler.max_num_seqs = a.max_num_seqs;
  eo.max_model_len = a.max_model_len;
  return eo;
}

std::unique_ptr<Backend> make_backend(const ModelArgs& a, const Model& m) {
  return make_cpu_backend(m.config, m.weights, backend_options(a, m.config));
}

}  // namespace inferscale::cli
