// The CPU backend's makers beyond make_cpu_backend (backend.h): one tensor-parallel rank, and the
// backend that runs N of them as threads.
#pragma once
#include <memory>

#include "backend/backend.h"
#include "backend/cpu/rank_reduce.h"

namespace inferscale {

// A CPU backend over one rank's model (cfg and weights from model/tensor_parallel.h's
// shard_config / shard_weights), its row-parallel products summed through rank.reduce.
std::unique_ptr<Backend> make_cpu_rank_backend(const ModelConfig& cfg, const ModelWeights& weights, const BackendOptions& opts,
                                               CpuRank rank);

// opts.tensor_parallel_size ranks of the model (cfg, weights whole) on threads
// (cpu_tensor_parallel.cpp); its config() is the whole model's and its pool reads and writes
// move whole-head rows, as one rank's backend would.
std::unique_ptr<Backend> make_cpu_tensor_parallel_backend(const ModelConfig& cfg, const ModelWeights& weights,
                                                          const BackendOptions& opts);

}  // namespace inferscale
