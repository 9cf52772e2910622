// CudaBackend: the KV cache and memory pool on the GPU, injection and pool/cache copies; a
// forward is the architecture's (model/architecture.h) over CudaForwardOps, on one stream.
#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <map>
#include <tuple>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_forward_ops.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/graph_batch.h"
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
  CudaBackendImpl(const ModelConfig& cfg, const ModelWeights* weights, uint64_t seed, const BackendOptions& opts)
      : cfg_(cfg), rope_(cfg), block_size_(opts.block_size), graphs_(opts.cuda_graphs) {
    IS_REQUIRE(block_size_ > 0, kInvalidInput, "block size must be positive, got {}", block_size_);
    IS_REQUIRE(!opts.pool_fp8, kUnsupported,
               "an FP8 memory pool (--memory-kv-dtype fp8) is not on the CUDA backend yet: use the native bf16 pool, or --device cpu");
    if (!opts.programmatic_launch) cuda::set_programmatic_launch(false);
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreate(&ev_start_));
    CUDA_CHECK(cudaEventCreate(&ev_stop_));
    CUDA_CHECK(cudaEventCreate(&ev_inject_start_));
    CUDA_CHECK(cudaEventCreate(&ev_inject_stop_));
    row_ = cfg_.kv_size();
    cache_fp8_ = opts.cache_fp8;
    const int64_t bytes_per_block = cache_bytes_per_token(cfg_, true, cache_fp8_) * block_size_;
    num_blocks_ = opts.num_cache_blocks > 0 ? opts.num_cache_blocks
                                            : std::max<int64_t>(1, opts.cache_memory_bytes / bytes_per_block);
    num_pool_blocks_ = opts.num_pool_blocks;
    // Blocks past the ones requests get: the scratch blocks of graph padding (graph_batch.h).
    scratch_blocks_ = graph_scratch_blocks(block_size_);
    cache_layer_stride_ = (num_blocks_ + scratch_blocks_) * block_size_ * row_;
    pool_layer_stride_ = num_pool_blocks_ * block_size_ * row_;
    const size_t cache_bytes = static_cast<size_t>(cfg_.num_layers * cache_layer_stride_) * (cache_fp8_ ? 1 : 2);
    const size_t pool_bytes = static_cast<size_t>(cfg_.num_layers * pool_layer_stride_) * 2;
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
    }
    rope_.ensure(4095);
    CudaKv kv;
    kv.cache = cache_view();
    kv.k_pool = num_pool_blocks_ > 0 ? k_pool_.as<bf16>() : nullptr;
    kv.v_pool = num_pool_blocks_ > 0 ? v_pool_.as<bf16>() : nullptr;
    kv.cache_layer_stride = cache_layer_stride_;
    kv.pool_layer_stride = pool_layer_stride_;
    kv.cache_slots = num_blocks_ * block_size_;
    kv.scratch_slots = scratch_blocks_ * block_size_;
    kv.pool_slots = num_pool_blocks_ * block_size_;
    ops_ = std::make_unique<CudaForwardOps>(cfg_, kv, rope_, block_size_, stream_,
                                            CudaTiming{ev_start_, ev_stop_, &last_gpu_ms_});
    arch_ = make_architecture(cfg_);
    if (weights != nullptr) {
      arch_->load(*ops_, *weights);
    } else {
      arch_->load_random(*ops_, seed);
    }
  }

  ~CudaBackendImpl() override {
    cudaStreamSynchronize(stream_);
    cudaEventDestroy(ev_start_);
    cudaEventDestroy(ev_stop_);
    cudaEventDestroy(ev_inject_start_);
    cudaEventDestroy(ev_inject_stop_);
    cudaStreamDestroy(stream_);
  }

  std::string name() const override { return "cuda"; }
  const ModelConfig& config() const override { return cfg_; }
  int32_t block_size() const override { return block_size_; }
  int64_t num_cache_blocks() const override { return num_blocks_; }
  int64_t num_pool_blocks() const override { return num_pool_blocks_; }
  DType pool_dtype() const override { return DType::kBF16; }
  cudaStream_t stream() const override { return stream_; }
  void set_decode_attention(DecodeAttention kind) override { ops_->set_decode_attention(kind); }
  void set_cuda_graphs(bool on) override { graphs_ = on; }
  void set_programmatic_launch(bool on) override { cuda::set_programmatic_launch(on); }
  GraphStats graph_stats() const override { return ops_->graph_stats(); }
  void set_op_profile(bool on) override { ops_->profiler().set_enabled(on); }
  std::vector<OpTime> op_profile() const override { return ops_->profiler().totals(); }
  // A forward's time is ready when it returns (it waited for its output); an injection's events
  // are recorded without waiting on them, and read here, once.
  float last_gpu_ms() const override { return last_was_inject_ ? last_inject_gpu_ms() : last_gpu_ms_; }
  float last_inject_gpu_ms() const override {
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
                                k_pool_.bytes() + v_pool_.bytes());
  }

  void forward(const ForwardBatch& b, ForwardOutput& out) override;
  void inject(const InjectBatch& b) override;
  void read_pool(const std::vector<int64_t>& slots, HostTensor& k, HostTensor& v) override {
    check_slots(slots, num_pool_blocks_, "pool");
    read_rows(k_pool_, v_pool_, pool_layer_stride_, slots, k, v);
  }
  void read_cache(const std::vector<int64_t>& slots, HostTensor& k, HostTensor& v) override {
    check_slots(slots, num_blocks_, "cache");
    if (cache_fp8_) {
      read_fp8_cache_rows(slots, k, v);
    } else {
      read_rows(k_cache_, v_cache_, cache_layer_stride_, slots, k, v);
    }
  }
  void write_pool(const std::vector<int64_t>& slots, const HostTensor& k, const HostTensor& v) override;

 private:
  void check_slots(const std::vector<int64_t>& slots, int64_t blocks, const char* what) const {
    for (int64_t s : slots) IS_CHECK(s >= 0 && s < blocks * block_size_, "{} slot {} out of range", what, s);
  }
  // Uploads `slots` and sizes the staging buffer io_ for `elems` bf16; returns the device slots.
  const int64_t* upload_slots(const std::vector<int64_t>& slots, size_t elems) {
    meta_.begin(MetaUpload::bytes<int64_t>(slots.size()) + 256);
    const size_t o = meta_.add(slots);
    meta_.upload(stream_);
    io_.reserve(elems * 2);
    return meta_.dev<int64_t>(o);
  }
  void read_rows(const DeviceBuffer& kb, const DeviceBuffer& vb, int64_t layer_stride, const std::vector<int64_t>& slots,
                 HostTensor& k, HostTensor& v);
  // An FP8 cache's rows as f32: codes times scales (what attention reads, before its bf16 rounding).
  void read_fp8_cache_rows(const std::vector<int64_t>& slots, HostTensor& k, HostTensor& v);
  // Gathers `row_bytes` bytes of each slot's row in every layer into host `dst` ([L][n][row_bytes]).
  void gather_bytes(const DeviceBuffer& src, int64_t layer_stride_bytes, int64_t row_bytes, const int64_t* d_slots,
                    int64_t n, void* dst);
  cuda::KvCache cache_view() const {
    cuda::KvCache c;
    c.k = k_cache_.data();
    c.v = v_cache_.data();
    c.fp8 = cache_fp8_;
    if (cache_fp8_) {
      c.k_scale = k_scale_.as<float>();
      c.v_scale = v_scale_.as<float>();
    }
    return c;
  }
  bf16* kp(int64_t l) const { return num_pool_blocks_ > 0 ? k_pool_.as<bf16>() + l * pool_layer_stride_ : nullptr; }
  bf16* vp(int64_t l) const { return num_pool_blocks_ > 0 ? v_pool_.as<bf16>() + l * pool_layer_stride_ : nullptr; }

  ModelConfig cfg_;
  RopeTable rope_;
  int32_t block_size_;
  int64_t row_ = 0;  // NKV * D: elements of one slot
  int64_t num_blocks_ = 0, num_pool_blocks_ = 0;
  int32_t scratch_blocks_ = 0;  // after the num_blocks_ blocks of the cache
  int64_t cache_layer_stride_ = 0, pool_layer_stride_ = 0;  // elements
  bool cache_fp8_ = false;
  DeviceBuffer k_cache_, v_cache_;  // [L][num_blocks * bs, NKV, D] bf16, or FP8 codes (uint8)
  DeviceBuffer k_scale_, v_scale_;  // FP8: [L][num_blocks * bs, NKV] f32
  DeviceBuffer k_pool_, v_pool_;    // [L][num_pool_blocks * bs, NKV, D] bf16, K before RoPE

  cudaStream_t stream_ = nullptr;
  cudaEvent_t ev_start_ = nullptr, ev_stop_ = nullptr;            // forwards (CudaForwardOps)
  cudaEvent_t ev_inject_start_ = nullptr, ev_inject_stop_ = nullptr;
  float last_gpu_ms_ = 0.0f;          // of the last forward (CudaTiming)
  mutable float inject_ms_ = 0.0f;    // of the last injection, once read
  mutable bool inject_pending_ = false;  // its events are not read yet
  bool last_was_inject_ = false;
  // CUDA graphs per (shape kind, bucket, output kind, argmax span, decode attention kernel).
  bool graphs_ = true;
  std::map<std::tuple<int, int32_t, int, int64_t, int, bool>, std::unique_ptr<ForwardGraph>> graphs_by_key_;
  ForwardBatch padded_;  // the padded batch of a graph forward (reused)
  MetaUpload meta_;   // inject and pool copies (the forward has its own, in ops_)
  DeviceBuffer io_;   // staging of pool / cache copies
  std::unique_ptr<CudaForwardOps> ops_;  // declared after the buffers it points into
  std::unique_ptr<Architecture> arch_;
};

