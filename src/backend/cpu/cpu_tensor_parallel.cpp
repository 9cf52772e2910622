// Tensor parallelism on the CPU: N rank backends (each a CpuBackend over shard_config /
// shard_weights, model/tensor_parallel.h), run as N threads per forward, their row-parallel sums
// through one RankReduce. What the engine sees is one backend of the whole model:
//   - a forward runs on every rank (rank 0 on the caller's thread); each rank returns the same
//     rows, since the residual stream after every all-reduce and the replicated LM head are the
//     same on all; rank 0's output is the answer, the probes' attention mass the ranks' sum;
//   - injection runs on every rank over its kv heads (the same slots and positions);
//   - pool and cache rows move whole: rank r holds columns [r KS/N, (r+1) KS/N) of each
//     [L, n, KS] row (its kv heads), so a KV file written at one N reads at any other.
#include <algorithm>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include "backend/cpu/cpu_backend.h"
#include "backend/kv_rows.h"
#include "model/tensor_parallel.h"
#include "util/check.h"

namespace inferscale {
namespace {

class CpuTensorParallelBackend final : public Backend {
 public:
  CpuTensorParallelBackend(const ModelConfig& cfg, const ModelWeights& w, const BackendOptions& opts)
      : cfg_(cfg), tp_(opts.tensor_parallel_size), reduce_(tp_), outs_(static_cast<size_t>(tp_)) {
    const ModelConfig rank_cfg = shard_config(cfg, tp_);
    BackendOptions ro = opts;
    ro.tensor_parallel_size = 1;
    // Every rank has every block, holding its kv heads of it: the blocks are the whole model's.
    const int64_t block_bytes = kv_store_bytes_per_token(cfg, false, opts.cache_fp8) * opts.block_size;
    if (ro.num_cache_blocks <= 0) ro.num_cache_blocks = std::max<int64_t>(1, opts.cache_memory_bytes / block_bytes);
    const int32_t cores = static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
    ro.num_threads = std::max(1, (opts.num_threads > 0 ? opts.num_threads : cores) / tp_);
    for (int32_t r = 0; r < tp_; ++r)
      ranks_.push_back(make_cpu_rank_backend(rank_cfg, shard_weights(w, cfg, {r, tp_}), ro, {&reduce_, r}));
  }

  std::string name() const override { return "cpu"; }
  const ModelConfig& config() const override { return cfg_; }
  int32_t block_size() const override { return ranks_[0]->block_size(); }
  int64_t num_cache_blocks() const override { return ranks_[0]->num_cache_blocks(); }
  int64_t num_pool_blocks() const override { return ranks_[0]->num_pool_blocks(); }
  DType pool_dtype() const override { return DType::kF32; }
  bool reads_facts_in_place() const override { return ranks_[0]->reads_facts_in_place(); }

  void forward(const ForwardBatch& b, ForwardOutput& out) override {
    on_every_rank([&](int32_t r) { ranks_[static_cast<size_t>(r)]->forward(b, r == 0 ? out : outs_[static_cast<size_t>(r)]); });
    // Each rank's attention mass covers its own heads: the model's is their sum.
    for (int32_t r = 1; r < tp_; ++r) {
      const std::vector<float>& m = outs_[static_cast<size_t>(r)].probe_mass;
      IS_CHECK(m.size() == out.probe_mass.size(), "ranks returned {} and {} probe weights", out.probe_mass.size(), m.size());
      for (size_t i = 0; i < m.size(); ++i) out.probe_mass[i] += m[i];
    }
  }

  void inject(const InjectBatch& b) override {
    for (auto& rank : ranks_) rank->inject(b);
  }

  void read_pool(const std::vector<int64_t>& slots, HostTensor& k, HostTensor& v) override {
    gather(slots, k, v, [&](Backend& rank, HostTensor& rk, HostTensor& rv) { rank.read_pool(slots, rk, rv); });
  }
  void read_cache(const std::vector<int64_t>& slots, HostTensor& k, HostTensor& v) override {
    gather(slots, k, v, [&](Backend& rank, HostTensor& rk, HostTensor& rv) { rank.read_cache(slots, rk, rv); });
  }

