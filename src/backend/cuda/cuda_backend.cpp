// CudaBackend: the KV cache and memory pool on the GPU, injection and pool/cache copies; a
// forward is the architecture's (model/architecture.h) over CudaForwardOps, on one stream, run
// eagerly or through a CUDA graph by the GraphRunner (graph_runner.h).
#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_forward_ops.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/graph_batch.h"
#include "backend/cuda/graph_runner.h"
#include "backend/cuda/meta_upload.h"
#include "backend/cuda/rope_table.h"
#include "backend/kv_rows.h"
#include "model/architecture.h"
#include "model/weights.h"
#include "tensor/dtype.h"
#include "tensor/fp8.h"
#include "util/check.h"

namespace inferscale {
namespace {

using bf16 = __nv_bfloat16;

class CudaBackendImpl final : public CudaBackend {
 public:
  // Weights: `weights`, or seeded random ones made on the GPU when null (benchmarks).
  // comm: a tensor-parallel rank's group (cfg and weights that rank's shard), or null.
  CudaBackendImpl(const ModelConfig& cfg, const ModelWeights* weights, uint64_t seed, const BackendOptions& opts,
                  NcclComm* comm = nullptr)
      : cfg_(cfg), rope_(cfg), block_size_(opts.block_size) {
    IS_REQUIRE(block_size_ > 0, kInvalidInput, "block size must be positive, got {}", block_size_);
    if (!opts.programmatic_launch) cuda::set_programmatic_launch(false);
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreate(&ev_inject_start_));
    CUDA_CHECK(cudaEventCreate(&ev_inject_stop_));
    row_ = cfg_.kv_size();
    cache_fp8_ = opts.cache_fp8;
    IS_REQUIRE(!cache_fp8_ || cuda::fp8_cache_supports_head_dim(static_cast<int32_t>(cfg_.head_dim)), kUnsupported,
               "an FP8 KV cache on the GPU needs head_dim 64 or 128, not {}", cfg_.head_dim);
    pool_fp8_ = opts.pool_fp8;
    const int64_t bytes_per_block = kv_store_bytes_per_token(cfg_, true, cache_fp8_) * block_size_;
    num_blocks_ = opts.num_cache_blocks > 0 ? opts.num_cache_blocks
                                            : std::max<int64_t>(1, opts.cache_memory_bytes / bytes_per_block);
    num_pool_blocks_ = opts.num_pool_blocks;
    // Blocks past the ones requests get: the scratch blocks of graph padding (graph_batch.h).
    scratch_blocks_ = graph_scratch_blocks(block_size_);
    cache_layer_stride_ = (num_blocks_ + scratch_blocks_) * block_size_ * row_;
    pool_layer_stride_ = num_pool_blocks_ * block_size_ * row_;
    const size_t cache_bytes = static_cast<size_t>(cfg_.num_layers * cache_layer_stride_) * (cache_fp8_ ? 1 : 2);
    const size_t pool_bytes = static_cast<size_t>(cfg_.num_layers * pool_layer_stride_) * (pool_fp8_ ? 1 : 2);
    k_cache_.resize(cache_bytes);
    v_cache_.resize(cache_bytes);
    if (cache_fp8_) {
      const size_t scale_bytes = static_cast<size_t>(cfg_.num_layers * (cache_layer_stride_ / cfg_.head_dim)) * 4;
      k_scale_.resize(scale_bytes);
      v_scale_.resize(scale_bytes);
    }
    if (pool_bytes > 0) {
      k_pool_.resize(pool_bytes);
      v_pool_.resize(pool_bytes);
      if (pool_fp8_) {
        const size_t scale_bytes = static_cast<size_t>(cfg_.num_layers * (pool_layer_stride_ / cfg_.head_dim)) * 4;
        k_pool_scale_.resize(scale_bytes);
        v_pool_scale_.resize(scale_bytes);
      }
    }
    rope_.ensure(4095);
    CudaKv kv;
    kv.cache = cache_view();
    if (num_pool_blocks_ > 0) kv.pool = pool_view();
    kv.cache_layer_stride = cache_layer_stride_;
    kv.pool_layer_stride = pool_layer_stride_;
    kv.cache_slots = num_blocks_ * block_size_;
    kv.scratch_slots = scratch_blocks_ * block_size_;
    kv.pool_slots = num_pool_blocks_ * block_size_;
    ops_ = std::make_unique<CudaForwardOps>(cfg_, kv, rope_, block_size_, stream_);
    ops_->set_e4m3_projections(opts.projections_fp8);
    ops_->set_all_reduce(comm);
    arch_ = make_architecture(cfg_);
    if (weights != nullptr) {
      arch_->load(*ops_, *weights);
    } else {
      arch_->load_random(*ops_, seed);
    }
    // An encoder's learned positions end; RoPE models' do not (the table grows).
    const int32_t max_position =
        cfg_.is_encoder() ? static_cast<int32_t>(cfg_.max_position_embeddings) - 1 : std::numeric_limits<int32_t>::max();
    runner_ = std::make_unique<GraphRunner>(*arch_, *ops_, stream_, static_cast<int32_t>(num_blocks_), block_size_,
                                            cfg_.vocab_size, max_position);
    runner_->set_enabled(opts.cuda_graphs);
  }

