#include "backend/cuda/cuda_forward_ops.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/probe_shape.h"
#include "util/check.h"

namespace inferscale {
namespace {

using bf16 = __nv_bfloat16;

template <class T>
T* p(Act a) { return static_cast<T*>(a.data); }
template <class T>
const T* w(const Weight& x) { return static_cast<const T*>(x.impl); }

}  // namespace

CudaForwardOps::CudaForwardOps(const ModelConfig& cfg, const CudaKv& kv, RopeTable& rope, int32_t block_size,
                               cudaStream_t stream)
    : cfg_(cfg), kv_(kv), rope_(rope), block_size_(block_size), stream_(stream),
      decode_attention_(kDefaultDecodeAttention) {
  for (InFlight& f : slots_) {
    CUDA_CHECK(cudaEventCreate(&f.start));
    CUDA_CHECK(cudaEventCreate(&f.computing));
    CUDA_CHECK(cudaEventCreate(&f.stop));
    CUDA_CHECK(cudaEventCreateWithFlags(&f.copied, cudaEventDisableTiming));
  }
  CUDA_CHECK(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming));
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&num_sms_, cudaDevAttrMultiProcessorCount, device));
}

Weight CudaForwardOps::matrix(std::initializer_list<const HostTensor*> parts) {
  Weight x;
  x.impl = weights_.matrix(parts, x.rows, x.cols);
  return x;
}

Weight CudaForwardOps::vector(std::initializer_list<const HostTensor*> parts) {
  bool any = false;
  for (const HostTensor* t : parts) any = any || !t->empty();
  if (!any) return {};
  Weight x;
  x.rows = 1;
  x.impl = weights_.vector(parts, x.cols);
  return x;
}

Weight CudaForwardOps::random_matrix(int64_t rows, int64_t cols, uint64_t seed, float std) {
  return Weight{weights_.random_matrix(rows, cols, seed, std), rows, cols};
}

Weight CudaForwardOps::filled_vector(int64_t n, float value) { return Weight{weights_.filled_vector(n, value), 1, n}; }

Weight CudaForwardOps::projection(std::initializer_list<const HostTensor*> parts) {
  Weight x;
  DeviceWeightStore::stacked_shape(parts, x.rows, x.cols);
  if (!e4m3_projections_ || !Gemm::e4m3_supports(x.rows, x.cols)) return matrix(parts);
  const DeviceWeightStore::Codes c = weights_.matrix_e4m3(parts, x.rows, x.cols);
  x.impl = c.codes;
  x.scale = c.scale;
  return x;
}

Weight CudaForwardOps::random_projection(int64_t rows, int64_t cols, uint64_t seed, float std) {
  if (!e4m3_projections_ || !Gemm::e4m3_supports(rows, cols)) return random_matrix(rows, cols, seed, std);
  const DeviceWeightStore::Codes c = weights_.random_matrix_e4m3(rows, cols, seed, std);
  return Weight{c.codes, rows, cols, c.scale};
}

void CudaForwardOps::abort_forward() noexcept {
  ws_ = &eager_;
  row_amax_of_ = nullptr;
}

CudaForwardOps::GraphState CudaForwardOps::graph_state() const {
  GraphState st{{graph_ws_.meta.device_data(), graph_ws_.part_o.data(), graph_ws_.part_lse.data(), rope_.cos(), rope_.sin(),
                 fact_slots_.device_data()},
                graph_launch_};
  for (const DeviceBuffer& a : graph_ws_.acts) st.pointers.push_back(a.data());
  return st;
}

CudaForwardOps::~CudaForwardOps() {
  for (InFlight& f : slots_)
    for (cudaEvent_t e : {f.start, f.computing, f.stop, f.copied})
      if (e != nullptr) cudaEventDestroy(e);
  if (fork_ != nullptr) cudaEventDestroy(fork_);
  if (join_ != nullptr) cudaEventDestroy(join_);
  if (side_ != nullptr) cudaStreamDestroy(side_);
}

void CudaForwardOps::check(const ForwardBatch& b) const {
  check_forward_batch(b, kv_.cache_slots, block_size_, kv_.pool_slots, cfg_.vocab_size);
  IS_CHECK(!b.reads_facts_in_place() || (!kv_.cache.fp8 && !kv_.pool.fp8 && kv_.pool.k != nullptr),
           "facts are read in place from a bf16 pool into a bf16 cache's attention only");
  IS_CHECK(b.probes.empty() || cfg_.head_dim % 8 == 0, "attention probes need a head_dim that is a multiple of 8, not {}",
           cfg_.head_dim);
}

