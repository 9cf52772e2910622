// CudaBackend: one forward = embedding -> per layer [attn_norm -> QKV GEMM -> fused
// bias/qk-norm/capture/RoPE/append -> paged attention -> o_proj GEMM (+residual) -> ffn_norm ->
// gate_up GEMM -> SiLU*mul -> down GEMM (+residual)] -> final norm of the output rows -> LM head.
// All on one stream; the host waits once, for the output copy.
#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cuda/attention_plan.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/device_weights.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/meta_upload.h"
#include "backend/cuda/rope_table.h"
#include "model/weights.h"
#include "tensor/dtype.h"
#include "util/check.h"

namespace inferscale {
namespace {

using bf16 = __nv_bfloat16;

class CudaBackendImpl final : public CudaBackend {
 public:
  CudaBackendImpl(const ModelConfig& cfg, DeviceWeights weights, const BackendOptions& opts)
      : cfg_(cfg), w_(std::move(weights)), rope_(cfg), block_size_(opts.block_size) {
    IS_REQUIRE(block_size_ > 0, kInvalidInput, "block size must be positive, got {}", block_size_);
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreate(&ev_start_));
    CUDA_CHECK(cudaEventCreate(&ev_stop_));
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&num_sms_, cudaDevAttrMultiProcessorCount, device));

    row_ = cfg_.kv_size();
    const int64_t bytes_per_block = cfg_.kv_bytes_per_token(2) * block_size_;
    num_blocks_ = opts.num_cache_blocks > 0 ? opts.num_cache_blocks
                                            : std::max<int64_t>(1, opts.cache_memory_bytes / bytes_per_block);
    num_pool_blocks_ = opts.num_pool_blocks;
    cache_layer_stride_ = num_blocks_ * block_size_ * row_;
    pool_layer_stride_ = num_pool_blocks_ * block_size_ * row_;
    const size_t cache_bytes = static_cast<size_t>(cfg_.num_layers * cache_layer_stride_) * 2;
    const size_t pool_bytes = static_cast<size_t>(cfg_.num_layers * pool_layer_stride_) * 2;
    k_cache_.resize(cache_bytes);
    v_cache_.resize(cache_bytes);
    if (pool_bytes > 0) {
      k_pool_.resize(pool_bytes);
      v_pool_.resize(pool_bytes);
    }
    rope_.ensure(4095);
  }

  ~CudaBackendImpl() override {
    cudaStreamSynchronize(stream_);
    cudaEventDestroy(ev_start_);
    cudaEventDestroy(ev_stop_);
    cudaStreamDestroy(stream_);
  }

  std::string name() const override { return "cuda"; }
  const ModelConfig& config() const override { return cfg_; }
  int32_t block_size() const override { return block_size_; }
  int64_t num_cache_blocks() const override { return num_blocks_; }
  int64_t num_pool_blocks() const override { return num_pool_blocks_; }
  DType pool_dtype() const override { return DType::kBF16; }
  cudaStream_t stream() const override { return stream_; }
  void set_decode_attention(DecodeAttention kind) override { decode_attention_ = kind; }
  float last_gpu_ms() const override { return last_gpu_ms_; }
  int64_t weight_bytes() const override { return static_cast<int64_t>(w_.bytes()); }
  int64_t kv_bytes() const override {
    return static_cast<int64_t>(k_cache_.bytes() + v_cache_.bytes() + k_pool_.bytes() + v_pool_.bytes());
  }

  void forward(const ForwardBatch& b, std::vector<float>& out) override;
  void inject(const InjectBatch& b) override;
  void read_pool(const std::vector<int64_t>& slots, std::vector<float>& k, std::vector<float>& v) override {
    check_slots(slots, num_pool_blocks_, "pool");
    read_rows(k_pool_, v_pool_, pool_layer_stride_, slots, k, v);
  }
  void read_cache(const std::vector<int64_t>& slots, std::vector<float>& k, std::vector<float>& v) override {
    check_slots(slots, num_blocks_, "cache");
    read_rows(k_cache_, v_cache_, cache_layer_stride_, slots, k, v);
  }
  void write_pool(const std::vector<int64_t>& slots, const std::vector<float>& k, const std::vector<float>& v) override;

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
                 std::vector<float>& k, std::vector<float>& v);
  bf16* kc(int64_t l) const { return k_cache_.as<bf16>() + l * cache_layer_stride_; }
  bf16* vc(int64_t l) const { return v_cache_.as<bf16>() + l * cache_layer_stride_; }
  bf16* kp(int64_t l) const { return num_pool_blocks_ > 0 ? k_pool_.as<bf16>() + l * pool_layer_stride_ : nullptr; }
  bf16* vp(int64_t l) const { return num_pool_blocks_ > 0 ? v_pool_.as<bf16>() + l * pool_layer_stride_ : nullptr; }

  ModelConfig cfg_;
  DeviceWeights w_;
  RopeTable rope_;
  int32_t block_size_;
  int num_sms_ = 132;
  int64_t row_ = 0;  // NKV * D: elements of one slot
  int64_t num_blocks_ = 0, num_pool_blocks_ = 0;
  int64_t cache_layer_stride_ = 0, pool_layer_stride_ = 0;  // elements
  DeviceBuffer k_cache_, v_cache_;  // [L][num_blocks * bs, NKV, D] bf16
  DeviceBuffer k_pool_, v_pool_;    // [L][num_pool_blocks * bs, NKV, D] bf16, K before RoPE

  cudaStream_t stream_ = nullptr;
  cudaEvent_t ev_start_ = nullptr, ev_stop_ = nullptr;
  float last_gpu_ms_ = 0.0f;
  DecodeAttention decode_attention_ = DecodeAttention::kTensorCore;
  Gemm gemm_;
  PinnedBuffer out_host_;  // staging of the output rows (pinned: a fast copy; then into the caller's vector)
  MetaUpload meta_;
  // Activations, grown on demand.
  DeviceBuffer x_, hn_, qkv_, q_, attn_, gu_, act_, rows_, logits_, argmax_, part_o_, part_lse_, io_;
};

