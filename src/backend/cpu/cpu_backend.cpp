// The CPU reference backend: fp32 weights and activations, OpenBLAS GEMMs, the blocking thread
// pool elsewhere. The forward is the architecture's (model/architecture.h) over CpuForwardOps;
// this file holds the KV memory and what moves it (injection, pool and cache copies).
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/kv_rows.h"
#include "backend/cpu/cpu_forward_ops.h"
#include "backend/cpu/cpu_ops.h"
#include "model/architecture.h"
#include "model/rope.h"
#include "model/weights.h"
#include "util/check.h"

namespace inferscale {
namespace {

class CpuBackend final : public Backend {
 public:
  CpuBackend(const ModelConfig& cfg, const ModelWeights& w, const BackendOptions& opts, CpuRank rank)
      : cfg_(cfg), block_size_(opts.block_size), cache_fp8_(opts.cache_fp8) {
    IS_REQUIRE(block_size_ > 0, kInvalidInput, "block size must be positive, got {}", block_size_);
    const int64_t bytes_per_block = kv_store_bytes_per_token(cfg_, false, opts.cache_fp8) * block_size_;
    num_blocks_ = opts.num_cache_blocks > 0 ? opts.num_cache_blocks : std::max<int64_t>(1, opts.cache_memory_bytes / bytes_per_block);
    num_pool_blocks_ = opts.num_pool_blocks;
    kv_.cache_slots = num_blocks_ * block_size_;
    kv_.cache = CpuKvStore(cfg_.num_layers, kv_.cache_slots, cfg_.num_kv_heads, cfg_.head_dim, opts.cache_fp8);
    kv_.pool = CpuKvStore(cfg_.num_layers, num_pool_blocks_ * block_size_, cfg_.num_kv_heads, cfg_.head_dim, opts.pool_fp8);
    ops_ = std::make_unique<CpuForwardOps>(cfg_, kv_, block_size_, opts.num_threads, opts.cpu_linear_rows,
                                           opts.cpu_quant_linears, opts.projections_fp8, rank);
    arch_ = make_architecture(cfg_);
    arch_->load(*ops_, w);
  }

  std::string name() const override { return "cpu"; }
  const ModelConfig& config() const override { return cfg_; }
  int32_t block_size() const override { return block_size_; }
  int64_t num_cache_blocks() const override { return num_blocks_; }
  int64_t num_pool_blocks() const override { return num_pool_blocks_; }
  DType pool_dtype() const override { return DType::kF32; }

  // Fed tokens (ForwardBatch::token_src) are read from the ids the forward before returned.
  void forward(const ForwardBatch& b, ForwardOutput& out) override {
    std::optional<ForwardBatch> fed;
    if (!b.token_src.empty()) feed_tokens(fed.emplace(b), last_ids_);
    last_ids_.clear();  // a forward that throws leaves no ids to feed
    run_forward(*arch_, *ops_, fed ? *fed : b, out);
    last_ids_ = out.ids;
  }

  // Attention reads pool rows as injection reads them and rotates them with the same angles; an
  // FP8 cache would round injected keys, which a read in place does not.
  bool reads_facts_in_place() const override { return !cache_fp8_; }
  void inject(const InjectBatch& b) override {
    const size_t N = b.src_slots.size();
    IS_CHECK(b.dst_slots.size() == N && b.positions.size() == N, "inject arrays differ in size");
    const int64_t KS = cfg_.kv_size();
    check_slots(b.src_slots, num_pool_blocks_, "pool");
    check_slots(b.dst_slots, num_blocks_, "cache");
    const Rope& rope = ops_->rope();
    const int64_t half = cfg_.head_dim / 2;
    std::vector<float> cosv(N * static_cast<size_t>(half)), sinv(N * static_cast<size_t>(half));
    for (size_t i = 0; i < N; ++i) rope.angles(b.positions[i], &cosv[i * half], &sinv[i * half]);
    std::vector<float> k(N * static_cast<size_t>(KS)), v(k.size());  // [N, KS] this layer's pool rows
    for (int64_t l = 0; l < cfg_.num_layers; ++l) {
      kv_.pool.read(l, 0, b.src_slots.data(), static_cast<int64_t>(N), k.data());
      kv_.pool.read(l, 1, b.src_slots.data(), static_cast<int64_t>(N), v.data());
      for (size_t i = 0; i < N; ++i)
        rope.rotate_with(k.data() + i * static_cast<size_t>(KS), cfg_.num_kv_heads, &cosv[i * half], &sinv[i * half]);
      kv_.cache.write(l, 0, b.dst_slots.data(), static_cast<int64_t>(N), k.data());
      kv_.cache.write(l, 1, b.dst_slots.data(), static_cast<int64_t>(N), v.data());
    }
  }