  ~CudaBackendImpl() override {
    cudaStreamSynchronize(stream_);
    cudaEventDestroy(ev_inject_start_);
    cudaEventDestroy(ev_inject_stop_);
    cudaStreamDestroy(stream_);
  }

  // The prefill tiles read facts in place from a bf16 pool into a bf16 cache's attention, rotating
  // keys with injection's rope_pair (attention_prefill.cu); FP8 stores are copied.
  bool reads_facts_in_place() const override { return !cache_fp8_ && !pool_fp8_ && num_pool_blocks_ > 0; }
  std::string name() const override { return "cuda"; }
  const ModelConfig& config() const override { return cfg_; }
  int32_t block_size() const override { return block_size_; }
  int64_t num_cache_blocks() const override { return num_blocks_; }
  int64_t num_pool_blocks() const override { return num_pool_blocks_; }
  // bf16 rows as they are; an FP8 pool's rows as f32, its codes times their scales (the CPU's
  // FP8 pool's rule, cpu_kv_store.h: writing such rows back stores the same codes).
  DType pool_dtype() const override { return pool_fp8_ ? DType::kF32 : DType::kBF16; }
  cudaStream_t stream() const override { return stream_; }
  void set_decode_attention(DecodeAttention kind) override { ops_->set_decode_attention(kind); }
  void set_cuda_graphs(bool on) override { runner_->set_enabled(on); }
  void set_programmatic_launch(bool on) override { cuda::set_programmatic_launch(on); }
  GraphStats graph_stats() const override { return runner_->stats(); }
  void set_op_profile(bool on) override { ops_->profiler().set_enabled(on); }
  std::vector<OpTime> op_profile() const override {
    ops_->complete();  // a pending forward's ops are collected when it completes
    return ops_->profiler().totals();
  }
  // A forward's time is ready when it returns (it waited for its output); an injection's events
  // are recorded without waiting on them, and read here, once.
  float last_gpu_ms() const override {
    ops_->complete();
    return last_was_inject_ ? last_inject_gpu_ms() : ops_->last_gpu_ms();
  }
  float last_inject_gpu_ms() const override {
    ops_->complete();
    if (inject_pending_) {
      CUDA_CHECK(cudaEventSynchronize(ev_inject_stop_));
      CUDA_CHECK(cudaEventElapsedTime(&inject_ms_, ev_inject_start_, ev_inject_stop_));
      inject_pending_ = false;
    }
    return inject_ms_;
  }
  int64_t weight_bytes() const override { return static_cast<int64_t>(ops_->weight_bytes()); }
  int64_t kv_bytes() const override {
    return static_cast<int64_t>(k_cache_.bytes() + v_cache_.bytes() + k_scale_.bytes() + v_scale_.bytes() +
                                k_pool_.bytes() + v_pool_.bytes() + k_pool_scale_.bytes() + v_pool_scale_.bytes());
  }

