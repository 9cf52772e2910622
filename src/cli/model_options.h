// Options every model-running subcommand shares (generate, info, chat, serve, memory import):
// which model, random weights, KV cache size, threads. Parsed into native structs once.
#pragma once
#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "backend/backend.h"
#include "engine/engine.h"
#include "model/model.h"

namespace inferscale::cli {

struct ModelArgs {
  std::string model = "demo";
  bool random_weights = false;
  uint64_t weights_seed = 0;
  std::string random_dtype = "f32";
  std::string tokenizer;
  int32_t block_size = 16;
  int64_t kv_cache_mb = 0;      // 0: 512 on the CPU, 32768 on a GPU
  int64_t memory_pool_mb = -1;  // -1: 256 on the CPU, 8192 on a GPU
  int32_t threads = 0;
  int32_t tensor_parallel_size = 1;  // --tensor-parallel-size: ranks the model is split over (cli/rank_processes.h)
  bool enforce_eager = false;  // --enforce-eager: no CUDA graphs
  bool no_programmatic_launch = false;  // --no-programmatic-launch: plain stream order between kernels
  std::string memory_kv_dtype = "native";  // --memory-kv-dtype: native (f32 CPU, bf16 GPU) | fp8
  std::string kv_cache_dtype = "native";   // --kv-cache-dtype: native | fp8
  std::string quantization = "none";       // --quantization: none | fp8 (CUDA: E4M3 projections)
  bool memory_kv_fp8() const { return memory_kv_dtype == "fp8"; }
  bool kv_cache_fp8() const { return kv_cache_dtype == "fp8"; }
  int32_t max_batched_tokens = 2048;
  int32_t max_num_seqs = 64;
  int32_t max_model_len = 0;
  std::string device = "auto";  // auto | cpu | cuda
  std::string generation_config;  // --generation-config: FILE or DIR (a generation_config.json), or "openai"
  std::string default_sampling;   // --default-sampling: "temperature=0.2,top_p=0.9"
};

void add_model_options(CLI::App& cmd, ModelArgs& args);
// Loads the model and resolves its default sampling (--generation-config, --default-sampling over
// the model's own: model/generation_config.h); logs what was loaded and says plainly when its text
// is meaningless.
Model load_model_from_args(const ModelArgs& args);
// The default sampling --generation-config and --default-sampling make of the model's own.
SamplingDefaults resolve_sampling(const ModelArgs& args, const SamplingDefaults& model_own);
EngineOptions engine_options(const ModelArgs& args);
// The backend --device names: cuda (this build has the CUDA backend, a GPU is present and the
// backend runs the model's shape, else a clear error), cpu, or auto (cuda when it can, else cpu).
std::unique_ptr<Backend> make_backend(const ModelArgs& args, const Model& model);
// Whether --device selects the GPU: cuda (throws when this build or machine has none), auto (when
// one is present), cpu (never).
bool gpu_selected(const ModelArgs& args);
// Whether make_backend() picks the CUDA backend for this model: the GPU is selected and the
// backend runs the model's shape (--device cuda throws when it does not; auto falls back).
bool picks_cuda(const ModelArgs& args, const ModelConfig& cfg);
// The backend options of ModelArgs for a model of config `cfg` (one rank's, under tensor
// parallelism: sizes are per rank) on the GPU or the CPU.
BackendOptions backend_options(const ModelArgs& args, const ModelConfig& cfg, bool gpu);
// A backend for a helper model (the embedding model): CUDA when `cuda` and the CUDA backend runs
// its shape, else the CPU (logged).
std::unique_ptr<Backend> make_helper_backend(bool cuda, const Model& model, const BackendOptions& opts);

}  // namespace inferscale::cli
