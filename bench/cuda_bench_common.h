// Shared pieces of the GPU benchmarks: the Llama-3.1-8B shape (numbers of
// shared/data/configs/Llama-3.1-8B.json, built in code until the ModelConfig loader reaches
// main), timing helpers and table printing.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/gemm.h"
#include "model/config.h"

namespace inferscale::bench {

inline ModelConfig llama31_8b() {
  ModelConfig c;
  c.arch = Arch::kLlama;
  c.architecture = "LlamaForCausalLM";
  c.hidden_size = 4096;
  c.intermediate_size = 14336;
  c.num_layers = 32;
  c.num_heads = 32;
  c.num_kv_heads = 8;
  c.head_dim = 128;
  c.vocab_size = 128256;
  c.max_position_embeddings = 131072;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 500000.0;
  c.rope_scaling.type = RopeType::kLlama3;
  c.rope_scaling.factor = 8.0;
  c.rope_scaling.low_freq_factor = 1.0;
  c.rope_scaling.high_freq_factor = 4.0;
  c.rope_scaling.original_max_position_embeddings = 8192;
  c.torch_dtype = "bfloat16";
  return c;
}

inline double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Median GPU milliseconds of `fn` (launches on `stream`) over `iters` runs after `warmup`.
template <class F>
double time_gpu_ms(cudaStream_t stream, int warmup, int iters, F&& fn) {
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    CUDA_CHECK(cudaEventRecord(a, stream));
    fn();
    CUDA_CHECK(cudaEventRecord(b, stream));
    CUDA_CHECK(cudaEventSynchronize(b));
    float t = 0;
    CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  CUDA_CHECK(cudaEventDestroy(a));
  CUDA_CHECK(cudaEventDestroy(b));
  return median(ms);
}

// This card's limits, measured: a 2 GiB device-to-device copy (GB/s counting its read and its
// write, the weight-read floor's bandwidth) and cuBLASLt's bf16 GEMM at 8192^3 (TFLOP/s).
struct Ceilings {
  double copy_gbs = 0, gemm_tflops = 0;
};
inline Ceilings measure_ceilings(int iters) {
  Ceilings c;
  {
    const size_t bytes = 2ull << 30;
    DeviceBuffer a(bytes), b(bytes);
    CUDA_CHECK(cudaMemset(a.data(), 1, bytes));
    const double ms = time_gpu_ms(nullptr, 2, iters, [&] {
      CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, nullptr));
    });
    c.copy_gbs = 2.0 * static_cast<double>(bytes) / ms / 1e6;
  }
  const int64_t G = 8192;
  const size_t n = static_cast<size_t>(G * G);
  DeviceBuffer ga(n * 2), gb(n * 2), gc(n * 2);
  cuda::fill_random_bf16(ga.as<__nv_bfloat16>(), G * G, 5, 0.0f, 1.0f, nullptr);
  cuda::fill_random_bf16(gb.as<__nv_bfloat16>(), G * G, 6, 0.0f, 1.0f, nullptr);
  Gemm gemm;
  const double ms = time_gpu_ms(nullptr, 3, iters, [&] {
    gemm.run(ga.as<__nv_bfloat16>(), gb.as<__nv_bfloat16>(), gc.as<__nv_bfloat16>(), G, G, G, nullptr);
  });
  c.gemm_tflops = 2.0 * static_cast<double>(G) * G * G / ms / 1e9;
  return c;
}

inline std::string device_name() {
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp p{};
  CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
  return std::string(p.name) + ", " + std::to_string(p.multiProcessorCount) + " SMs, " +
         std::to_string(p.totalGlobalMem >> 30) + " GiB";
}

}  // namespace inferscale::bench
