// ForwardOps on the GPU (sm_90), one stream, the host waiting once per forward: finish() queues
// the output's copy to the host, complete() waits for it and fills the caller's ForwardOutput
// (the host works meanwhile: Backend::launch_forward):
//   weights      matrices bf16 (stacked parts stay one matrix: the fused QKV and gate/up GEMMs),
//                vectors f32 (DeviceWeightStore); with set_e4m3_projections (--quantization fp8)
//                the layers' projections as FP8 E4M3 codes and one scale each (W8A8 GEMMs: x
//                quantized per forward with one scale, as vLLM's dynamic per-tensor FP8, at every
//                size). The embedding and the LM head stay bf16.
//   activations  kF32 f32; kCompute bf16 (GEMM inputs)
//   linear       cuBLASLt, bf16 x bf16 -> f32 accumulate; accumulate = beta 1 (the residual adds);
//                cuda::gemv at one row (Gemm::gemv_path), with SiLU * up fused for the gate_up
//                projection (linear_silu_mul)
//   qkv          the fused bias / qk-norm / capture / RoPE / append kernel
//   attention    tensor-core tiles, or for decode steps the tensor-core decode kernel
//                (DecodeAttention), planned in begin() (step_attention.h); a mixed batch runs
//                its decode sequences on the decode kernel and the rest on the tiles; causal
//                only; the cache bf16 or FP8 (CudaKv::cache)
//   encoders   LayerNorm, GELU, biases, position embeddings, the output rows' gather
//              (encoder_ops.cu); heads without RoPE
// Not (yet) on the GPU: bidirectional attention, head_dim 32 (BERT encoders such as MiniLM run on
// the CPU backend; cuda_unsupported_reason says so first).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "backend/cuda/attention_plan.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/nccl_comm.h"
#include "backend/cuda/device_weights.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/meta_upload.h"
#include "backend/cuda/resident_upload.h"
#include "backend/cuda/op_profile.h"
#include "backend/cuda/rope_table.h"
#include "model/config.h"
#include "model/forward_ops.h"

namespace inferscale {

// The KV memory a forward writes (owned by the backend): per layer l, cache rows at
// cache.layer(l, cache_layer_stride) and pool rows at pool.layer(l, pool_layer_stride) ([slots,
// NKV, D] bf16, or FP8 codes and scales; the pool's keys before RoPE).
struct CudaKv {
  cuda::KvCache cache;
  cuda::KvCache pool;  // k, v null without a pool
  int64_t cache_layer_stride = 0, pool_layer_stride = 0;  // elements
  int64_t cache_slots = 0, pool_slots = 0;
  int64_t scratch_slots = 0;  // past cache_slots: the scratch blocks of graph padding (graph_batch.h)
};

class CudaForwardOps final : public ForwardOps {
 public:
  CudaForwardOps(const ModelConfig& cfg, const CudaKv& kv, RopeTable& rope, int32_t block_size, cudaStream_t stream);
  ~CudaForwardOps() override;
  CudaForwardOps(const CudaForwardOps&) = delete;
  CudaForwardOps& operator=(const CudaForwardOps&) = delete;

  // The forwards finish() queued and not completed, oldest first, at most kMaxPending: whether
  // the GPU is still on the oldest (its output not yet copied), the oldest's end (waits; fills
  // the ForwardOutput given to finish(), its GPU time, the op profile), and every one's.
  // Completing with nothing pending does nothing; begin() requires fewer than kMaxPending.
  static constexpr int kMaxPending = 2;
  int pending() const { return static_cast<int>(finished_ - completed_); }
  bool running() const;
  void complete_oldest();
  void complete();
  // Of the forward completed last: its GPU time (from its start to its output rows), and the
  // GPU's idle time before it (from the end of the forward before to its first kernel, after
  // its metadata's upload: anything queued between them counts, none before the first), ms.
  float last_gpu_ms() const { return last_gpu_ms_; }
  float last_idle_ms() const { return last_idle_ms_; }