void CudaForwardOps::begin(const ForwardBatch& b, AttnMask mask) {
  check(b);
  mask_ = mask;
  start(b, eager_);
}

void CudaForwardOps::begin_graph(const ForwardBatch& padded, AttnMask mask) {
  // Its dummy sequences are in the scratch blocks past the cache's (graph_batch.h).
  check_forward_batch(padded, kv_.cache_slots + kv_.scratch_slots, block_size_, kv_.pool_slots, cfg_.vocab_size);
  mask_ = mask;
  start(padded, graph_ws_);
}

// A forward's start: the attention plans (step_attention.h) and one upload of the batch's metadata.
void CudaForwardOps::start(const ForwardBatch& b, Workspace& ws) {
  IS_CHECK(pending() < kMaxPending, "a forward began with {} pending (CudaForwardOps::complete_oldest)", pending());
  batch_ = &b;
  ws_ = &ws;
  row_amax_of_ = nullptr;
  split_attention_ = false;
  facts_ = false;
  InFlight& f = slot(finished_);
  CUDA_CHECK(cudaEventRecord(f.start, stream_));
  f.probe_n = static_cast<size_t>(b.probe_mass_size());
  if (f.probe_n > 0) {
    f.probe_dev.reserve(f.probe_n * sizeof(float));
    CUDA_CHECK(cudaMemsetAsync(f.probe_dev.data(), 0, f.probe_n * sizeof(float), stream_));
  }
  if (b.num_tokens() == 0) {
    CUDA_CHECK(cudaEventRecord(f.computing, stream_));
    return;
  }
  int32_t max_pos = 0;
  for (int32_t p : b.positions) max_pos = std::max(max_pos, p);
  rope_.ensure(max_pos);
  const bool bidirectional = mask_ == AttnMask::kBidirectional;
  if (bidirectional) mask_pos_ = cuda::mask_positions(b, true);
  const cuda::StepAttention attn = plan_attention_of(b);
  upload_metadata(b, attn);
}

cuda::StepAttention CudaForwardOps::plan_attention_of(const ForwardBatch& b) {
  const int32_t group = static_cast<int32_t>(cfg_.num_heads / cfg_.num_kv_heads);
  int32_t one_token = 0;  // sequences with one new token
  for (int32_t s = 0; s < b.num_seqs(); ++s) one_token += b.q_indptr[s + 1] - b.q_indptr[s] == 1;
  const bool decode_mma = group <= cuda::kDecodeMaxGroup && cuda::decode_kernel_supports_head_dim(static_cast<int32_t>(cfg_.head_dim));
  const cuda::AttnKernel decode_kernel = decode_mma ? decode_kernel_for(one_token) : cuda::AttnKernel::kTiles;
  const int32_t* mask_pos = mask_ == AttnMask::kBidirectional ? mask_pos_.data() : b.positions.data();
  cuda::StepAttention attn = cuda::plan_step_attention(b, mask_pos, group, static_cast<int32_t>(cfg_.num_kv_heads), num_sms_,
                                                       decode_kernel, in_graph());
  split_attention_ = attn.split;
  attn_kernel_ = attn.kernel;
  if (attn.split) decode_kernel_ = attn.decode_kernel;
  if (in_graph())
    graph_launch_ = {b.num_tokens(), b.num_seqs(), static_cast<int64_t>(b.output_tokens.size()), static_cast<int64_t>(attn_kernel_),
                     attn.options.rows_per_tile, attn.options.min_split_len, attn.capacity.items, attn.capacity.partials,
                     attn.capacity.merges, attn.merge_rows};
  return attn;
}