void CudaBackendImpl::forward(const ForwardBatch& b, std::vector<float>& out) {
  b.validate(num_blocks_ * block_size_, block_size_);
  for (int64_t s : b.capture_slots)
    IS_CHECK(s >= 0 && s < num_pool_blocks_ * block_size_, "pool slot {} out of range", s);
  const int64_t T = b.num_tokens(), R = static_cast<int64_t>(b.output_tokens.size());
  const int32_t S = b.num_seqs();
  const int64_t H = cfg_.hidden_size, D = cfg_.head_dim, NH = cfg_.num_heads, NKV = cfg_.num_kv_heads;
  const int64_t QS = cfg_.q_size(), QKV = QS + 2 * cfg_.kv_size(), I = cfg_.intermediate_size, V = cfg_.vocab_size;
  const int32_t group = static_cast<int32_t>(NH / NKV);
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  const bool hidden_out = b.output == ForwardBatch::Output::kHidden;
  IS_REQUIRE(hidden_out || b.output_tokens.empty() || w_.lm_head != nullptr, kUnsupported,
             "this model has no LM head (an embedding backbone): it yields hidden states, not logits");
  if (T == 0) {
    out.clear();
    return;
  }
  int32_t max_pos = 0;
  for (int32_t t : b.token_ids)
    IS_REQUIRE(t >= 0 && t < cfg_.vocab_size, kInvalidInput, "token id {} outside the vocabulary of {}", t, cfg_.vocab_size);
  for (int32_t p : b.positions) max_pos = std::max(max_pos, p);
  rope_.ensure(max_pos);

  // Attention plan: the decode kernel (when selected) if every sequence has one query token.
  bool single_token = true;
  for (int32_t s = 0; s < S && single_token; ++s) single_token = b.q_indptr[s + 1] - b.q_indptr[s] == 1;
  const bool decode = single_token && decode_attention_ == DecodeAttention::kSimt && group <= cuda::kDecodeMaxGroup;
  const AttnPlanOptions po =
      cuda::attention_plan_options(decode, single_token, group, static_cast<int32_t>(NKV), num_sms_);
  const AttnPlan plan = plan_attention(b.q_indptr.data(), S, b.positions.data(),
                                       b.kv_start.empty() ? nullptr : b.kv_start.data(), group, po);

  std::vector<int64_t> capture(b.capture_tokens.empty() ? 0 : static_cast<size_t>(T), -1);  // [T] pool slot or -1
  for (size_t c = 0; c < b.capture_tokens.size(); ++c) capture[static_cast<size_t>(b.capture_tokens[c])] = b.capture_slots[c];
  IS_CHECK(capture.empty() || num_pool_blocks_ > 0, "capture needs a memory pool");

  // One upload of every per-forward array.
  meta_.begin(MetaUpload::bytes<int32_t>(T) * 2 + MetaUpload::bytes<int64_t>(T) * 2 +
              MetaUpload::bytes<int32_t>(b.kv_indptr.size()) + MetaUpload::bytes<int32_t>(b.kv_indices.size()) +
              MetaUpload::bytes<int32_t>(b.output_tokens.size()) + MetaUpload::bytes<AttnWorkItem>(plan.items.size()) +
              MetaUpload::bytes<AttnMergeItem>(plan.merges.size()) + MetaUpload::bytes<RowSampling>(b.sampling.size()) +
              4096);
  const size_t o_ids = meta_.add(b.token_ids), o_pos = meta_.add(b.positions), o_slot = meta_.add(b.slot_mapping);
  const size_t o_cap = meta_.add(capture), o_kvp = meta_.add(b.kv_indptr), o_kvi = meta_.add(b.kv_indices);
  const size_t o_out = meta_.add(b.output_tokens), o_items = meta_.add(plan.items), o_merge = meta_.add(plan.merges);
  const size_t o_samp = meta_.add(b.sampling);

  x_.reserve(static_cast<size_t>(T * H) * 4);
  hn_.reserve(static_cast<size_t>(T * H) * 2);
  qkv_.reserve(static_cast<size_t>(T * QKV) * 4);
  q_.reserve(static_cast<size_t>(T * QS) * 2);
  attn_.reserve(static_cast<size_t>(T * QS) * 2);
  gu_.reserve(static_cast<size_t>(T * 2 * I) * 2);
  act_.reserve(static_cast<size_t>(T * I) * 2);
  rows_.reserve(static_cast<size_t>(std::max<int64_t>(R, 1) * H) * 4);
  logits_.reserve(static_cast<size_t>(std::max<int64_t>(R, 1) * V) * 4);
  part_o_.reserve(static_cast<size_t>(std::max(plan.num_partials, 1)) * NKV * plan.rows_per_tile * D * 4);
  part_lse_.reserve(static_cast<size_t>(std::max(plan.num_partials, 1)) * NKV * plan.rows_per_tile * 4);

  CUDA_CHECK(cudaEventRecord(ev_start_, stream_));
  meta_.upload(stream_);
  float* x = x_.as<float>();      // [T, H] residual stream
  bf16* hn = hn_.as<bf16>();      // [T, H] normed GEMM input
  float* qkv = qkv_.as<float>();  // [T, NH + 2 NKV, D]
  bf16* q = q_.as<bf16>();        // [T, NH, D] rotated
  bf16* attn = attn_.as<bf16>();  // [T, NH, D]
  bf16* gu = gu_.as<bf16>();      // [T, 2 I]
  bf16* act = act_.as<bf16>();    // [T, I]

  cuda::embedding(w_.embed, meta_.dev<int32_t>(o_ids), x, T, H, stream_);

  cuda::QkvRopeAppendArgs ra;
  ra.qkv = qkv;
  ra.cos_table = rope_.cos();
  ra.sin_table = rope_.sin();
  ra.positions = meta_.dev<int32_t>(o_pos);
  ra.slot_mapping = meta_.dev<int64_t>(o_slot);
  ra.capture_slot = capture.empty() ? nullptr : meta_.dev<int64_t>(o_cap);
  ra.q_out = q;
  ra.T = T;
  ra.num_heads = static_cast<int32_t>(NH);
  ra.num_kv_heads = static_cast<int32_t>(NKV);
  ra.head_dim = static_cast<int32_t>(D);
  ra.eps = eps;
  ra.interleaved = rope_.interleaved();

  cuda::AttentionArgs aa;
  aa.q = q;
  aa.out = attn;
  aa.positions = meta_.dev<int32_t>(o_pos);
  aa.kv_indptr = meta_.dev<int32_t>(o_kvp);
  aa.kv_indices = meta_.dev<int32_t>(o_kvi);
  aa.items = meta_.dev<AttnWorkItem>(o_items);
  aa.merges = meta_.dev<AttnMergeItem>(o_merge);
  aa.partial_o = part_o_.as<float>();
  aa.partial_lse = part_lse_.as<float>();
  aa.num_items = static_cast<int32_t>(plan.items.size());
  aa.num_merges = static_cast<int32_t>(plan.merges.size());
  aa.rows_per_tile = plan.rows_per_tile;
  aa.merge_rows = plan.max_merge_rows;
  aa.num_heads = static_cast<int32_t>(NH);
  aa.num_kv_heads = static_cast<int32_t>(NKV);
  aa.head_dim = static_cast<int32_t>(D);
  aa.block_size = block_size_;
  aa.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));

  for (int64_t l = 0; l < cfg_.num_layers; ++l) {
    const DeviceLayer& L = w_.layers[static_cast<size_t>(l)];
    cuda::rmsnorm(x, nullptr, L.attn_norm, hn, T, H, eps, stream_);
    gemm_.run(hn, L.wqkv, qkv, T, QKV, H, /*accumulate=*/false, stream_);
    ra.bias = L.bqkv;
    ra.q_norm = L.q_norm;
    ra.k_norm = L.k_norm;
    ra.k_cache = kc(l);
    ra.v_cache = vc(l);
    ra.k_pool = kp(l);
    ra.v_pool = vp(l);
    cuda::qkv_rope_append(ra, stream_);
    aa.k_cache = kc(l);
    aa.v_cache = vc(l);
    cuda::attention(aa, decode, stream_);
    gemm_.run(attn, L.wo, x, T, H, QS, /*accumulate=*/true, stream_);
    cuda::rmsnorm(x, nullptr, L.ffn_norm, hn, T, H, eps, stream_);
    gemm_.run(hn, L.w_gate_up, gu, T, 2 * I, H, stream_);
    cuda::silu_mul(gu, act, T, I, stream_);
    gemm_.run(act, L.w_down, x, T, H, I, /*accumulate=*/true, stream_);
  }

  // Output rows: final norm of the gathered rows, then the LM head unless hidden states were asked for.
  const int32_t* out_rows = meta_.dev<int32_t>(o_out);
  const void* result = nullptr;
  if (hidden_out) {
    cuda::rmsnorm(x, out_rows, w_.final_norm, rows_.as<float>(), R, H, eps, stream_);  // [R, H] f32
    out.resize(static_cast<size_t>(R * H));
    result = rows_.data();
  } else {
    cuda::rmsnorm(x, out_rows, w_.final_norm, rows_.as<bf16>(), R, H, eps, stream_);  // [R, H] bf16
    gemm_.run(rows_.as<bf16>(), w_.lm_head, logits_.as<float>(), R, V, H, false, stream_);  // [R, V] f32
    if (b.output == ForwardBatch::Output::kArgmax || b.output == ForwardBatch::Output::kSample) {  // only [R] ids cross PCIe
      argmax_.reserve(static_cast<size_t>(std::max<int64_t>(R, 1)) * 4);
      if (b.output == ForwardBatch::Output::kArgmax)
        cuda::argmax_rows(logits_.as<float>(), R, V, argmax_span(b, V), argmax_.as<int32_t>(), stream_);
      else
        cuda::sample_rows(logits_.as<float>(), R, V, argmax_span(b, V), meta_.dev<RowSampling>(o_samp),
                          argmax_.as<int32_t>(), stream_);
      out.resize(static_cast<size_t>(R));
      result = argmax_.data();
    } else {
      out.resize(static_cast<size_t>(R * V));
      result = logits_.data();
    }
  }
  CUDA_CHECK(cudaEventRecord(ev_stop_, stream_));
  const size_t out_bytes = out.size() * 4;
  out_host_.reserve(std::max<size_t>(out_bytes, 4));
  if (out_bytes > 0)
    CUDA_CHECK(cudaMemcpyAsync(out_host_.as<char>(), result, out_bytes, cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  // Pinned -> the caller's vector, in parallel (32 rows of logits are 16 MB).
  const int64_t chunk = 1 << 20, n_chunks = static_cast<int64_t>((out_bytes + chunk - 1) / chunk);
#pragma omp parallel for schedule(static) if (n_chunks > 1)
  for (int64_t c = 0; c < n_chunks; ++c) {
    const size_t off = static_cast<size_t>(c * chunk);
    std::memcpy(reinterpret_cast<char*>(out.data()) + off, out_host_.as<char>() + off,
                std::min<size_t>(static_cast<size_t>(chunk), out_bytes - off));
  }
  if (b.output == ForwardBatch::Output::kArgmax || b.output == ForwardBatch::Output::kSample)  // [R] int32 ids -> floats
    for (float& v : out) v = static_cast<float>(std::bit_cast<int32_t>(v));
  CUDA_CHECK(cudaEventElapsedTime(&last_gpu_ms_, ev_start_, ev_stop_));
}

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
  CUDA_CHECK(cudaEventRecord(ev_start_, stream_));
  meta_.upload(stream_);
  cuda::InjectArgs a;
  a.k_pool = k_pool_.as<bf16>();
  a.v_pool = v_pool_.as<bf16>();
  a.k_cache = k_cache_.as<bf16>();
  a.v_cache = v_cache_.as<bf16>();
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
  CUDA_CHECK(cudaEventRecord(ev_stop_, stream_));
  // Waits so that last_gpu_ms() is this injection's time (the next forward would queue behind it anyway).
  CUDA_CHECK(cudaEventSynchronize(ev_stop_));
  CUDA_CHECK(cudaEventElapsedTime(&last_gpu_ms_, ev_start_, ev_stop_));
}