  // Projections loaded after this call are stored in E4M3 where cuBLASLt's FP8 GEMM takes their
  // shape (rows and cols multiples of 16), bf16 otherwise.
  void set_e4m3_projections(bool on) { e4m3_projections_ = on; }
  // A tensor-parallel rank's group (model/tensor_parallel.h): all_reduce sums over the ranks
  // through it. Null: one GPU, nothing to sum.
  void set_all_reduce(NcclComm* comm) { comm_ = comm; }
  void set_decode_attention(DecodeAttention kind) { decode_attention_ = kind; }
  DecodeAttention decode_attention() const { return decode_attention_; }
  // The batch against the cache requests get (begin() of a graph's batch also admits the scratch
  // blocks past it).
  void check(const ForwardBatch& b) const;
  // begin() of a batch padded for a CUDA graph (graph_batch.h), in the graph workspace: its
  // buffers are the ones graphs point into, apart from eager forwards' (an eager prefill growing
  // its buffers never moves them). The graph runner (graph_runner.h) then runs the architecture's
  // ops, records them, or replays a graph of them, and calls finish().
  void begin_graph(const ForwardBatch& padded, AttnMask mask);
  // What a graph of the forward begun depends on: the addresses its launches read (the graph
  // workspace's buffers, the RoPE table) and the launches' shape (tokens, rows, attention plan
  // sizes). A graph replays only while they are the ones it was recorded with.
  struct GraphState {
    std::vector<const void*> pointers;
    std::vector<int64_t> launch;
    bool operator==(const GraphState&) const = default;
  };
  GraphState graph_state() const;
  // After a forward threw between begin and finish: the next forward starts clean.
  void abort_forward() noexcept;
  // Per-op GPU time of eager forwards (op_profile.h); forwards in the graph workspace are not profiled.
  OpProfiler& profiler() { return profiler_; }
  size_t weight_bytes() const { return weights_.bytes(); }

  Weight matrix(std::initializer_list<const HostTensor*> parts) override;
  Weight vector(std::initializer_list<const HostTensor*> parts) override;
  Weight random_matrix(int64_t rows, int64_t cols, uint64_t seed, float std) override;
  Weight filled_vector(int64_t n, float value) override;
  Weight projection(std::initializer_list<const HostTensor*> parts) override;
  Weight random_projection(int64_t rows, int64_t cols, uint64_t seed, float std) override;

  void begin(const ForwardBatch& b, AttnMask mask) override;
  Act act(int slot, int64_t rows, int64_t cols, ActType type) override;
  void embed(const Weight& table, EmbedIndex index, Act x, bool accumulate) override;
  void rms_norm(Act x, const Weight& w, Act y, float eps, bool output_rows) override;
  void layer_norm(Act x, const Weight& w, const Weight& b, Act y, float eps) override;
  void linear(Act x, const Weight& w, const Weight& bias, Act y, bool accumulate) override;
  int32_t tensor_rank() const override { return comm_ ? comm_->rank() : 0; }
  void all_reduce(Act y) override;
  void qkv(Act qkv, const QkvStep& step, int32_t layer, Act q) override;
  void attention(Act q, int32_t layer, Act out) override;
  void silu_mul(Act gu, Act out) override;
  void linear_silu_mul(Act x, const Weight& w, Act gu, Act out) override;  // one GEMV kernel at gemv sizes
  void gelu(Act x) override;
  void gather_output_rows(Act x, Act rows) override;
  void argmax(Act logits, int64_t n, Act ids) override;
  void sample(Act logits, int64_t n, Act ids) override;
  void finish(Act result, bool ids, ForwardOutput& out) override;

