// The CPU backend's makers beyond make_cpu_backend (backend.h): one tensor-parallel rank, and the
// backend that runs N of them as threads.
#pragma once
#include <memory>

#include "backend/backend.h"
#include "backend/cpu/rank_reduce.h"
#include "backend/rank_group.h"

namespace inferscale {

// A CPU backend over one rank's model (cfg and weights from model/tensor_parallel.h's
// shard_config / shard_weights), its row-parallel products summed through rank.reduce.
std::unique_ptr<Backend> make_cpu_rank_backend(const ModelConfig& cfg, const ModelWeights& weights, const BackendOptions& opts,
                                               CpuRank rank);

// One rank's options among `ranks` CPU ranks: an equal share of opts.num_threads (0: of the
// cores), and one rank each.
BackendOptions cpu_rank_options(const BackendOptions& opts, int32_t ranks);

// Rank 0 of a CPU group (backend/rank_group.h): its backend over its shard (cfg, weights) into
// g.local, its side of the all-reduce over `reduce_ends` (channels to ranks 1.. in order) into
// g.reduce and g.abort_reduce.
void make_cpu_root_rank(RankGroup& g, const ModelConfig& cfg, const ModelWeights& weights, const BackendOptions& opts,
                        std::vector<ByteChannel> reduce_ends);

// opts.tensor_parallel_size ranks of the model (cfg, weights whole) on threads
// (cpu_tensor_parallel.cpp); its config() is the whole model's and its pool reads and writes
// move whole-head rows, as one rank's backend would.
std::unique_ptr<Backend> make_cpu_tensor_parallel_backend(const ModelConfig& cfg, const ModelWeights& weights,
                                                          const BackendOptions& opts);

}  // namespace inferscale
