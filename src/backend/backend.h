// The backend interface: everything that touches model weights and KV memory. The engine (host
// code) holds block ids and builds a ForwardBatch; the backend owns the device buffers.
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

#include "backend/sampling.h"
#include "model/config.h"
#include "tensor/dtype.h"

namespace inferscale {

struct ModelWeights;

// One forward over the tokens of several sequences. Built once per step on the host and used by
// every layer (the plan/run split). Tokens of one sequence are contiguous and in position order.
//
//   tokens:     | seq 0: t0 t1 t2 | seq 1: t3 | seq 2: t4 t5 |
//   q_indptr:   [0, 3, 4, 6]
//   kv_indptr:  CSR over kv_indices, one block list per sequence
//
// Token t attends to kv entries [kv_start[s], positions[t]] of its sequence s (causal by
// position): every entry there is already in the cache (computed earlier or injected) or written
// by this batch. Positions inside one sequence may jump (a chunk that skips an injected range).
// kv_start is 0 for served requests; a sequence that starts at position p > 0 with nothing
// before it (a fact encoded at its serving position, in exactness tests) sets it to p.
struct ForwardBatch {
  std::vector<int32_t> token_ids;     // [T]
  std::vector<int32_t> positions;     // [T] rotary position == index of the token in its sequence
  std::vector<int64_t> slot_mapping;  // [T] destination cache slot of the token's K and V
  std::vector<int32_t> q_indptr;      // [S + 1]
  std::vector<int32_t> kv_indptr;     // [S + 1]
  std::vector<int32_t> kv_indices;    // [kv_indptr[S]] block ids
  std::vector<int32_t> kv_start;      // [S] first attended entry; empty = all 0

  // Which tokens produce output rows, in order.
  std::vector<int32_t> output_tokens;  // [R] indices into token_ids
  // kLogits: out [R, vocab]. kHidden: out [R, hidden], final-normed hidden states. kArgmax: out [R],
  // each row's greedy token (its id as a float, exact below 2^24): the largest logit among ids
  // [0, argmax_vocab), the lowest id on ties, as sample_token's greedy; only R ids leave the device.
  // kSample: out [R], each row's token drawn by sample_row (backend/sampling.h) with sampling[r]
  // over the same ids; greedy rows take the argmax. Only R ids and R draws cross PCIe.
  enum class Output { kLogits, kHidden, kArgmax, kSample } output = Output::kLogits;
  int32_t argmax_vocab = 0;  // kArgmax, kSample: 0 = the whole vocabulary
  std::vector<RowSampling> sampling;  // kSample: [R]

  // Write path: keep the pre-RoPE K and the V of some tokens (every layer) in memory-pool slots.
  std::vector<int32_t> capture_tokens;  // [C] indices into token_ids
  std::vector<int64_t> capture_slots;   // [C] memory-pool slots

  int32_t num_tokens() const { return static_cast<int32_t>(token_ids.size()); }
  int32_t num_seqs() const { return q_indptr.empty() ? 0 : static_cast<int32_t>(q_indptr.size()) - 1; }
  // Throws kInternal when sizes, ranges or ordering are inconsistent.
  void validate(int64_t num_cache_slots, int32_t block_size) const;
};

// kArgmax: how many leading ids compete (argmax_vocab, the whole vocabulary when 0); kInternal
// when argmax_vocab is outside [0, vocab].
int64_t argmax_span(const ForwardBatch& b, int64_t vocab);

// Copy of fact KV from the memory pool into a request's cache slots, K rotated to `positions`.
struct InjectBatch {
  std::vector<int64_t> src_slots;   // [N] memory-pool slots
  std::vector<int64_t> dst_slots;   // [N] cache slots
  std::vector<int32_t> positions;   // [N] serving positions
};

struct BackendOptions {
  int32_t block_size = 16;
  int64_t num_cache_blocks = 0;     // 0 = size from cache_memory_bytes
  int64_t cache_memory_bytes = 512ll << 20;
  int64_t num_pool_blocks = 0;      // memory pool (fact KV); 0 = none
  int32_t num_threads = 0;          // CPU: 0 = all cores
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual const ModelConfig& config() const = 0;
  virtual int32_t block_size() const = 0;
  virtual int64_t num_cache_blocks() const = 0;
  virtual int64_t num_pool_blocks() const = 0;
  // The element type the memory pool stores (f32 on the CPU, bf16 on the GPU): read_pool() values
  // are exactly representable in it, so KV files store them in it without loss.
  virtual DType pool_dtype() const = 0;

  // out: [R, vocab] logits or [R, hidden] hidden states, row-major float.
  virtual void forward(const ForwardBatch& batch, std::vector<float>& out) = 0;
  virtual void inject(const InjectBatch& batch) = 0;

  // Host copies of memory-pool slots (KV files, tests). k/v: [layers, N, num_kv_heads, head_dim] float.
  virtual void read_pool(const std::vector<int64_t>& slots, std::vector<float>& k, std::vector<float>& v) = 0;
  virtual void write_pool(const std::vector<int64_t>& slots, const std::vector<float>& k, const std::vector<float>& v) = 0;
  // Host copies of cache slots, same shapes (tests and debugging).
  virtual void read_cache(const std::vector<int64_t>& slots, std::vector<float>& k, std::vector<float>& v) = 0;
};

// The CPU reference backend (fp32 compute, all cores, OpenBLAS GEMM). Keeps `weights` alive.
std::unique_ptr<Backend> make_cpu_backend(const ModelConfig& cfg, const ModelWeights& weights, const BackendOptions& opts);

}  // namespace inferscale
