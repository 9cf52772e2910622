// The backend interface: everything that touches model weights and KV memory. The engine (host
// code) holds block ids and builds a ForwardBatch; the backend owns the device buffers. A forward
// is the architecture's (model/architecture.h), run on the backend's ForwardOps: the backend
// supplies the operations and their fused kernels, not the order of a model's layers.
//
// Paged KV cache, per layer, FlashInfer's NHD layout:
//   K, V: [num_blocks, block_size, num_kv_heads, head_dim]
// A slot is block_id * block_size + offset. Keys in the cache are rotated (RoPE at their position).
//
// The memory pool has the same layout but holds keys BEFORE rotation (after bias and k-norm):
// injection gathers pool slots, rotates K to the serving positions and scatters into cache slots.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/forward_batch.h"
#include "tensor/dtype.h"
#include "tensor/host_tensor.h"
#include "util/check.h"

namespace inferscale {

struct ModelWeights;

// Copy of fact KV from the memory pool into a request's cache slots, K rotated to `positions`.
struct InjectBatch {
  std::vector<int64_t> src_slots;   // [N] memory-pool slots
  std::vector<int64_t> dst_slots;   // [N] cache slots
  std::vector<int32_t> positions;   // [N] serving positions
};

// A token's K and V bytes over every layer in the paged KV cache or the memory pool: bf16 on the
// GPU, f32 on the CPU, or (fp8, either backend) E4M3 codes with an f32 scale per kv head, a byte
// an element and 4 a head (backend/cpu/cpu_kv_store.h, cuda_ops.h KvCache). Sizes --kv-cache-mb
// and --memory-pool-mb into blocks.
inline int64_t kv_store_bytes_per_token(const ModelConfig& cfg, bool gpu, bool fp8) {
  return fp8 ? 2 * cfg.num_layers * cfg.num_kv_heads * (cfg.head_dim + 4) : cfg.kv_bytes_per_token(gpu ? 2 : 4);
}

struct BackendOptions {
  int32_t block_size = 16;
  int64_t num_cache_blocks = 0;     // 0 = size from cache_memory_bytes
  int64_t cache_memory_bytes = 512ll << 20;
  int64_t num_pool_blocks = 0;      // memory pool (fact KV); 0 = none
  int32_t num_threads = 0;          // CPU: 0 = all cores
  // CPU: linears of 2-14 rows (decode steps of a few sequences) stream each weight row once on
  // the backend's threads (backend/cpu/cpu_linear_rows.h, AVX2 + FMA); false: OpenBLAS for all.
  bool cpu_linear_rows = true;
  // CPU: linears of 1-4 rows over weights a GGUF stores as Q4_1 or Q8_0 read those blocks (5-6x
  // fewer bytes than the f32 copy; backend/cpu/cpu_linear_rows.h); false: the f32 copy always.
  bool cpu_quant_linears = true;
  bool cuda_graphs = true;          // CUDA: decode steps and short prefills replay CUDA graphs (false: eager)
  bool programmatic_launch = true;  // CUDA: a forward's kernels overlap their neighbours' launch (PDL, launch.cuh)
  // The memory pool in FP8 E4M3 with a scale per (slot, kv head) (--memory-kv-dtype fp8): ~4x
  // the facts of an f32 pool in the same bytes on the CPU (backend/cpu/cpu_kv_store.h), ~2x a bf16
  // pool's on the GPU. Keys are stored before RoPE, as in any pool.
  bool pool_fp8 = false;
  // The paged KV cache in FP8 E4M3 with a scale per (slot, kv head) (--kv-cache-dtype fp8): on
  // the GPU ~half the bytes of bf16 (twice the tokens in the same memory), on the CPU ~a quarter
  // of f32. Keys are rotated before they are rounded.
  bool cache_fp8 = false;
  // CUDA: the transformer layers' projection matrices (QKV, output, gate/up, down) in FP8 E4M3
  // with one scale each (--quantization fp8, vLLM's name): half the weight bytes, cuBLASLt's FP8
  // GEMMs. Activations are quantized per forward with one scale for the batch (vLLM's dynamic
  // per-tensor scheme), so a request's logits may move with its batchmates at FP8's rounding.
  // The CPU backend emulates the numbers in f32 (for measuring quality; no faster, no smaller).
  bool projections_fp8 = false;
  // Ranks the model is split over (--tensor-parallel-size; model/tensor_parallel.h): each rank
  // holds 1/N of the heads and of the MLP, its kv heads' share of the cache and the pool, and
  // adds its partial products through an all-reduce. make_cpu_backend runs the ranks as threads
  // of one backend, a sum in rank order for the all-reduce (to check the split; not faster). The
  // sizes above are each rank's (every rank has every block, with its kv heads' rows).
  int32_t tensor_parallel_size = 1;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual const ModelConfig& config() const = 0;
  virtual int32_t block_size() const = 0;
  virtual int64_t num_cache_blocks() const = 0;
  virtual int64_t num_pool_blocks() const = 0;
  // The element type the memory pool's reads and writes move (f32 on the CPU, bf16 on the GPU, f32
  // for an FP8 pool on either):
  // read_pool() values are exactly representable in it, so KV files store them in it without
  // loss. (An FP8 pool stores less, and reads back f32 values its codes and scales give.)
  virtual DType pool_dtype() const = 0;