  void read_pool(const std::vector<int64_t>& slots, HostTensor& k, HostTensor& v) override {
    check_slots(slots, num_pool_blocks_, "pool");
    read_rows(kv_.pool, slots, k, v);
  }

  void write_pool(const std::vector<int64_t>& slots, const HostTensor& k, const HostTensor& v) override {
    check_slots(slots, num_pool_blocks_, "pool");
    const int64_t KS = cfg_.kv_size(), n = static_cast<int64_t>(slots.size()), L = cfg_.num_layers;
    check_kv_rows(k, DType::kF32, L, n, KS, "write_pool K");
    check_kv_rows(v, DType::kF32, L, n, KS, "write_pool V");
    for (int64_t l = 0; l < L; ++l) {
      kv_.pool.write(l, 0, slots.data(), n, k.as<float>() + l * n * KS);
      kv_.pool.write(l, 1, slots.data(), n, v.as<float>() + l * n * KS);
    }
  }

  void read_cache(const std::vector<int64_t>& slots, HostTensor& k, HostTensor& v) override {
    check_slots(slots, num_blocks_, "cache");
    read_rows(kv_.cache, slots, k, v);
  }

 private:
  void check_slots(const std::vector<int64_t>& slots, int64_t blocks, const char* what) const {
    for (int64_t s : slots) IS_CHECK(s >= 0 && s < blocks * block_size_, "{} slot {} out of range", what, s);
  }
  // Every layer's K and V rows of `slots` as f32 ([L][n][KS]).
  void read_rows(const CpuKvStore& store, const std::vector<int64_t>& slots, HostTensor& k, HostTensor& v) const {
    const int64_t KS = cfg_.kv_size(), n = static_cast<int64_t>(slots.size()), L = cfg_.num_layers;
    k = make_kv_rows(DType::kF32, L, n, KS);
    v = make_kv_rows(DType::kF32, L, n, KS);
    for (int64_t l = 0; l < L; ++l) {
      store.read(l, 0, slots.data(), n, k.as<float>() + l * n * KS);
      store.read(l, 1, slots.data(), n, v.as<float>() + l * n * KS);
    }
  }

  ModelConfig cfg_;
  std::vector<int32_t> last_ids_;  // the last forward's ids output (ForwardBatch::token_src reads them)
  int32_t block_size_;
  bool cache_fp8_;
  int64_t num_blocks_ = 0;
  int64_t num_pool_blocks_ = 0;
  CpuKv kv_;  // per layer cache [num_blocks, bs, NKV, D] and pool [num_pool_blocks, bs, NKV, D], K pre-RoPE
  std::unique_ptr<CpuForwardOps> ops_;
  std::unique_ptr<Architecture> arch_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_rank_backend(const ModelConfig& cfg, const ModelWeights& weights, const BackendOptions& opts,
                                               CpuRank rank) {
  return std::make_unique<CpuBackend>(cfg, weights, opts, rank);
}

std::unique_ptr<Backend> make_cpu_backend(const ModelConfig& cfg, const ModelWeights& weights, const BackendOptions& opts) {
  if (opts.tensor_parallel_size != 1) return make_cpu_tensor_parallel_backend(cfg, weights, opts);
  return std::make_unique<CpuBackend>(cfg, weights, opts, CpuRank{});
}

}  // namespace inferscale