// One upload of every per-forward array; the block table last (then the fed tokens' rows, which
// no graph reads), so that for a graph every other offset is the same at any context length (the
// graph workspace is sized for the whole cache). The facts' pool slots stay on the device
// (ResidentUpload). Then the attention arguments that point into it.
void CudaForwardOps::upload_metadata(const ForwardBatch& b, const cuda::StepAttention& attn) {
  const int64_t T = b.num_tokens();
  const int32_t S = b.num_seqs();
  const AttnPlan& plan = attn.plan;
  const AttnPlan& decode_plan = attn.decode_plan;
  const AttnPlanCapacity& cap = attn.capacity;
  const std::vector<int32_t> counts{static_cast<int32_t>(plan.items.size()), static_cast<int32_t>(plan.merges.size())};
  std::vector<int64_t> capture(b.capture_tokens.empty() ? 0 : static_cast<size_t>(T), -1);  // [T] pool slot or -1
  for (size_t c = 0; c < b.capture_tokens.size(); ++c) capture[static_cast<size_t>(b.capture_tokens[c])] = b.capture_slots[c];
  IS_CHECK(capture.empty() || kv_.pool_slots > 0, "capture needs a memory pool");
  capture_ = !capture.empty();

  MetaUpload& meta = ws_->meta;
  const size_t kv_room = in_graph() ? std::max<size_t>(b.kv_indices.size(), (kv_.cache_slots + kv_.scratch_slots) / block_size_ + S)
                                           : b.kv_indices.size();
  meta.begin(MetaUpload::bytes<int32_t>(T) * 3 + MetaUpload::bytes<int64_t>(T) * 2 +
             MetaUpload::bytes<int32_t>(b.kv_indptr.size()) + MetaUpload::bytes<int32_t>(kv_room) +
             MetaUpload::bytes<int32_t>(b.output_tokens.size()) + MetaUpload::bytes<AttnWorkItem>(cap.items) +
             MetaUpload::bytes<AttnMergeItem>(cap.merges) + MetaUpload::bytes<AttnWorkItem>(decode_plan.items.size()) +
             MetaUpload::bytes<AttnMergeItem>(decode_plan.merges.size()) + MetaUpload::bytes<RowSampling>(b.sampling.size()) +
             MetaUpload::bytes<int32_t>(2) + MetaUpload::bytes<int32_t>(b.fact_indptr.size()) * 2 +
             MetaUpload::bytes<int32_t>(b.token_src.size()) + 4096);
  o_ids_ = meta.add(b.token_ids);
  o_pos_ = meta.add(b.positions);
  o_mask_pos_ = mask_ == AttnMask::kBidirectional ? meta.add(mask_pos_) : o_pos_;
  o_slot_ = meta.add(b.slot_mapping);
  o_cap_ = meta.add(capture);
  AttentionOffsets o;
  o.kv_indptr = meta.add(b.kv_indptr);
  o_out_ = meta.add(b.output_tokens);
  o_samp_ = meta.add(b.sampling);
  o.counts = meta.add(counts);
  o.items = meta.add(plan.items, static_cast<size_t>(cap.items));
  o.merges = meta.add(plan.merges, static_cast<size_t>(cap.merges));
  o.decode_items = meta.add(decode_plan.items);
  o.decode_merges = meta.add(decode_plan.merges);
  // Facts read in place: their per-sequence arrays before the block table; their pool slots stay
  // on the device between forwards (fact_slots_), uploaded when they change.
  facts_ = b.reads_facts_in_place();
  if (facts_) {
    o.fact_indptr = meta.add(b.fact_indptr);
    o.fact_start = meta.add(b.fact_start);
  }
  o.kv_indices = meta.add(b.kv_indices);
  // Fed tokens' rows after everything a graph reads: only the feed, launched outside any graph,
  // reads them, so a batch with them replays the graph of one without.
  const size_t o_src = meta.add(b.token_src);
  // Partials: [cap.partials, NKV, rows_per_tile] rows of the main plan, then the decode plan's
  // [num_partials, NKV, group] rows.
  const int64_t D = cfg_.head_dim, NKV = cfg_.num_kv_heads;
  o.main_rows = static_cast<size_t>(std::max(cap.partials, 1)) * NKV * plan.rows_per_tile;
  const size_t decode_rows = static_cast<size_t>(decode_plan.num_partials) * NKV * (cfg_.num_heads / NKV);
  ws_->part_o.reserve((o.main_rows + decode_rows) * D * 4);
  ws_->part_lse.reserve((o.main_rows + decode_rows) * 4);

  if (profiling()) profiler_.start("upload", stream_);
  if (facts_) fact_slots_dev_ = fact_slots_.update(b.fact_slots, stream_);
  meta.upload(stream_);
  feed_tokens(b, o_src);
  CUDA_CHECK(cudaEventRecord(slot(finished_).computing, stream_));
  set_attention_args(attn, o);
}