  // The output ForwardBatch::output asks for (the config's architecture over the backend's
  // ForwardOps).
  virtual void forward(const ForwardBatch& batch, ForwardOutput& out) = 0;
  // kLogits / kHidden forwards: their values alone (kInternal for an ids output).
  void forward(const ForwardBatch& batch, std::vector<float>& values) {
    IS_CHECK(batch.output == ForwardBatch::Output::kLogits || batch.output == ForwardBatch::Output::kHidden,
             "an argmax or sampling forward returns ids: call forward(batch, ForwardOutput&)");
    ForwardOutput out;
    out.values.swap(values);  // keeps the caller's capacity
    forward(batch, out);
    values.swap(out.values);
  }
  // A forward in two halves, so that the engine's host work overlaps the device's compute:
  // launch_forward() queues it (`out` is filled when it completes and must live until then),
  // forward_running() says whether the device is still computing the oldest one pending,
  // wait_forward() completes that one and wait_forwards() all (nothing with none pending). At
  // most two are pending: a launch with two completes the oldest first. They run in launch order,
  // so a batch's token_src reads the ids of the one launched before it. A backend that computes
  // on the host (overlaps_forward() false) does it all in launch_forward(). Every other call on a
  // backend that overlaps completes the pending forwards first, so only host work and the queued
  // forwards ever run beside one.
  virtual bool overlaps_forward() const { return false; }
  virtual void launch_forward(const ForwardBatch& batch, ForwardOutput& out) { forward(batch, out); }
  virtual bool forward_running() { return false; }
  virtual void wait_forward() {}
  virtual void wait_forwards() {}
  virtual void inject(const InjectBatch& batch) = 0;
  // Whether attention reads injected facts in place from the memory pool (ForwardBatch::fact_*:
  // keys rotated as they are read) with the numbers injection gives. False: facts are copied into
  // the cache by inject(), the only path (a backend without the kernels, or whose cache rounds
  // what it stores, FP8, which an in-place read would skip).
  virtual bool reads_facts_in_place() const { return false; }

  // Host copies of memory-pool slots (KV files, tests) in pool_dtype(), never converted:
  // k, v: [layers, N, num_kv_heads * head_dim] (backend/kv_rows.h).
  virtual void read_pool(const std::vector<int64_t>& slots, HostTensor& k, HostTensor& v) = 0;
  // k, v as read_pool gives them (their dtype must be pool_dtype()).
  virtual void write_pool(const std::vector<int64_t>& slots, const HostTensor& k, const HostTensor& v) = 0;
  // Host copies of cache slots, same shapes and dtype (tests and debugging).
  virtual void read_cache(const std::vector<int64_t>& slots, HostTensor& k, HostTensor& v) = 0;
};

// The CPU reference backend (fp32 compute, all cores, OpenBLAS GEMM). Keeps `weights` alive.
std::unique_ptr<Backend> make_cpu_backend(const ModelConfig& cfg, const ModelWeights& weights, const BackendOptions& opts);

}  // namespace inferscale