void CudaBackendImpl::inject(const InjectBatch& b) {
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
  a.k_pool = k_pool_.as<bf16>();
  a.v_pool = v_pool_.as<bf16>();
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

void CudaBackendImpl::forward(const ForwardBatch& b, ForwardOutput& out) {
  last_was_inject_ = false;  // last_gpu_ms() becomes this forward's
  const GraphShape shape = graphs_ ? graph_shape(b) : GraphShape{};
  if (shape.kind == GraphShape::Kind::kNone) {
    arch_->forward(*ops_, b, out);
    return;
  }
  // The real batch against the real cache; the padded one also reaches the scratch blocks.
  check_forward_batch(b, num_blocks_ * block_size_, block_size_, num_pool_blocks_ * block_size_, cfg_.vocab_size);
  pad_for_graph(b, shape, static_cast<int32_t>(num_blocks_), block_size_, padded_);
  // A graph keeps the launch mode it was captured with (PDL edges or plain ones): part of the key.
  const auto key = std::make_tuple(static_cast<int>(shape.kind), shape.bucket, static_cast<int>(b.output),
                                   argmax_span(b, cfg_.vocab_size), static_cast<int>(ops_->decode_attention()),
                                   cuda::programmatic_launch());
  std::unique_ptr<ForwardGraph>& g = graphs_by_key_[key];
  if (g == nullptr) g = std::make_unique<ForwardGraph>();
  ops_->use_graph(g.get(), static_cast<int64_t>(b.output_tokens.size()));
  try {
    arch_->forward(*ops_, padded_, out);
  } catch (...) {
    ops_->abort_graph();
    throw;
  }
}

// bf16 rows both ways: gathered / scattered on the device through the staging buffer io_, copied
// as they are (the pool's dtype).
void CudaBackendImpl::read_rows(const DeviceBuffer& kb, const DeviceBuffer& vb, int64_t layer_stride,
                                const std::vector<int64_t>& slots, HostTensor& k, HostTensor& v) {
  const int64_t n = static_cast<int64_t>(slots.size()), L = cfg_.num_layers;
  k = make_kv_rows(DType::kBF16, L, n, row_);
  v = make_kv_rows(DType::kBF16, L, n, row_);
  if (n == 0) return;
  const int64_t* d_slots = upload_slots(slots, 0);
  gather_bytes(kb, layer_stride * 2, row_ * 2, d_slots, n, k.data);
  gather_bytes(vb, layer_stride * 2, row_ * 2, d_slots, n, v.data);
}

void CudaBackendImpl::gather_bytes(const DeviceBuffer& src, int64_t layer_stride_bytes, int64_t row_bytes,
                                   const int64_t* d_slots, int64_t n, void* dst) {
  // copy_rows moves 16-byte chunks of 2-byte elements: a bf16 row, or a row of codes (NKV * D
  // bytes, D a multiple of 16), is a whole number of them.
  const int64_t L = cfg_.num_layers, row = row_bytes / 2;
  io_.reserve(static_cast<size_t>(L * n * row_bytes));
  cuda::copy_rows(static_cast<const bf16*>(src.data()), io_.as<bf16>(), d_slots, n, row, static_cast<int32_t>(L),
                  layer_stride_bytes / 2, n * row, /*scatter=*/false, stream_);
  CUDA_CHECK(cudaMemcpyAsync(dst, io_.data(), static_cast<size_t>(L * n * row_bytes), cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));  // io_ is reused
}

void CudaBackendImpl::read_fp8_cache_rows(const std::vector<int64_t>& slots, HostTensor& k, HostTensor& v) {
  const int64_t n = static_cast<int64_t>(slots.size()), L = cfg_.num_layers, NKV = cfg_.num_kv_heads, D = cfg_.head_dim;
  k = make_kv_rows(DType::kF32, L, n, row_);
  v = make_kv_rows(DType::kF32, L, n, row_);
  if (n == 0) return;
  const int64_t* d_slots = upload_slots(slots, 0);
  std::vector<uint8_t> codes(static_cast<size_t>(L * n * row_));
  // Scales: each layer's span of slots [lo, hi] comes down whole (a row of NKV floats is not a
  // whole number of copy_rows' 16-byte chunks for every NKV); this is a test and debugging path.
  const auto [lo_it, hi_it] = std::minmax_element(slots.begin(), slots.end());
  const int64_t lo = *lo_it, span = *hi_it - lo + 1, scale_ls = cache_layer_stride_ / D;
  std::vector<float> span_scales(static_cast<size_t>(span * NKV));
  for (int which = 0; which < 2; ++which) {
    gather_bytes(which == 0 ? k_cache_ : v_cache_, cache_layer_stride_, row_, d_slots, n, codes.data());
    const float* dev_scales = (which == 0 ? k_scale_ : v_scale_).as<float>();
    float* out = static_cast<float*>((which == 0 ? k : v).data);
    for (int64_t l = 0; l < L; ++l) {
      CUDA_CHECK(cudaMemcpyAsync(span_scales.data(), dev_scales + l * scale_ls + lo * NKV, span_scales.size() * 4,
                                 cudaMemcpyDeviceToHost, stream_));
      CUDA_CHECK(cudaStreamSynchronize(stream_));
      for (int64_t i = 0; i < n; ++i)
        for (int64_t h = 0; h < NKV; ++h) {
          const int64_t r = (l * n + i) * NKV + h;  // row of the packed [L][n][NKV] output
          dequantize_e4m3_row(codes.data() + r * D, D, span_scales[static_cast<size_t>((slots[static_cast<size_t>(i)] - lo) * NKV + h)],
                              out + r * D);
        }
    }
  }
}

void CudaBackendImpl::write_pool(const std::vector<int64_t>& slots, const HostTensor& k, const HostTensor& v) {
  check_slots(slots, num_pool_blocks_, "pool");
  const int64_t n = static_cast<int64_t>(slots.size()), L = cfg_.num_layers;
  const size_t elems = static_cast<size_t>(L * n * row_);
  check_kv_rows(k, DType::kBF16, L, n, row_, "write_pool K");
  check_kv_rows(v, DType::kBF16, L, n, row_, "write_pool V");
  if (n == 0) return;
  const int64_t* d_slots = upload_slots(slots, elems);
  for (int which = 0; which < 2; ++which) {
    CUDA_CHECK(cudaMemcpyAsync(io_.data(), (which == 0 ? k : v).data, elems * 2, cudaMemcpyHostToDevice, stream_));
    DeviceBuffer& dst = which == 0 ? k_pool_ : v_pool_;
    cuda::copy_rows(io_.as<bf16>(), dst.as<bf16>(), d_slots, n, row_, static_cast<int32_t>(L), n * row_,
                    pool_layer_stride_, /*scatter=*/true, stream_);
    CUDA_CHECK(cudaStreamSynchronize(stream_));  // io_ is reused for V
  }
}

}  // namespace

std::string cuda_unsupported_reason(const ModelConfig& cfg) {
  if (cfg.arch == Arch::kBert)
    return "the CUDA backend runs decoders (the Llama family); BERT encoders run on the CPU backend";
  if (!cuda::attention_supports_head_dim(static_cast<int32_t>(cfg.head_dim)))
    return fmt::format("the CUDA backend supports head_dim 64 and 128, not {}", cfg.head_dim);
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
  return std::make_unique<CudaBackendImpl>(cfg, &weights, 0, opts);
}

std::unique_ptr<CudaBackend> make_cuda_backend_random(const ModelConfig& cfg, uint64_t seed,
                                                      const BackendOptions& opts) {
  require_supported(cfg);
  return std::make_unique<CudaBackendImpl>(cfg, nullptr, seed, opts);
}

}  // namespace inferscale