  // forward() is launch_forward() and wait_forward(); every call below that uses the stream or
  // its buffers completes a pending forward first (Backend::launch_forward).
  void forward(const ForwardBatch& b, ForwardOutput& out) override {
    launch_forward(b, out);
    wait_forward();
  }
  bool overlaps_forward() const override { return true; }
  void launch_forward(const ForwardBatch& b, ForwardOutput& out) override;
  bool forward_running() override { return ops_->running(); }
  void wait_forward() override { ops_->complete_oldest(); }
  void wait_forwards() override { ops_->complete(); }
  float last_idle_ms() const override { return ops_->last_idle_ms(); }
  void inject(const InjectBatch& b) override;
  void read_pool(const std::vector<int64_t>& slots, HostTensor& k, HostTensor& v) override {
    ops_->complete();
    check_slots(slots, num_pool_blocks_, "pool");
    if (pool_fp8_) {
      read_fp8_rows(pool_view(), pool_layer_stride_, slots, k, v);
    } else {
      read_rows(k_pool_, v_pool_, pool_layer_stride_, slots, k, v);
    }
  }
  void read_cache(const std::vector<int64_t>& slots, HostTensor& k, HostTensor& v) override {
    ops_->complete();
    check_slots(slots, num_blocks_, "cache");
    if (cache_fp8_) {
      read_fp8_rows(cache_view(), cache_layer_stride_, slots, k, v);
    } else {
      read_rows(k_cache_, v_cache_, cache_layer_stride_, slots, k, v);
    }
  }
  void write_pool(const std::vector<int64_t>& slots, const HostTensor& k, const HostTensor& v) override;

 private:
  void check_slots(const std::vector<int64_t>& slots, int64_t blocks, const char* what) const {
    for (int64_t s : slots) IS_CHECK(s >= 0 && s < blocks * block_size_, "{} slot {} out of range", what, s);
  }
  // Uploads `slots`; returns the device slots.
  const int64_t* upload_slots(const std::vector<int64_t>& slots) {
    meta_.begin(MetaUpload::bytes<int64_t>(slots.size()) + 256);
    const size_t o = meta_.add(slots);
    meta_.upload(stream_);
    return meta_.dev<int64_t>(o);
  }
  void read_rows(const DeviceBuffer& kb, const DeviceBuffer& vb, int64_t layer_stride, const std::vector<int64_t>& slots,
                 HostTensor& k, HostTensor& v);
  // The rows of an FP8 cache or pool (`layer_stride` elements a layer) as f32: codes times scales
  // (what attention, or injection, reads).
  void read_fp8_rows(const cuda::KvCache& src, int64_t layer_stride, const std::vector<int64_t>& slots, HostTensor& k,
                     HostTensor& v);
  // Gathers `row_bytes` bytes of each slot's row in every layer into host `dst` ([L][n][row_bytes]).
  void gather_bytes(const void* src, int64_t layer_stride_bytes, int64_t row_bytes, const int64_t* d_slots,
                    int64_t n, void* dst);
  // The reverse: host `src` ([L][n][row_bytes]) into each slot's row of every layer.
  void scatter_bytes(const void* src, int64_t layer_stride_bytes, int64_t row_bytes, const int64_t* d_slots,
                     int64_t n, void* dst);
  // The kernels' view of K / V rows and, FP8, their scales.
  static cuda::KvCache kv_view(const DeviceBuffer& k, const DeviceBuffer& v, const DeviceBuffer& ks,
                               const DeviceBuffer& vs, bool fp8) {
    return {k.data(), v.data(), fp8 ? ks.as<float>() : nullptr, fp8 ? vs.as<float>() : nullptr, fp8};
  }
  cuda::KvCache cache_view() const { return kv_view(k_cache_, v_cache_, k_scale_, v_scale_, cache_fp8_); }
  cuda::KvCache pool_view() const { return kv_view(k_pool_, v_pool_, k_pool_scale_, v_pool_scale_, pool_fp8_); }

