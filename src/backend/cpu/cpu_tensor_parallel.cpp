// Tensor parallelism on the CPU: N rank backends (each a CpuBackend over shard_config /
// shard_weights, model/tensor_parallel.h) in one process, ranks 1.. on threads of their own
// serving rank 0's commands (backend/rank_group.h), their all-reduce the channel sum of
// rank_reduce.h. It checks the split and the rank protocol the GPUs' processes use; it is not
// faster than one rank.
#include <algorithm>
#include <thread>

#include "backend/cpu/cpu_backend.h"
#include "backend/rank_group.h"
#include "model/tensor_parallel.h"

namespace inferscale {

BackendOptions cpu_rank_options(const BackendOptions& opts, int32_t ranks) {
  BackendOptions ro = opts;
  ro.tensor_parallel_size = 1;
  const int32_t cores = static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
  ro.num_threads = std::max(1, (opts.num_threads > 0 ? opts.num_threads : cores) / ranks);
  return ro;
}

void make_cpu_root_rank(RankGroup& g, const ModelConfig& cfg, const ModelWeights& weights, const BackendOptions& opts,
                        std::vector<ByteChannel> reduce_ends) {
  auto root = std::make_shared<RootReduce>(std::move(reduce_ends));
  g.local = make_cpu_rank_backend(cfg, weights, opts, {root.get(), 0});
  g.abort_reduce = [r = root.get()] { r->shutdown(); };
  g.reduce = std::move(root);
}

std::unique_ptr<Backend> make_cpu_tensor_parallel_backend(const ModelConfig& cfg, const ModelWeights& weights,
                                                          const BackendOptions& opts) {
  const int32_t tp = opts.tensor_parallel_size;
  const ModelConfig rank_cfg = shard_config(cfg, tp);
  const BackendOptions ro = cpu_rank_options(opts, tp);

  std::vector<ByteChannel> root_ends;
  std::vector<std::unique_ptr<RankReduce>> rank_reduces;
  RankGroup g;
  std::vector<ByteChannel> worker_commands;
  for (int32_t r = 1; r < tp; ++r) {
    auto [root, rank] = ByteChannel::pair();
    root_ends.push_back(std::move(root));
    rank_reduces.push_back(std::make_unique<RankReduce>(std::move(rank)));
    auto [cmd0, cmdr] = ByteChannel::pair();
    g.commands.push_back(std::move(cmd0));
    worker_commands.push_back(std::move(cmdr));
  }
  // Every rank's backend is made here, so that a model that cannot load fails this call.
  make_cpu_root_rank(g, rank_cfg, shard_weights(weights, cfg, {0, tp}), ro, std::move(root_ends));
  std::vector<std::unique_ptr<Backend>> ranks;
  for (int32_t r = 1; r < tp; ++r)
    ranks.push_back(make_cpu_rank_backend(rank_cfg, shard_weights(weights, cfg, {r, tp}), ro, {rank_reduces[r - 1].get(), r}));
  for (int32_t r = 1; r < tp; ++r) {
    const size_t i = static_cast<size_t>(r - 1);
    g.workers.threads.emplace_back([be = std::move(ranks[i]), reduce = std::move(rank_reduces[i]),
                                    commands = std::move(worker_commands[i])]() mutable {
      serve_rank(*be, commands, [&] { reduce->shutdown(); });
      be.reset();  // before the all-reduce it uses
    });
  }
  return std::make_unique<RankGroupBackend>(cfg, std::move(g));
}

}  // namespace inferscale