 private:
  ModelConfig cfg_;
  CudaKv kv_;
  RopeTable& rope_;
  int32_t block_size_;
  cudaStream_t stream_;
  NcclComm* comm_ = nullptr;
  int num_sms_ = 132;
  DecodeAttention decode_attention_;
  // A mixed step's prefill tiles run on side_, forked after the QKV step and joined before o_proj.
  cudaStream_t side_ = nullptr;
  cudaEvent_t fork_ = nullptr, join_ = nullptr;
  // The decode kernel decode_attention_ picks for a batch of `num_seqs` one-token sequences
  // (kTiles: none).
  cuda::AttnKernel decode_kernel_for(int32_t num_seqs) const;
  // begin()'s phases: the attention plans (setting the split and kernels), the metadata upload
  // and the attention arguments into it.
  cuda::StepAttention plan_attention_of(const ForwardBatch& b);
  void upload_metadata(const ForwardBatch& b, const cuda::StepAttention& attn);
  // Offsets in the metadata upload of the attention's arrays; main_rows: the main plan's partial rows.
  struct AttentionOffsets {
    size_t kv_indptr = 0, kv_indices = 0, counts = 0, items = 0, merges = 0, decode_items = 0, decode_merges = 0;
    size_t fact_indptr = 0, fact_start = 0;
    size_t main_rows = 0;
  };
  void set_attention_args(const cuda::StepAttention& attn, const AttentionOffsets& o);
  // This layer's share of the batch's probes' weights (ForwardBatch::probes; eager forwards only).
  void probe_attention(int32_t layer);
  DeviceWeightStore weights_;
  bool e4m3_projections_ = false;
  Gemm gemm_;
  // x w^T through cuBLASLt's FP8 GEMM for an E4M3 weight: x quantized into the scratch slots first.
  void linear_e4m3(Act x, const Weight& wt, Act y, bool accumulate);
  // Scratch slots past any architecture's (act() slots are 0..kQuantCodes - 1).
  static constexpr int kQuantCodes = 61, kQuantRowAmax = 62, kQuantScale = 63;
  // Slot `slot`'s buffer with room for `bytes`, grown on demand (in the graph workspace only by a
  // warm-up: graph_runner.h).
  void* buffer(int slot, size_t bytes);
  // The activation whose row maxima rms_norm or silu_mul left in slot kQuantRowAmax (their
  // output), until the next linear layer: an FP8 one's quantization takes them; null: none.
  const void* row_amax_of_ = nullptr;
  // The slot for out's row maxima, which a kernel writing out is about to fill (row_amax_of_ = out).
  float* row_amax_for(Act out);
  // Per-forward device memory. Eager forwards and graphs have their own, so that an eager prefill
  // growing its buffers never moves what a graph points into.
  struct Workspace {
    MetaUpload meta;
    std::vector<DeviceBuffer> acts;  // per slot, grown on demand
    DeviceBuffer part_o, part_lse;   // split-KV partials
  };
  Workspace eager_, graph_ws_;
  Workspace* ws_ = &eager_;
  // begin() and begin_graph(): the checks, then begin()'s phases above, in the workspace `ws`.
  void start(const ForwardBatch& b, Workspace& ws);
  // A forward from its start to its completion, in the ring slot of its number (finished_ when
  // it began): slot n % kSlots holds forward n while n - 1 and n - 2 may still be pending, and
  // forward n - 1's end event is intact until n completes (its idle time).
  struct InFlight {
    PinnedBuffer out_host;  // staging of the output rows (pinned: a fast copy; then into the caller's vector)
    cudaEvent_t start = nullptr, computing = nullptr, stop = nullptr;  // begun, metadata uploaded, output rows made
    cudaEvent_t copied = nullptr;  // after the output's copy to out_host
    ForwardOutput* out = nullptr;  // the caller's output
    size_t n = 0;                  // values or ids
    bool ids = false;
    // ForwardBatch::probes' weights: summed on the device over the layers, then staged.
    DeviceBuffer probe_dev;
    PinnedBuffer probe_host;
    size_t probe_n = 0;
  };
  static constexpr int kSlots = kMaxPending + 1;
  InFlight slots_[kSlots];
  int64_t finished_ = 0, completed_ = 0;  // forwards finish() queued; of them, completed
  InFlight& slot(int64_t n) { return slots_[n % kSlots]; }
  float last_gpu_ms_ = 0.0f, last_idle_ms_ = 0.0f;
  // The pool slots of facts read in place, kept on the device while they do not change (a decode
  // step's are its step before's); this forward's copy.
  ResidentUpload<int32_t> fact_slots_;
  const int32_t* fact_slots_dev_ = nullptr;
  // The ids the last forward returned, on the device (ForwardBatch::token_src reads them): its
  // rows; -1 when it returned values, or none ran.
  DeviceBuffer fed_ids_;
  int64_t fed_rows_ = -1;
  // begin()'s feed: the batch's fed tokens overwrite their ids in the metadata upload.
  void feed_tokens(const ForwardBatch& b, size_t o_src);
  bool in_graph() const { return ws_ == &graph_ws_; }
  std::vector<int64_t> graph_launch_;  // this forward's launch shape (GraphState::launch)
  // This forward is profiled (op_profile.h): profiling on, the eager workspace.
  bool profiling() const { return profiler_.enabled() && !in_graph(); }
  void mark(const char* op) {
    if (profiling()) profiler_.mark(op, stream_);
  }
  // A matrix op, named with its weight's shape ("linear 4096x14336"): the profile tells them apart.
  void mark_shape(const char* op, const Weight& w) {
    if (profiling()) profiler_.mark(std::string(op) + " " + std::to_string(w.rows) + "x" + std::to_string(w.cols), stream_);
  }
  OpProfiler profiler_;
  // Per forward (begin()).
  const ForwardBatch* batch_ = nullptr;
  cuda::AttnKernel attn_kernel_ = cuda::AttnKernel::kTiles;
  // A mixed batch's decode sequences: their own plan and kernel, launched after aa_'s.
  bool split_attention_ = false;
  cuda::AttnKernel decode_kernel_ = cuda::AttnKernel::kDecodeMma;
  cuda::AttentionArgs decode_aa_{};
  // The attention mask of the forward begun, and the positions it masks at (step_attention.h:
  // mask_positions; uploaded at o_mask_pos_, which is o_pos_ under a causal mask).
  AttnMask mask_ = AttnMask::kCausal;
  std::vector<int32_t> mask_pos_;
  size_t o_ids_ = 0, o_pos_ = 0, o_mask_pos_ = 0, o_slot_ = 0, o_cap_ = 0, o_out_ = 0, o_samp_ = 0;
  // The forward reads facts in place (ForwardBatch::fact_*).
  bool facts_ = false;
  bool capture_ = false;
  cuda::AttentionArgs aa_{};
};

}  // namespace inferscale