// Fed tokens take their ids from the forward before's, which it left in fed_ids_ (finish()); the
// stream orders the feed after that forward and before this one's embedding.
void CudaForwardOps::feed_tokens(const ForwardBatch& b, size_t o_src) {
  if (b.token_src.empty()) return;
  int32_t max_row = -1;
  for (const int32_t r : b.token_src) max_row = std::max(max_row, r);
  if (max_row < 0) return;
  IS_CHECK(max_row < fed_rows_, "a token is fed row {} of a forward with {} ids", max_row, std::max<int64_t>(fed_rows_, 0));
  cuda::feed_tokens(ws_->meta.dev<int32_t>(o_ids_), ws_->meta.dev<int32_t>(o_src), fed_ids_.as<int32_t>(), b.num_tokens(),
                    stream_);
}

void CudaForwardOps::set_attention_args(const cuda::StepAttention& attn, const AttentionOffsets& o) {
  const MetaUpload& meta = ws_->meta;
  const int64_t D = cfg_.head_dim;
  aa_ = cuda::AttentionArgs{};
  aa_.positions = meta.dev<int32_t>(o_mask_pos_);
  aa_.kv_indptr = meta.dev<int32_t>(o.kv_indptr);
  aa_.kv_indices = meta.dev<int32_t>(o.kv_indices);
  aa_.items = meta.dev<AttnWorkItem>(o.items);
  aa_.merges = meta.dev<AttnMergeItem>(o.merges);
  aa_.partial_o = ws_->part_o.as<float>();
  aa_.partial_lse = ws_->part_lse.as<float>();
  aa_.num_items = attn.capacity.items;
  aa_.num_merges = attn.capacity.merges;
  aa_.counts = in_graph() ? meta.dev<int32_t>(o.counts) : nullptr;
  aa_.rows_per_tile = attn.plan.rows_per_tile;
  aa_.merge_rows = attn.merge_rows;
  aa_.num_heads = static_cast<int32_t>(cfg_.num_heads);
  aa_.num_kv_heads = static_cast<int32_t>(cfg_.num_kv_heads);
  aa_.head_dim = static_cast<int32_t>(D);
  aa_.block_size = block_size_;
  aa_.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  if (facts_) {
    aa_.fact_indptr = meta.dev<int32_t>(o.fact_indptr);
    aa_.fact_start = meta.dev<int32_t>(o.fact_start);
    aa_.fact_slots = fact_slots_dev_;
    aa_.cos_table = rope_.cos();
    aa_.sin_table = rope_.sin();
    aa_.interleaved = rope_.interleaved();
  }
  if (!attn.split) return;
  const AttnPlan& decode_plan = attn.decode_plan;
  decode_aa_ = aa_;
  decode_aa_.items = meta.dev<AttnWorkItem>(o.decode_items);
  decode_aa_.merges = meta.dev<AttnMergeItem>(o.decode_merges);
  decode_aa_.partial_o = ws_->part_o.as<float>() + o.main_rows * D;
  decode_aa_.partial_lse = ws_->part_lse.as<float>() + o.main_rows;
  decode_aa_.num_items = static_cast<int32_t>(decode_plan.items.size());
  decode_aa_.num_merges = static_cast<int32_t>(decode_plan.merges.size());
  decode_aa_.rows_per_tile = decode_plan.rows_per_tile;
  decode_aa_.merge_rows = decode_plan.max_merge_rows;
}

void* CudaForwardOps::buffer(int slot, size_t bytes) {
  IS_CHECK(slot >= 0 && slot < 64, "activation slot {} out of range", slot);
  std::vector<DeviceBuffer>& acts = ws_->acts;
  const size_t need = std::max<size_t>(bytes, 256);
  if (static_cast<size_t>(slot) >= acts.size()) acts.resize(static_cast<size_t>(slot) + 1);
  DeviceBuffer& buf = acts[static_cast<size_t>(slot)];
  buf.reserve(need);
  return buf.data();
}

Act CudaForwardOps::act(int slot, int64_t rows, int64_t cols, ActType type) {
  IS_CHECK(slot < kQuantCodes, "activation slot {} is the backend's scratch", slot);
  const size_t elem = type == ActType::kF32 ? 4 : 2;
  return Act{buffer(slot, static_cast<size_t>(rows * cols) * elem), rows, cols, type};
}

