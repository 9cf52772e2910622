// The op-level parity harness (test_op_parity.cpp), as llama.cpp's test-backend-ops: every op of
// ForwardOps (model/forward_ops.h) runs through the interface on the CPU backend's ops (fp32, the
// reference) and on the CUDA backend's, on the same inputs, and each output is compared.
//
// A case is declared, not written per backend: a name, a shape, and a function of an OpRun that
// begins its batches, fills its inputs, calls the ops and names the outputs to compare (with their
// tolerance). The suite runs it once per backend and compares the outputs name by name. An op a
// backend does not have (kUnsupported) skips the case there, with the backend's message.
//
// Inputs are seeded normal values rounded to bf16, so both backends read the same numbers. The
// GPU keeps kCompute activations and the KV cache in bf16: outputs that pass through them agree
// within bf16 rounding (~4e-3 relative), f32 ones within summation order.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/config.h"
#include "model/forward_ops.h"
#include "tensor/host_tensor.h"

namespace inferscale::test {

// The model dimensions a case runs at (one layer).
struct OpShape {
  int64_t hidden = 64, heads = 4, kv_heads = 4, head_dim = 64, inter = 64, vocab = 97;
  bool rope_interleaved = false;
  bool fp8_cache = false;        // the paged cache in FP8 E4M3 (--kv-cache-dtype fp8)
  bool fp8_projections = false;  // projection() weights in E4M3 (--quantization fp8)
  ModelConfig config() const;
};

// One backend's ops with the harness's access around them: activations in and out, KV rows out.
// The cache has kCacheBlocks blocks of kBlockSize slots, the pool kPoolBlocks, one layer each.
class OpsUnderTest {
 public:
  static constexpr int32_t kBlockSize = 16;
  static constexpr int64_t kCacheBlocks = 256, kPoolBlocks = 16;
  virtual ~OpsUnderTest() = default;
  virtual ForwardOps& ops() = 0;
  // `v` ([rows * cols]) into `a`, in a's element type on this backend.
  virtual void write(Act a, const std::vector<float>& v) = 0;
  // `a` as f32 (ids: its int32 values).
  virtual std::vector<float> read(Act a, bool ids) = 0;
  // Every element of `a` NaN (ids: -1), so that an element an op leaves unwritten shows.
  virtual void poison(Act a) = 0;
  // K (which 0) or V rows of layer 0 at `slots` of the cache or the pool, [n, NKV * D] f32.
  virtual std::vector<float> kv_rows(bool pool, int which, const std::vector<int64_t>& slots) = 0;
  // After ops().finish(): `out` filled.
  virtual void complete() = 0;
  // Host tensors the ops' weights may view: alive as long as the ops.
  std::deque<HostTensor> weights;
};

std::unique_ptr<OpsUnderTest> cpu_ops(const OpShape& s);
std::unique_ptr<OpsUnderTest> gpu_ops(const OpShape& s);  // test_op_parity.cpp (needs a device)

// A paged batch: sequence s has seqs[s].cached entries cached before this forward and seqs[s].n
// new tokens at the positions after them (none: it is not in this batch); its output row is its
// last token. The block tables are the same for every forward of a case, so that a later forward
// finds an earlier one's entries: sequence s owns blocks perm[s * kMaxBlocksPerSeq ..), perm a
// fixed shuffle of the cache's blocks.
inline constexpr int32_t kMaxBlocksPerSeq = 32;
struct SeqSpan {
  int32_t cached = 0, n = 0;
};
ForwardBatch paged_batch(const std::vector<SeqSpan>& seqs, int64_t vocab);

// An output to compare: its values and the relative L2 error it may have (test::record's rule).
struct OpOutput {
  std::vector<float> values;
  double tol = 0;
};

// One case's run on one backend.
class OpRun {
 public:
  OpRun(OpsUnderTest& backend, const ModelConfig& cfg) : cfg(cfg), b_(backend) {}
  const ModelConfig& cfg;
  ForwardOps& ops() { return b_.ops(); }
  // ops().begin over `batch`, kept here until the next begin.
  const ForwardBatch& begin(ForwardBatch batch, AttnMask mask = AttnMask::kCausal);
  // An activation filled with seeded normal(0, std) values rounded to bf16.
  Act input(int slot, int64_t rows, int64_t cols, ActType type, uint64_t seed, float std = 1.0f);
  // An activation poisoned, for an op to write.
  Act output(int slot, int64_t rows, int64_t cols, ActType type);
  // Weights of seeded normal(mean, std) values rounded to bf16 (projection: ForwardOps::projection).
  Weight matrix(int64_t rows, int64_t cols, uint64_t seed, float std = 0.1f);
  Weight projection(int64_t rows, int64_t cols, uint64_t seed, float std = 0.1f);
  Weight vector(int64_t n, uint64_t seed, float mean = 1.0f, float std = 0.1f);
  // Outputs to compare, by name.
  void out(const std::string& name, Act a, double tol, bool ids = false);
  void kv(const std::string& name, bool pool, int which, const std::vector<int64_t>& slots, double tol);
  // ops().finish(result) and the ForwardOutput it fills (values, or ids when `ids`).
  void finish(const std::string& name, Act result, bool ids, double tol);
  std::map<std::string, OpOutput> outputs;

 private:
  const HostTensor& host(int64_t rows, int64_t cols, uint64_t seed, float mean, float std);
  OpsUnderTest& b_;
  ForwardBatch batch_;
};

struct OpCase {
  std::string name;  // "<op>/<variant>": the test's name
  OpShape shape;
  std::function<void(OpRun&)> run;
};

// Every case of every op (op_cases.cpp).
std::vector<OpCase> op_cases();

// Runs `c` on `backend`: its outputs, or the kUnsupported message of an op this backend lacks.
struct OpCaseResult {
  std::map<std::string, OpOutput> outputs;
  std::string unsupported;
};
OpCaseResult run_case(const OpCase& c, OpsUnderTest& backend);

}  // namespace inferscale::test