  ModelConfig cfg_;
  RopeTable rope_;
  int32_t block_size_;
  int64_t row_ = 0;  // NKV * D: elements of one slot
  int64_t num_blocks_ = 0, num_pool_blocks_ = 0;
  int32_t scratch_blocks_ = 0;  // after the num_blocks_ blocks of the cache
  int64_t cache_layer_stride_ = 0, pool_layer_stride_ = 0;  // elements
  bool cache_fp8_ = false, pool_fp8_ = false;
  DeviceBuffer k_cache_, v_cache_;  // [L][num_blocks * bs, NKV, D] bf16, or FP8 codes (uint8)
  DeviceBuffer k_scale_, v_scale_;  // FP8: [L][num_blocks * bs, NKV] f32
  DeviceBuffer k_pool_, v_pool_;    // [L][num_pool_blocks * bs, NKV, D] bf16 or FP8 codes, K before RoPE
  DeviceBuffer k_pool_scale_, v_pool_scale_;  // FP8 pool: [L][num_pool_blocks * bs, NKV] f32

  cudaStream_t stream_ = nullptr;
  cudaEvent_t ev_inject_start_ = nullptr, ev_inject_stop_ = nullptr;
  mutable float inject_ms_ = 0.0f;    // of the last injection, once read
  mutable bool inject_pending_ = false;  // its events are not read yet
  bool last_was_inject_ = false;
  MetaUpload meta_;   // inject and pool copies (the forward has its own, in ops_)
  DeviceBuffer io_;   // staging of pool / cache copies
  std::unique_ptr<CudaForwardOps> ops_;  // declared after the buffers it points into
  std::unique_ptr<Architecture> arch_;
  std::unique_ptr<GraphRunner> runner_;  // every forward: eager, or a CUDA graph's warm-up, capture or replay
};

void CudaBackendImpl::inject(const InjectBatch& b) {
  ops_->complete();  // meta_ and the stream: the last forward is done first
  const size_t N = b.src_slots.size();
  IS_CHECK(b.dst_slots.size() == N && b.positions.size() == N, "inject arrays differ in size");
  if (N == 0) return;
  check_slots(b.src_slots, num_pool_blocks_, "pool");
  check_slots(b.dst_slots, num_blocks_, "cache");
  int32_t max_pos = 0;
  for (int32_t p : b.positions) {
    IS_CHECK(p >= 0, "negative injection position {}", p);
    max_pos = std::max(max_pos, p);
  }
  rope_.ensure(max_pos);
  meta_.begin(MetaUpload::bytes<int64_t>(N) * 2 + MetaUpload::bytes<int32_t>(N) + 1024);
  const size_t o_src = meta_.add(b.src_slots), o_dst = meta_.add(b.dst_slots), o_pos = meta_.add(b.positions);
  CUDA_CHECK(cudaEventRecord(ev_inject_start_, stream_));
  meta_.upload(stream_);
  cuda::InjectArgs a;
  a.pool = pool_view();
  a.cache = cache_view();
  a.pool_layer_stride = pool_layer_stride_;
  a.cache_layer_stride = cache_layer_stride_;
  a.src_slots = meta_.dev<int64_t>(o_src);
  a.dst_slots = meta_.dev<int64_t>(o_dst);
  a.positions = meta_.dev<int32_t>(o_pos);
  a.cos_table = rope_.cos();
  a.sin_table = rope_.sin();
  a.N = static_cast<int64_t>(N);
  a.num_layers = static_cast<int32_t>(cfg_.num_layers);
  a.num_kv_heads = static_cast<int32_t>(cfg_.num_kv_heads);
  a.head_dim = static_cast<int32_t>(cfg_.head_dim);
  a.interleaved = rope_.interleaved();
  cuda::inject(a, stream_);
  CUDA_CHECK(cudaEventRecord(ev_inject_stop_, stream_));
  inject_pending_ = true;  // the host goes on; the forward after it queues behind it
  last_was_inject_ = true;
}

void CudaBackendImpl::launch_forward(const ForwardBatch& b, ForwardOutput& out) {
  while (ops_->pending() >= CudaForwardOps::kMaxPending) ops_->complete_oldest();
  last_was_inject_ = false;  // last_gpu_ms() becomes this forward's
  runner_->run(b, out);
}

// Rows both ways go through the staging buffer io_: gathered / scattered on the device by
// copy_rows, copied to or from the host whole. bf16 rows as they are (the pool's dtype); FP8 rows
// as f32 on the host (codes and scales on the device, converted by tensor/fp8.h's rounding).
void CudaBackendImpl::read_rows(const DeviceBuffer& kb, const DeviceBuffer& vb, int64_t layer_stride,
                                const std::vector<int64_t>& slots, HostTensor& k, HostTensor& v) {
  const int64_t n = static_cast<int64_t>(slots.size()), L = cfg_.num_layers;
  k = make_kv_rows(DType::kBF16, L, n, row_);
  v = make_kv_rows(DType::kBF16, L, n, row_);
  if (n == 0) return;
  const int64_t* d_slots = upload_slots(slots);
  gather_bytes(kb.data(), layer_stride * 2, row_ * 2, d_slots, n, k.data);
  gather_bytes(vb.data(), layer_stride * 2, row_ * 2, d_slots, n, v.data);
}

void CudaBackendImpl::gather_bytes(const void* src, int64_t layer_stride_bytes, int64_t row_bytes,
                                   const int64_t* d_slots, int64_t n, void* dst) {
  const int64_t L = cfg_.num_layers;
  const size_t bytes = static_cast<size_t>(L * n * row_bytes);
  io_.reserve(bytes);
  cuda::copy_rows(src, io_.data(), d_slots, n, row_bytes, static_cast<int32_t>(L), layer_stride_bytes, n * row_bytes,
                  /*scatter=*/false, stream_);
  CUDA_CHECK(cudaMemcpyAsync(dst, io_.data(), bytes, cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));  // io_ is reused
}

void CudaBackendImpl::scatter_bytes(const void* src, int64_t layer_stride_bytes, int64_t row_bytes,
                                    const int64_t* d_slots, int64_t n, void* dst) {
  const int64_t L = cfg_.num_layers;
  const size_t bytes = static_cast<size_t>(L * n * row_bytes);
  io_.reserve(bytes);
  CUDA_CHECK(cudaMemcpyAsync(io_.data(), src, bytes, cudaMemcpyHostToDevice, stream_));
  cuda::copy_rows(io_.data(), dst, d_slots, n, row_bytes, static_cast<int32_t>(L), n * row_bytes, layer_stride_bytes,
                  /*scatter=*/true, stream_);
  CUDA_CHECK(cudaStreamSynchronize(stream_));  // io_ is reused
}

void CudaBackendImpl::read_fp8_rows(const cuda::KvCache& src, int64_t layer_stride, const std::vector<int64_t>& slots,
                                    HostTensor& k, HostTensor& v) {
  const int64_t n = static_cast<int64_t>(slots.size()), L = cfg_.num_layers, NKV = cfg_.num_kv_heads, D = cfg_.head_dim;
  k = make_kv_rows(DType::kF32, L, n, row_);
  v = make_kv_rows(DType::kF32, L, n, row_);
  if (n == 0) return;
  const int64_t* d_slots = upload_slots(slots);
  std::vector<uint8_t> codes(static_cast<size_t>(L * n * row_));
  std::vector<float> scales(static_cast<size_t>(L * n * NKV));
  for (int which = 0; which < 2; ++which) {
    gather_bytes(which == 0 ? src.k : src.v, layer_stride, row_, d_slots, n, codes.data());
    gather_bytes(which == 0 ? src.k_scale : src.v_scale, layer_stride / D * 4, NKV * 4, d_slots, n, scales.data());
    float* out = static_cast<float*>((which == 0 ? k : v).data);
    for (int64_t r = 0; r < L * n * NKV; ++r)  // rows of the packed [L][n][NKV] output
      dequantize_e4m3_row(codes.data() + r * D, D, scales[static_cast<size_t>(r)], out + r * D);
  }
}

void CudaBackendImpl::write_pool(const std::vector<int64_t>& slots, const HostTensor& k, const HostTensor& v) {
  ops_->complete();
  check_slots(slots, num_pool_blocks_, "pool");
  const int64_t n = static_cast<int64_t>(slots.size()), L = cfg_.num_layers, NKV = cfg_.num_kv_heads, D = cfg_.head_dim;
  check_kv_rows(k, pool_dtype(), L, n, row_, "write_pool K");
  check_kv_rows(v, pool_dtype(), L, n, row_, "write_pool V");
  if (n == 0) return;
  const int64_t* d_slots = upload_slots(slots);
  if (!pool_fp8_) {
    scatter_bytes(k.data, pool_layer_stride_ * 2, row_ * 2, d_slots, n, k_pool_.data());
    scatter_bytes(v.data, pool_layer_stride_ * 2, row_ * 2, d_slots, n, v_pool_.data());
    return;
  }
  // f32 rows quantized here, as the CPU's FP8 pool quantizes them (rows read from an FP8 pool give
  // back their codes and scales).
  std::vector<uint8_t> codes(static_cast<size_t>(L * n * row_));
  std::vector<float> scales(static_cast<size_t>(L * n * NKV));
  for (int which = 0; which < 2; ++which) {
    const float* in = static_cast<const float*>((which == 0 ? k : v).data);
    for (int64_t r = 0; r < L * n * NKV; ++r)
      scales[static_cast<size_t>(r)] = quantize_e4m3_row(in + r * D, D, codes.data() + r * D);
    scatter_bytes(codes.data(), pool_layer_stride_, row_, d_slots, n, (which == 0 ? k_pool_ : v_pool_).data());
    scatter_bytes(scales.data(), pool_layer_stride_ / D * 4, NKV * 4, d_slots, n,
                  (which == 0 ? k_pool_scale_ : v_pool_scale_).data());
  }
}

}  // namespace