void CudaForwardOps::embed(const Weight& table, EmbedIndex index, Act x, bool accumulate) {
  mark("embedding");
  if (index == EmbedIndex::kTokenIds && !accumulate) {
    cuda::embedding(w<bf16>(table), ws_->meta.dev<int32_t>(o_ids_), p<float>(x), x.rows, x.cols, stream_);
    return;
  }
  const int32_t* rows = index == EmbedIndex::kTokenIds   ? ws_->meta.dev<int32_t>(o_ids_)
                        : index == EmbedIndex::kPositions ? ws_->meta.dev<int32_t>(o_pos_)
                                                          : nullptr;  // kFirstRow
  cuda::embedding_rows(w<bf16>(table), rows, accumulate, p<float>(x), x.rows, x.cols, stream_);
}

void CudaForwardOps::rms_norm(Act x, const Weight& wt, Act y, float eps, bool output_rows) {
  mark("rms_norm");
  const int32_t* rows = output_rows ? ws_->meta.dev<int32_t>(o_out_) : nullptr;
  if (y.type == ActType::kCompute) {
    // With FP8 projections the norm's output feeds one (QKV, gate/up): its row maxima come along,
    // and the projection's quantization skips its own pass over x (linear_e4m3).
    float* row_amax = e4m3_projections_ && !output_rows ? row_amax_for(y) : nullptr;
    cuda::rmsnorm(p<float>(x), rows, w<float>(wt), p<bf16>(y), y.rows, y.cols, eps, stream_, row_amax);
  } else {
    cuda::rmsnorm(p<float>(x), rows, w<float>(wt), p<float>(y), y.rows, y.cols, eps, stream_);
  }
}

void CudaForwardOps::layer_norm(Act x, const Weight& wt, const Weight& b, Act y, float eps) {
  mark("layer_norm");
  IS_CHECK(x.type == ActType::kF32 && x.rows == y.rows && x.cols == y.cols, "layer_norm [{}, {}] into [{}, {}]", x.rows,
           x.cols, y.rows, y.cols);
  if (y.type == ActType::kF32) {
    cuda::layer_norm(p<float>(x), w<float>(wt), w<float>(b), p<float>(y), x.rows, x.cols, eps, stream_);
  } else {
    cuda::layer_norm(p<float>(x), w<float>(wt), w<float>(b), p<bf16>(y), x.rows, x.cols, eps, stream_);
  }
}

void CudaForwardOps::gelu(Act x) {
  mark("gelu");
  if (x.type == ActType::kF32) {
    cuda::gelu(p<float>(x), x.rows * x.cols, stream_);
  } else {
    cuda::gelu(p<bf16>(x), x.rows * x.cols, stream_);
  }
}

void CudaForwardOps::gather_output_rows(Act x, Act rows) {
  mark("gather_output_rows");
  IS_CHECK(x.type == ActType::kF32 && rows.type == ActType::kF32 && rows.cols == x.cols &&
               rows.rows == static_cast<int64_t>(batch_->output_tokens.size()),
           "output rows [{}, {}] of [{}, {}]", rows.rows, rows.cols, x.rows, x.cols);
  cuda::gather_rows(p<float>(x), ws_->meta.dev<int32_t>(o_out_), p<float>(rows), rows.rows, rows.cols, stream_);
}

void CudaForwardOps::linear(Act x, const Weight& wt, const Weight& bias, Act y, bool accumulate) {
  mark_shape("linear", wt);
  IS_CHECK(x.type == ActType::kCompute && x.cols == wt.cols && y.cols == wt.rows && x.rows == y.rows,
           "linear [{}, {}] x [{}, {}]^T into [{}, {}]", x.rows, x.cols, wt.rows, wt.cols, y.rows, y.cols);
  IS_CHECK(y.type == ActType::kF32 || !accumulate, "a GEMM accumulates into f32 outputs only");
  IS_CHECK(bias.empty() || bias.cols == wt.rows, "a bias of {} for {} outputs", bias.cols, wt.rows);
  if (wt.quantized()) {
    linear_e4m3(x, wt, y, accumulate);
  } else {
    row_amax_of_ = nullptr;  // a bf16 weight (a shape FP8 does not take): the maxima go unused
    if (y.type == ActType::kF32) {
      gemm_.run(p<bf16>(x), w<bf16>(wt), p<float>(y), x.rows, wt.rows, wt.cols, accumulate, stream_);
    } else {
      gemm_.run(p<bf16>(x), w<bf16>(wt), p<bf16>(y), x.rows, wt.rows, wt.cols, stream_);
    }
  }
  if (bias.empty()) return;
  if (y.type == ActType::kF32) {
    cuda::add_bias(p<float>(y), w<float>(bias), y.rows, y.cols, stream_);
  } else {
    cuda::add_bias(p<bf16>(y), w<float>(bias), y.rows, y.cols, stream_);
  }
}