void CudaBackendImpl::read_rows(const DeviceBuffer& kb, const DeviceBuffer& vb, int64_t layer_stride,
                                const std::vector<int64_t>& slots, std::vector<float>& k, std::vector<float>& v) {
  const int64_t n = static_cast<int64_t>(slots.size()), L = cfg_.num_layers;
  const size_t elems = static_cast<size_t>(L * n * row_);
  k.assign(elems, 0.0f);
  v.assign(elems, 0.0f);
  if (n == 0) return;
  const int64_t* d_slots = upload_slots(slots, elems);
  std::vector<uint16_t> h(elems);
  for (int which = 0; which < 2; ++which) {
    const DeviceBuffer& src = which == 0 ? kb : vb;
    cuda::copy_rows(src.as<bf16>(), io_.as<bf16>(), d_slots, n, row_, static_cast<int32_t>(L),
                    layer_stride, n * row_, /*scatter=*/false, stream_);
    CUDA_CHECK(cudaMemcpyAsync(h.data(), io_.data(), elems * 2, cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    std::vector<float>& dst = which == 0 ? k : v;
    for (size_t i = 0; i < elems; ++i) dst[i] = bf16_to_f32(h[i]);
  }
}

void CudaBackendImpl::write_pool(const std::vector<int64_t>& slots, const std::vector<float>& k,
                                 const std::vector<float>& v) {
  check_slots(slots, num_pool_blocks_, "pool");
  const int64_t n = static_cast<int64_t>(slots.size()), L = cfg_.num_layers;
  const size_t elems = static_cast<size_t>(L * n * row_);
  IS_CHECK(k.size() == elems && v.size() == elems, "write_pool sizes");
  if (n == 0) return;
  const int64_t* d_slots = upload_slots(slots, elems);
  std::vector<uint16_t> h(elems);
  for (int which = 0; which < 2; ++which) {
    const std::vector<float>& src = which == 0 ? k : v;
    for (size_t i = 0; i < elems; ++i) h[i] = f32_to_bf16(src[i]);
    CUDA_CHECK(cudaMemcpyAsync(io_.data(), h.data(), elems * 2, cudaMemcpyHostToDevice, stream_));
    DeviceBuffer& dst = which == 0 ? k_pool_ : v_pool_;
    cuda::copy_rows(io_.as<bf16>(), dst.as<bf16>(), d_slots, n, row_, static_cast<int32_t>(L), n * row_,
                    pool_layer_stride_, /*scatter=*/true, stream_);
    CUDA_CHECK(cudaStreamSynchronize(stream_));  // h is reused for v
  }
}

}  // namespace

std::string cuda_unsupported_reason(const ModelConfig& cfg) {
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
  return std::make_unique<CudaBackendImpl>(cfg, DeviceWeights::upload(cfg, weights), opts);
}

std::unique_ptr<CudaBackend> make_cuda_backend_random(const ModelConfig& cfg, uint64_t seed,
                                                      const BackendOptions& opts) {
  require_supported(cfg);
  return std::make_unique<CudaBackendImpl>(cfg, DeviceWeights::random(cfg, seed), opts);
}

}  // namespace inferscale
