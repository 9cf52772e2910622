#include "cli/model_options.h"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <mutex>
#include <string>

#include "cli/rank_processes.h"
#include "model/tensor_parallel.h"
#include "util/check.h"

#ifdef INFERSCALE_HAS_CUDA
#include <cuda_runtime.h>

#include "backend/cuda/cuda_backend.h"
#endif

namespace inferscale::cli {

void add_model_options(CLI::App& cmd, ModelArgs& a) {
  cmd.add_option("--model,-m", a.model, "model: demo (built in), an HF directory, a .gguf file, or a config.json with --random-weights")
      ->capture_default_str();
  cmd.add_flag("--random-weights", a.random_weights, "seeded random weights of the config's shape (benchmarks)");
  cmd.add_option("--weights-seed", a.weights_seed, "seed of --random-weights")->capture_default_str();
  cmd.add_option("--random-dtype", a.random_dtype, "dtype of --random-weights: f32, f16, bf16")->capture_default_str();
  cmd.add_option("--tokenizer", a.tokenizer, "tokenizer file or directory (default: beside the model)");
  cmd.add_option("--block-size", a.block_size, "KV cache block size in tokens")->capture_default_str()->check(CLI::Range(1, 1024));
  cmd.add_option("--kv-cache-mb", a.kv_cache_mb, "paged KV cache size in MiB (0: 512 on the CPU, 32768 on a GPU)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 22));
  cmd.add_option("--memory-pool-mb", a.memory_pool_mb, "memory (fact KV) pool size in MiB (-1: 256 on the CPU, 8192 on a GPU)")
      ->capture_default_str()
      ->check(CLI::Range(-1, 1 << 22));
  cmd.add_option("--threads", a.threads, "CPU threads (0 = all cores)")->capture_default_str()->check(CLI::Range(0, 1024));
  cmd.add_option("--tensor-parallel-size,--tp", a.tensor_parallel_size,
                 "ranks the model is split over, Megatron-style (heads and MLP; an all-reduce after o_proj and "
                 "after down): one process per rank, on GPUs 0..N-1 with NCCL (libnccl.so.2), on the CPU with a "
                 "channel sum (to check the split: not faster); --kv-cache-mb and --memory-pool-mb are per rank")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd.add_option("--max-batched-tokens", a.max_batched_tokens, "tokens per engine step")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  cmd.add_option("--max-num-seqs", a.max_num_seqs, "requests per engine step")->capture_default_str()->check(CLI::Range(1, 1 << 16));
  cmd.add_option("--max-model-len", a.max_model_len, "longest request in tokens (0 = the model's limit)")->capture_default_str();
  cmd.add_option("--device", a.device, "auto | cpu | cuda")->capture_default_str()->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  cmd.add_flag("--enforce-eager", a.enforce_eager, "CUDA: launch every kernel, no CUDA graphs for decode steps and short prefills (vLLM's flag)");
  cmd.add_option("--memory-kv-dtype", a.memory_kv_dtype,
                 "how the memory pool stores fact KV: native (f32 on the CPU, bf16 on a GPU) or fp8 (E4M3 with a "
                 "scale per token and kv head: ~4x the facts in --memory-pool-mb on the CPU, ~2x on a GPU)")
      ->capture_default_str()
      ->check(CLI::IsMember({"native", "fp8"}));
  cmd.add_option("--kv-cache-dtype", a.kv_cache_dtype,
                 "how the paged KV cache stores K and V: native (f32 on the CPU, bf16 on a GPU) or fp8 (E4M3 with a "
                 "scale per token and kv head: ~2x the tokens in --kv-cache-mb on a GPU, ~4x on the CPU)")
      ->capture_default_str()
      ->check(CLI::IsMember({"native", "fp8"}));
  cmd.add_option("--quantization", a.quantization,
                 "none, or fp8: the layers' projection matrices in FP8 E4M3 with one scale each, quantized at "
                 "load (CUDA: half the weight bytes, FP8 tensor-core GEMMs; vLLM's flag; CPU: the same numbers "
                 "emulated in f32, for measuring quality)")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "fp8"}));
  cmd.add_option("--generation-config", a.generation_config,
                 "the default sampling of requests that set none: a generation_config.json (or a directory holding "
                 "one) read over the model's own, or 'openai' for OpenAI's (temperature 1, nothing else). Default: "
                 "the model's generation_config.json or GGUF sampling keys, over llama.cpp's defaults (temperature "
                 "0.8, top_k 40, top_p 0.95, min_p 0.05)");
  cmd.add_option("--default-sampling", a.default_sampling,
                 "override single default sampling fields, e.g. temperature=0.2,top_p=0.9 (temperature, top_k, top_p, "
                 "min_p); a request's own fields always win");
  cmd.add_flag("--no-programmatic-launch", a.no_programmatic_launch,
               "CUDA: launch each kernel after the previous one ends (no Programmatic Dependent Launch)");
}