// NCCL's in-place sum, queued on the forward's stream like any kernel.
void CudaForwardOps::all_reduce(Act y) {
  if (comm_ != nullptr) comm_->sum(p<float>(y), y.rows * y.cols, stream_);
}

float* CudaForwardOps::row_amax_for(Act out) {
  row_amax_of_ = out.data;
  return static_cast<float*>(buffer(kQuantRowAmax, static_cast<size_t>(out.rows) * 4));
}

void CudaForwardOps::linear_e4m3(Act x, const Weight& wt, Act y, bool accumulate) {
  const int64_t M = x.rows, N = wt.rows, K = wt.cols;
  const bool f32_out = y.type == ActType::kF32;
  const float* w_scale = static_cast<const float*>(wt.scale);
  // W8A8 at every size, x's codes and scale into the scratch slots, then cuBLASLt's FP8 GEMM: in
  // graphed decode steps it beat W8A16 GEMVs (CUDA-core and tensor-core) even at one row, as the
  // quantization of x hides behind its neighbours (PDL) and the row maxima come from RMSNorm or
  // the SiLU (bench_cuda_serving (b): batch-1 decode 4.11 against 4.90 ms on the H100).
  auto* codes = static_cast<uint8_t*>(buffer(kQuantCodes, static_cast<size_t>(M * K)));
  auto* row_amax = static_cast<float*>(buffer(kQuantRowAmax, static_cast<size_t>(M) * 4));
  auto* x_scale = static_cast<float*>(buffer(kQuantScale, 4));
  const bool amax_ready = x.data == row_amax_of_;  // x is rms_norm's or silu_mul's output
  row_amax_of_ = nullptr;
  cuda::quantize_e4m3_tensor(p<bf16>(x), M, K, row_amax, codes, x_scale, stream_, amax_ready);
  gemm_.run_e4m3(codes, x_scale, w<uint8_t>(wt), w_scale, y.data, f32_out, accumulate, M, N, K, stream_);
}

void CudaForwardOps::qkv(Act qkv, const QkvStep& step, int32_t layer, Act q) {
  mark("qkv_rope_append");
  const int64_t l = layer;
  cuda::QkvRopeAppendArgs ra;
  ra.qkv = p<float>(qkv);
  ra.bias = w<float>(step.bias);
  ra.q_norm = w<float>(step.q_norm);
  ra.k_norm = w<float>(step.k_norm);
  ra.cos_table = step.rope ? rope_.cos() : nullptr;  // none: an encoder's heads, not rotated
  ra.sin_table = step.rope ? rope_.sin() : nullptr;
  ra.positions = ws_->meta.dev<int32_t>(o_pos_);
  ra.slot_mapping = ws_->meta.dev<int64_t>(o_slot_);
  ra.capture_slot = capture_ ? ws_->meta.dev<int64_t>(o_cap_) : nullptr;
  ra.q_out = p<bf16>(q);
  ra.cache = kv_.cache.layer(l, kv_.cache_layer_stride, cfg_.head_dim);
  if (kv_.pool.k != nullptr) ra.pool = kv_.pool.layer(l, kv_.pool_layer_stride, cfg_.head_dim);
  ra.T = qkv.rows;
  ra.num_heads = static_cast<int32_t>(cfg_.num_heads);
  ra.num_kv_heads = static_cast<int32_t>(cfg_.num_kv_heads);
  ra.head_dim = static_cast<int32_t>(cfg_.head_dim);
  ra.eps = step.eps;
  ra.interleaved = rope_.interleaved();
  cuda::qkv_rope_append(ra, stream_);
}

