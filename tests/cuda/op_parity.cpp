// The harness of op_parity.h on the host: the CPU backend's side, paged batches, OpRun.
#include "op_parity.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "backend/cpu/cpu_forward_ops.h"
#include "tensor/dtype.h"
#include "util/check.h"

namespace inferscale::test {
namespace {

std::vector<float> bf16_normal(size_t n, uint64_t seed, float mean, float std) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(mean, std);
  std::vector<float> v(n);
  for (float& x : v) x = bf16_to_f32(f32_to_bf16(d(g)));
  return v;
}

class CpuOps final : public OpsUnderTest {
 public:
  explicit CpuOps(const OpShape& s)
      : cfg_(s.config()),
        kv_{CpuKvStore(1, kCacheBlocks * kBlockSize, cfg_.num_kv_heads, cfg_.head_dim, s.fp8_cache),
            CpuKvStore(1, kPoolBlocks * kBlockSize, cfg_.num_kv_heads, cfg_.head_dim, false), kCacheBlocks * kBlockSize},
        ops_(cfg_, kv_, kBlockSize, 2, true, true, s.fp8_projections) {}
  ForwardOps& ops() override { return ops_; }
  void write(Act a, const std::vector<float>& v) override {
    std::memcpy(a.data, v.data(), v.size() * 4);  // both types are f32 here
  }
  std::vector<float> read(Act a, bool ids) override {
    const size_t n = static_cast<size_t>(a.rows * a.cols);
    std::vector<float> v(n);
    if (!ids) {
      std::memcpy(v.data(), a.data, n * 4);
      return v;
    }
    const auto* p = static_cast<const int32_t*>(a.data);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(p[i]);
    return v;
  }
  void poison(Act a) override { std::fill_n(static_cast<float*>(a.data), a.rows * a.cols, NAN); }
  std::vector<float> kv_rows(bool pool, int which, const std::vector<int64_t>& slots) override {
    std::vector<float> rows(slots.size() * static_cast<size_t>(cfg_.kv_size()));
    (pool ? kv_.pool : kv_.cache).read(0, which, slots.data(), static_cast<int64_t>(slots.size()), rows.data());
    return rows;
  }
  void complete() override {}

 private:
  ModelConfig cfg_;
  CpuKv kv_;
  CpuForwardOps ops_;
};

}  // namespace

ModelConfig OpShape::config() const {
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.hidden_size = hidden;
  c.intermediate_size = inter;
  c.num_layers = 1;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.vocab_size = vocab;
  c.max_position_embeddings = 4096;
  c.rope_interleaved = rope_interleaved;
  c.finalize();
  return c;
}

std::unique_ptr<OpsUnderTest> cpu_ops(const OpShape& s) { return std::make_unique<CpuOps>(s); }

ForwardBatch paged_batch(const std::vector<SeqSpan>& seqs, int64_t vocab) {
  constexpr int32_t bs = OpsUnderTest::kBlockSize;
  IS_CHECK(static_cast<int64_t>(seqs.size()) * kMaxBlocksPerSeq <= OpsUnderTest::kCacheBlocks, "too many sequences");
  std::vector<int32_t> perm(static_cast<size_t>(OpsUnderTest::kCacheBlocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(1));  // scattered blocks
  ForwardBatch b;
  b.q_indptr = {0};
  b.kv_indptr = {0};
  for (size_t s = 0; s < seqs.size(); ++s) {
    const auto [cached, n] = seqs[s];
    if (n == 0) continue;
    const int32_t end = cached + n, blocks = (end + bs - 1) / bs;
    IS_CHECK(blocks <= kMaxBlocksPerSeq, "a sequence of {} entries", end);
    const int32_t* table = &perm[s * kMaxBlocksPerSeq];
    for (int32_t p = cached; p < end; ++p) {
      b.token_ids.push_back(static_cast<int32_t>((p * 7 + static_cast<int32_t>(s) * 13) % vocab));
      b.positions.push_back(p);
      b.slot_mapping.push_back(static_cast<int64_t>(table[p / bs]) * bs + p % bs);
    }
    b.kv_indices.insert(b.kv_indices.end(), table, table + blocks);
    b.q_indptr.push_back(b.q_indptr.back() + n);
    b.kv_indptr.push_back(static_cast<int32_t>(b.kv_indices.size()));
    b.output_tokens.push_back(b.q_indptr.back() - 1);
  }
  return b;
}

const ForwardBatch& OpRun::begin(ForwardBatch batch, AttnMask mask) {
  batch_ = std::move(batch);
  ops().begin(batch_, mask);
  return batch_;
}

Act OpRun::input(int slot, int64_t rows, int64_t cols, ActType type, uint64_t seed, float std) {
  const Act a = ops().act(slot, rows, cols, type);
  b_.write(a, bf16_normal(static_cast<size_t>(rows * cols), seed, 0.0f, std));
  return a;
}

Act OpRun::output(int slot, int64_t rows, int64_t cols, ActType type) {
  const Act a = ops().act(slot, rows, cols, type);
  b_.poison(a);
  return a;
}

const HostTensor& OpRun::host(int64_t rows, int64_t cols, uint64_t seed, float mean, float std) {
  HostTensor t = HostTensor::uninitialized(DType::kF32, {rows, cols});
  const std::vector<float> v = bf16_normal(static_cast<size_t>(rows * cols), seed, mean, std);
  std::memcpy(t.as<float>(), v.data(), v.size() * 4);
  b_.weights.push_back(std::move(t));
  return b_.weights.back();
}

Weight OpRun::matrix(int64_t rows, int64_t cols, uint64_t seed, float std) {
  return ops().matrix({&host(rows, cols, seed, 0.0f, std)});
}

Weight OpRun::projection(int64_t rows, int64_t cols, uint64_t seed, float std) {
  return ops().projection({&host(rows, cols, seed, 0.0f, std)});
}

Weight OpRun::vector(int64_t n, uint64_t seed, float mean, float std) {
  return ops().vector({&host(1, n, seed, mean, std)});
}

void OpRun::out(const std::string& name, Act a, double tol, bool ids) { outputs[name] = {b_.read(a, ids), tol}; }

void OpRun::kv(const std::string& name, bool pool, int which, const std::vector<int64_t>& slots, double tol) {
  outputs[name] = {b_.kv_rows(pool, which, slots), tol};
}

void OpRun::finish(const std::string& name, Act result, bool ids, double tol) {
  ForwardOutput o;
  o.values = {1.0f};  // finish() replaces both
  o.ids = {1};
  ops().finish(result, ids, o);
  b_.complete();
  if (ids) {
    EXPECT_TRUE(o.values.empty()) << name;
    outputs[name] = {std::vector<float>(o.ids.begin(), o.ids.end()), tol};
  } else {
    EXPECT_TRUE(o.ids.empty()) << name;
    outputs[name] = {o.values, tol};
  }
}

OpCaseResult run_case(const OpCase& c, OpsUnderTest& backend) {
  OpCaseResult r;
  const ModelConfig cfg = c.shape.config();
  OpRun run(backend, cfg);
  try {
    c.run(run);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kUnsupported) throw;
    r.unsupported = e.what();
    return r;
  }
  r.outputs = std::move(run.outputs);
  return r;
}

}  // namespace inferscale::test
