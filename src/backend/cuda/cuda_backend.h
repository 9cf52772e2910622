// The CUDA backend (sm_90). Same contract as the CPU reference (backend.h); numbers differ by
// bf16 rounding:
//   weights      matrices bf16 (q/k/v fused into one [(NH + 2 NKV) D, H] matrix, gate/up into
//                one [2 I, H]); norm weights and biases f32
//   residual     f32 [T, H]; o_proj and down_proj add into it inside the GEMM (beta = 1)
//   activations  bf16 GEMM inputs; q/k/v projections f32 out (bias, q/k norm and RoPE in f32)
//   KV cache     bf16, per layer [num_blocks, block_size, NKV, D]; memory pool the same with
//                keys before RoPE
//   GEMMs        cuBLASLt, bf16 x bf16 -> f32 accumulate
//   attention    tensor-core tiles (prefill, mixed batches) or a decode kernel (every sequence has
//                one query token: tensor cores with the kv entries as the MMA's rows, or CUDA
//                cores), split-KV when the batch cannot fill the GPU
//   RoPE         cos/sin tables built in double on the host (Rope::angles), indexed by position
//   launches     a forward's kernels with PDL: each may start while the one before ends
//                (launch.cuh); the GEMV streams its weights meanwhile
//   graphs       decode steps of up to 128 sequences and one-sequence prefills of up to 256 tokens
//                replay a CUDA graph per bucket (graph_batch.h), padded with dummy tokens in
//                scratch blocks past the cache
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/op_profile.h"

namespace inferscale {

// Attention kernel for batches where every sequence has one new token.
enum class DecodeAttention {
  kTensorCore,  // the tensor-core prefill tiles (one token's group rows per tile; idle rows skip the math)
  kMma,         // the tensor-core decode kernel, kv entries as the MMA's rows (attention_decode_mma.cu)
  kAuto,        // kMma for batches of at least kDecodeMmaMinSeqs sequences, kTensorCore below
};
// kAuto's crossover (bench_cuda_serving (b): decode steps over 1,024-token contexts with graphs
// and PDL; H200): at batch 1 the tiles' step is the faster (4.40 against 4.55 ms), from batch 2 on the
// decode kernel (4.61 / 4.65 at 2, 4.99 / 5.12 at 8, 5.99 / 6.26 at 32; 0.28 against 0.30 ms a
// layer at 100 x 2,800 bf16, 0.18 against 0.30 FP8). The graph path decides on the padded batch
// (a bucket), the eager path on the real one; both kernels are twins of the CPU attention.
inline constexpr int32_t kDecodeMmaMinSeqs = 2;
static_assert(kDecodeMmaMinSeqs == 2, "decode_attention_name spells it out");
// What a backend starts with.
inline constexpr DecodeAttention kDefaultDecodeAttention = DecodeAttention::kAuto;
inline const char* decode_attention_name(DecodeAttention k) {
  switch (k) {
    case DecodeAttention::kTensorCore: return "tensor-core tiles";
    case DecodeAttention::kMma: return "tensor-core decode kernel";
    case DecodeAttention::kAuto: return "auto (tiles for one sequence)";
  }
  return "?";
}

// Forwards of the graph path (CudaBackend::graph_stats): eager runs that sized a bucket's
// buffers, captures, replays.
struct GraphStats {
  int64_t eager_warmups = 0, captures = 0, replays = 0;
};

class CudaBackend : public Backend {
 public:
  virtual void set_decode_attention(DecodeAttention kind) = 0;
  // CUDA graphs for decode steps and short prefills (graph_batch.h; on unless
  // BackendOptions::cuda_graphs is false).
  virtual void set_cuda_graphs(bool on) = 0;
  // Programmatic Dependent Launch of the forward's kernels (launch.cuh; on unless
  // BackendOptions::programmatic_launch is false). Process-wide: the kernels' launchers read it.
  virtual void set_programmatic_launch(bool on) = 0;
  virtual GraphStats graph_stats() const = 0;
  // Per-op GPU time of eager forwards (op_profile.h: an event before each op); on: from zero.
  virtual void set_op_profile(bool on) = 0;
  virtual std::vector<OpTime> op_profile() const = 0;
  virtual cudaStream_t stream() const = 0;
  // GPU time of the last forward() or inject() (events on the stream), milliseconds.
  virtual float last_gpu_ms() const = 0;
  // GPU time of the last inject(), readable after later forwards (waits for the injection).
  virtual float last_inject_gpu_ms() const = 0;
  // GPU idle time before the forward completed last, from the end of the one before it to its
  // first kernel (after its metadata upload), ms: what the host's launch left between them
  // (CudaForwardOps::last_idle_ms). Read without waiting.
  virtual float last_idle_ms() const = 0;
  // Bytes of device memory held for weights, KV cache and memory pool.
  virtual int64_t weight_bytes() const = 0;
  virtual int64_t kv_bytes() const = 0;
};

// Empty when the CUDA backend can run a model of this shape; otherwise why it cannot (e.g. its
// attention kernels take head_dim 64 and 128 only). `--device auto` falls back to the CPU then.
std::string cuda_unsupported_reason(const ModelConfig& cfg);

// Uploads `weights` (f32/f16/bf16) as bf16. Uses the current CUDA device.
std::unique_ptr<CudaBackend> make_cuda_backend(const ModelConfig& cfg, const ModelWeights& weights,
                                               const BackendOptions& opts);
// One tensor-parallel rank on the current CUDA device: cfg and weights are the rank's shard
// (model/tensor_parallel.h), its row-parallel sums go through `comm` (which must outlive it).
class NcclComm;
std::unique_ptr<CudaBackend> make_cuda_rank_backend(const ModelConfig& cfg, const ModelWeights& weights,
                                                    const BackendOptions& opts, NcclComm& comm);
// Benchmarks: seeded random bf16 weights made directly on the GPU (no host copy).
std::unique_ptr<CudaBackend> make_cuda_backend_random(const ModelConfig& cfg, uint64_t seed,
                                                      const BackendOptions& opts);

}  // namespace inferscale