void CudaForwardOps::attention(Act q, int32_t layer, Act out) {
  mark("attention");
  aa_.q = p<bf16>(q);
  aa_.out = p<bf16>(out);
  aa_.cache = kv_.cache.layer(layer, kv_.cache_layer_stride, cfg_.head_dim);
  if (facts_) aa_.pool = kv_.pool.layer(layer, kv_.pool_layer_stride, cfg_.head_dim);
  if (!split_attention_) {
    cuda::attention(aa_, attn_kernel_, stream_);
    probe_attention(layer);
    return;
  }
  // A mixed batch (begin()): the prefills' tiles on side_ (from the QKV step's end to before
  // o_proj), the decodes on the decode kernel beside them on stream_. The two read q and the cache
  // and write disjoint rows of `out` and their own partials.
  decode_aa_.q = aa_.q;
  decode_aa_.out = aa_.out;
  decode_aa_.cache = aa_.cache;
  decode_aa_.pool = aa_.pool;
  CUDA_CHECK(cudaEventRecord(fork_, stream_));
  CUDA_CHECK(cudaStreamWaitEvent(side_, fork_));
  cuda::attention(aa_, attn_kernel_, side_);
  mark("attention, mixed step's decodes");
  cuda::attention(decode_aa_, decode_kernel_, stream_);
  CUDA_CHECK(cudaEventRecord(join_, side_));
  CUDA_CHECK(cudaStreamWaitEvent(stream_, join_));
  probe_attention(layer);
}

void CudaForwardOps::probe_attention(int32_t layer) {
  const ForwardBatch& b = *batch_;
  if (b.probes.empty()) return;
  IS_CHECK(!in_graph(), "a forward with attention probes runs eagerly");
  mark("attention probes");
  float* mass = slot(finished_).probe_dev.as<float>();
  for (const ForwardBatch::Probe& p : b.probes) {
    cuda::AttentionMassArgs a;
    a.s = probe_mass_shape(b, p, cfg_, block_size_);
    if (layer >= p.first_layer) {
      a.q = aa_.q + static_cast<int64_t>(p.first_token) * cfg_.num_heads * cfg_.head_dim;
      a.cache = aa_.cache;
      a.positions = aa_.positions + p.first_token;  // a causal mask's positions are the tokens'
      a.blocks = aa_.kv_indices + b.kv_indptr[p.seq];
      cuda::attention_mass(a, mass, stream_);
    }
    mass += static_cast<int64_t>(a.s.rows) * a.s.keys();
  }
}

cuda::AttnKernel CudaForwardOps::decode_kernel_for(int32_t num_seqs) const {
  switch (decode_attention_) {
    case DecodeAttention::kTensorCore: return cuda::AttnKernel::kTiles;
    case DecodeAttention::kMma: return cuda::AttnKernel::kDecodeMma;
    case DecodeAttention::kAuto: return num_seqs >= kDecodeMmaMinSeqs ? cuda::AttnKernel::kDecodeMma : cuda::AttnKernel::kTiles;
  }
  return cuda::AttnKernel::kTiles;
}

void CudaForwardOps::silu_mul(Act gu, Act out) {
  mark("silu_mul");
  // With FP8 projections the output feeds the down projection: its row maxima come along, as
  // rms_norm's do, where they save a kernel: a small x is quantized by one kernel of one block
  // anyway, and the SiLU over one block a row is slower than over the grid (batch-1 FP8 decode
  // 4.12-4.15 against 4.02-4.04 ms on the H100, bench_cuda_serving (b)).
  float* row_amax =
      e4m3_projections_ && !cuda::quantize_e4m3_in_one_block(out.rows, out.cols) ? row_amax_for(out) : nullptr;
  cuda::silu_mul(p<bf16>(gu), p<bf16>(out), out.rows, out.cols, stream_, row_amax);
}

void CudaForwardOps::linear_silu_mul(Act x, const Weight& wt, Act gu, Act out) {
  if (wt.quantized() || !gemm_.gemv_path(x.data, wt.impl, x.rows, wt.cols)) {  // cuBLASLt into gu, then the SiLU kernel
    ForwardOps::linear_silu_mul(x, wt, gu, out);
    return;
  }
  mark_shape("linear+silu_mul", wt);
  IS_CHECK(x.type == ActType::kCompute && out.type == ActType::kCompute && x.cols == wt.cols &&
               wt.rows == 2 * out.cols && x.rows == out.rows,
           "linear_silu_mul [{}, {}] x [{}, {}]^T into [{}, {}]", x.rows, x.cols, wt.rows, wt.cols, out.rows, out.cols);
  cuda::gemv_silu_mul(p<bf16>(x), w<bf16>(wt), p<bf16>(out), x.rows, out.cols, wt.cols, stream_);
}