std::string cuda_unsupported_reason(const ModelConfig& cfg) {
  if (!cuda::attention_supports_head_dim(static_cast<int32_t>(cfg.head_dim)))
    return fmt::format("the CUDA backend supports head_dim 32, 64 and 128, not {}", cfg.head_dim);
  if (cfg.num_kv_heads <= 0 || cfg.num_heads % cfg.num_kv_heads != 0)
    return fmt::format("the CUDA backend needs num_heads ({}) divisible by num_kv_heads ({})", cfg.num_heads,
                       cfg.num_kv_heads);
  return {};
}

namespace {
// Before any weight goes to the device.
void require_supported(const ModelConfig& cfg) {
  const std::string why = cuda_unsupported_reason(cfg);
  IS_REQUIRE(why.empty(), kUnsupported, "{}", why);
}
}  // namespace

std::unique_ptr<CudaBackend> make_cuda_backend(const ModelConfig& cfg, const ModelWeights& weights,
                                               const BackendOptions& opts) {
  require_supported(cfg);
  IS_REQUIRE(opts.tensor_parallel_size == 1, kUnsupported,
             "make_cuda_backend serves one GPU: {} tensor-parallel ranks are one process per GPU, each its own "
             "make_cuda_rank_backend",
             opts.tensor_parallel_size);
  return std::make_unique<CudaBackendImpl>(cfg, &weights, 0, opts);
}

std::unique_ptr<CudaBackend> make_cuda_rank_backend(const ModelConfig& cfg, const ModelWeights& weights,
                                                    const BackendOptions& opts, NcclComm& comm) {
  require_supported(cfg);
  return std::make_unique<CudaBackendImpl>(cfg, &weights, 0, opts, &comm);
}

std::unique_ptr<CudaBackend> make_cuda_backend_random(const ModelConfig& cfg, uint64_t seed,
                                                      const BackendOptions& opts) {
  require_supported(cfg);
  return std::make_unique<CudaBackendImpl>(cfg, nullptr, seed, opts);
}

}  // namespace inferscale