  void write_pool(const std::vector<int64_t>& slots, const HostTensor& k, const HostTensor& v) override {
    const int64_t n = static_cast<int64_t>(slots.size()), L = cfg_.num_layers, KS = cfg_.kv_size();
    check_kv_rows(k, DType::kF32, L, n, KS, "write_pool K");
    check_kv_rows(v, DType::kF32, L, n, KS, "write_pool V");
    for (int32_t r = 0; r < tp_; ++r)
      ranks_[static_cast<size_t>(r)]->write_pool(slots, rank_columns(k, r), rank_columns(v, r));
  }

 private:
  // fn(r) on every rank at once, ranks 1.. on threads of their own. A rank that throws aborts the
  // others' all-reduces; the first exception thrown is rethrown once every rank has returned.
  template <typename Fn>
  void on_every_rank(const Fn& fn) {
    std::exception_ptr first;
    std::mutex mu;
    auto run = [&](int32_t r) {
      try {
        fn(r);
      } catch (...) {
        {
          std::lock_guard<std::mutex> lock(mu);
          if (!first) first = std::current_exception();
        }
        reduce_.abort();
      }
    };
    std::vector<std::thread> threads;
    for (int32_t r = 1; r < tp_; ++r) threads.emplace_back(run, r);
    run(0);
    for (auto& t : threads) t.join();
    if (first) {
      reduce_.reset();
      std::rethrow_exception(first);
    }
  }

  // Rank r's kv heads of every [L, n, KS] row of `t`: columns [r KS/N, (r+1) KS/N).
  HostTensor rank_columns(const HostTensor& t, int32_t r) const {
    const int64_t KS = cfg_.kv_size(), ks = KS / tp_;
    HostTensor out = make_kv_rows(DType::kF32, cfg_.num_layers, t.dim(1), ks);
    copy_columns(t.as<const float>() + r * ks, KS, out.as<float>(), ks, cfg_.num_layers * t.dim(1), ks);
    return out;
  }

  // Whole-head rows [L, n, KS] of `slots`: each rank's read (fn) into its columns.
  template <typename ReadFn>
  void gather(const std::vector<int64_t>& slots, HostTensor& k, HostTensor& v, const ReadFn& read) {
    const int64_t L = cfg_.num_layers, n = static_cast<int64_t>(slots.size()), KS = cfg_.kv_size(), ks = KS / tp_;
    k = make_kv_rows(DType::kF32, L, n, KS);
    v = make_kv_rows(DType::kF32, L, n, KS);
    for (int32_t r = 0; r < tp_; ++r) {
      HostTensor rk, rv;
      read(*ranks_[static_cast<size_t>(r)], rk, rv);
      copy_columns(rk.as<const float>(), ks, k.as<float>() + r * ks, KS, L * n, ks);
      copy_columns(rv.as<const float>(), ks, v.as<float>() + r * ks, KS, L * n, ks);
    }
  }

  // `cols` values of each of `rows` rows, from rows `src_stride` apart to rows `dst_stride` apart.
  static void copy_columns(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t rows, int64_t cols) {
    for (int64_t i = 0; i < rows; ++i)
      std::memcpy(dst + i * dst_stride, src + i * src_stride, static_cast<size_t>(cols) * sizeof(float));
  }

  ModelConfig cfg_;
  int32_t tp_;
  RankReduce reduce_;
  std::vector<std::unique_ptr<Backend>> ranks_;
  std::vector<ForwardOutput> outs_;  // ranks 1..'s outputs (rank 0 writes the caller's)
};

}  // namespace

std::unique_ptr<Backend> make_cpu_tensor_parallel_backend(const ModelConfig& cfg, const ModelWeights& weights,
                                                          const BackendOptions& opts) {
  check_tensor_parallel(cfg, opts.tensor_parallel_size);
  return std::make_unique<CpuTensorParallelBackend>(cfg, weights, opts);
}

}  // namespace inferscale