SamplingDefaults resolve_sampling(const ModelArgs& a, const SamplingDefaults& model_own) {
  SamplingDefaults d = model_own;
  if (a.generation_config == "openai") {
    d = SamplingDefaults{};
  } else if (!a.generation_config.empty()) {
    std::filesystem::path p(a.generation_config);
    if (std::filesystem::is_directory(p)) p /= "generation_config.json";
    IS_REQUIRE(std::filesystem::is_regular_file(p), kNotFound, "--generation-config: no file at {}", p.string());
    d = read_generation_config(p, d);
  }
  if (!a.default_sampling.empty()) d = parse_sampling_overrides(a.default_sampling, d);
  return d;
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
  m.sampling = resolve_sampling(a, m.sampling);
  const std::string pre = m.tokenizer->pre_tokenizer();
  spdlog::info("model {} ({}, {} layers, hidden {}, vocab {}), tokenizer {}{}, chat template {}", m.name,
               m.config.architecture, m.config.num_layers, m.config.hidden_size, m.config.vocab_size, m.tokenizer->kind(),
               pre.empty() ? "" : " (pre-tokenizer " + pre + ")", chat_family_name(m.chat_template.family()));
  if (!m.chat_template.note().empty()) spdlog::warn("{}", m.chat_template.note());
  spdlog::info("default sampling: {}", m.sampling.describe());
  if (m.random_weights)
    spdlog::warn("{} has random weights: its text is meaningless (use it for plumbing and speed, not answers)", m.name);
  return m;
}

namespace {

bool cuda_available() {
#ifdef INFERSCALE_HAS_CUDA
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
#else
  return false;
#endif
}

// Empty when the CUDA backend runs this model shape; else why not.
std::string cuda_unsupported(const ModelConfig& cfg) {
#ifdef INFERSCALE_HAS_CUDA
  return cuda_unsupported_reason(cfg);
#else
  return "this build has no CUDA backend";
#endif
}

}  // namespace

bool gpu_selected(const ModelArgs& a) {
  if (a.device == "cpu") return false;
  if (a.device == "cuda") {
#ifndef INFERSCALE_HAS_CUDA
    IS_THROW(kUnsupported, "--device cuda: this build has no CUDA backend (configure with -DINFERSCALE_CUDA=ON)");
#endif
    IS_REQUIRE(cuda_available(), kUnsupported, "--device cuda: no CUDA device is available");
    return true;
  }
  return cuda_available();
}

// --device cuda: must work; auto: the GPU when present and able to run the model (said once when
// it is not), else the CPU.
bool picks_cuda(const ModelArgs& a, const ModelConfig& cfg) {
  if (!gpu_selected(a)) return false;
  const std::string why = cuda_unsupported(cfg);
  IS_REQUIRE(why.empty() || a.device != "cuda", kUnsupported, "--device cuda: {}", why);
  if (!why.empty()) {
    static std::once_flag said;
    std::call_once(said, [&] { spdlog::info("--device auto: {}; using the CPU backend", why); });
  }
  return why.empty();
}

BackendOptions backend_options(const ModelArgs& a, const ModelConfig& cfg, bool gpu) {
  BackendOptions bo;
  bo.block_size = a.block_size;
  bo.cache_memory_bytes = (a.kv_cache_mb > 0 ? a.kv_cache_mb : gpu ? 32768 : 512) << 20;
  // KV element size: bf16 on the GPU, f32 on the CPU; an FP8 pool as codes and a scale per kv head.
  bo.pool_fp8 = a.memory_kv_fp8();
  const int64_t block_bytes = kv_store_bytes_per_token(cfg, gpu, bo.pool_fp8) * a.block_size;
  bo.num_pool_blocks = ((a.memory_pool_mb >= 0 ? a.memory_pool_mb : gpu ? 8192 : 256) << 20) / block_bytes;
  bo.cache_fp8 = a.kv_cache_fp8();
  bo.projections_fp8 = a.quantization == "fp8";
  bo.num_threads = a.threads;
  bo.cuda_graphs = !a.enforce_eager;
  bo.programmatic_launch = !a.no_programmatic_launch;
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
  const bool gpu = picks_cuda(a, m.config);  // throws what --device cuda lacks, CPU-only builds included
  if (a.tensor_parallel_size > 1)
    return make_rank_processes(a, m, backend_options(a, shard_config(m.config, a.tensor_parallel_size), gpu), gpu);
  const BackendOptions bo = backend_options(a, m.config, gpu);
#ifdef INFERSCALE_HAS_CUDA
  if (gpu) {
    auto be = make_cuda_backend(m.config, m.weights, bo);
    spdlog::info("backend: cuda ({}), weights {:.1f} MiB, KV cache + memory pool {:.1f} MiB",
                 bo.projections_fp8 ? "fp8 projections, bf16 embedding and head" : "bf16", be->weight_bytes() / 1048576.0,
                 be->kv_bytes() / 1048576.0);
    return be;
  }
#endif
  if (bo.projections_fp8)
    spdlog::warn("--quantization fp8 on the CPU backend: the projections' numbers are rounded as the GPU's FP8 path "
                 "rounds them, computed in f32 (to measure quality; not faster, not smaller)");
  spdlog::info("backend: cpu (f32 reference)");
  return make_cpu_backend(m.config, m.weights, bo);
}

std::unique_ptr<Backend> make_helper_backend(bool cuda, const Model& m, const BackendOptions& opts) {
  if (cuda) {
    const std::string why = cuda_unsupported(m.config);
#ifdef INFERSCALE_HAS_CUDA
    if (why.empty()) return make_cuda_backend(m.config, m.weights, opts);
#endif
    spdlog::info("{}: {}; it runs on the CPU backend", m.name, why);
  }
  return make_cpu_backend(m.config, m.weights, opts);
}

}  // namespace inferscale::cli