void CudaForwardOps::argmax(Act logits, int64_t n, Act ids) {
  mark("argmax");
  cuda::argmax_rows(p<float>(logits), logits.rows, logits.cols, n, p<int32_t>(ids), stream_);
}

void CudaForwardOps::sample(Act logits, int64_t n, Act ids) {
  mark("sample");
  cuda::sample_rows(p<float>(logits), logits.rows, logits.cols, n, ws_->meta.dev<RowSampling>(o_samp_), p<int32_t>(ids), stream_);
}

void CudaForwardOps::finish(Act result, bool ids, ForwardOutput& out) {
  ws_ = &eager_;
  InFlight& f = slot(finished_);
  const int64_t rows = result.rows;
  CUDA_CHECK(cudaEventRecord(f.stop, stream_));
  const size_t n = static_cast<size_t>(rows * result.cols), out_bytes = n * 4;  // f32 values or int32 ids
  f.out_host.reserve(std::max<size_t>(out_bytes, 4));
  if (out_bytes > 0)
    CUDA_CHECK(cudaMemcpyAsync(f.out_host.as<char>(), result.data, out_bytes, cudaMemcpyDeviceToHost, stream_));
  if (f.probe_n > 0) {
    f.probe_host.reserve(f.probe_n * sizeof(float));
    CUDA_CHECK(cudaMemcpyAsync(f.probe_host.as<char>(), f.probe_dev.data(), f.probe_n * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  }
  fed_rows_ = -1;
  if (ids) {  // for the next forward's fed tokens
    fed_ids_.reserve(std::max<size_t>(out_bytes, 4));  // growing waits for this forward's feed (DeviceBuffer)
    if (out_bytes > 0)
      CUDA_CHECK(cudaMemcpyAsync(fed_ids_.data(), result.data, out_bytes, cudaMemcpyDeviceToDevice, stream_));
    fed_rows_ = rows;
  }
  CUDA_CHECK(cudaEventRecord(f.copied, stream_));
  f.out = &out;
  f.n = n;
  f.ids = ids;
  ++finished_;
}

bool CudaForwardOps::running() const {
  if (pending() == 0) return false;
  const cudaError_t e = cudaEventQuery(slots_[completed_ % kSlots].copied);
  if (e == cudaErrorNotReady) return true;
  CUDA_CHECK(e);
  return false;
}

void CudaForwardOps::complete() {
  while (pending() > 0) complete_oldest();
}

void CudaForwardOps::complete_oldest() {
  if (pending() == 0) return;
  const int64_t num = completed_++;  // a failure below leaves it completed: the forward is lost, not retried
  InFlight& f = slot(num);
  CUDA_CHECK(cudaEventSynchronize(f.copied));
  CUDA_CHECK(cudaEventElapsedTime(&last_gpu_ms_, f.start, f.stop));
  last_idle_ms_ = 0.0f;
  if (num > 0) CUDA_CHECK(cudaEventElapsedTime(&last_idle_ms_, slot(num - 1).stop, f.computing));
  if (profiler_.enabled()) profiler_.collect(f.stop);
  const PinnedBuffer& staged = f.out_host;
  ForwardOutput& out = *f.out;
  out.probe_mass.assign(f.probe_host.as<float>(), f.probe_host.as<float>() + f.probe_n);
  const size_t n = f.n, out_bytes = n * 4;
  if (f.ids) {
    out.ids.assign(staged.as<int32_t>(), staged.as<int32_t>() + n);
    out.values.clear();
    return;
  }
  out.ids.clear();
  out.values.resize(n);
  // Pinned -> the caller's vector, in parallel (32 rows of logits are 16 MB).
  const int64_t chunk = 1 << 20, n_chunks = static_cast<int64_t>((out_bytes + chunk - 1) / chunk);
#pragma omp parallel for schedule(static) if (n_chunks > 1)
  for (int64_t c = 0; c < n_chunks; ++c) {
    const size_t off = static_cast<size_t>(c * chunk);
    std::memcpy(reinterpret_cast<char*>(out.values.data()) + off, staged.as<char>() + off,
                std::min<size_t>(static_cast<size_t>(chunk), out_bytes - off));
  }
}

}  // namespace inferscale
