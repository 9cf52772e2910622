// The op-level parity suite (op_parity.h): every case of op_cases.cpp on the CPU backend's ops and
// on the CUDA backend's, output by output. HostOpCases runs each case on the CPU alone (no GPU
// needed): every output written and finite, so that a case is sound before it is compared.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_forward_ops.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/rope_table.h"
#include "cuda_test_util.h"
#include "op_parity.h"
#include "tensor/dtype.h"
#include "tensor/fp8.h"

namespace inferscale::test {
namespace {

using bf16 = __nv_bfloat16;

// The CUDA backend's ops over a cache and pool of its own, on a blocking stream (so that the
// harness's cudaMemcpy calls are ordered after the ops' kernels).
class GpuOps final : public OpsUnderTest {
 public:
  explicit GpuOps(const OpShape& s) : cfg_(s.config()), rope_(cfg_), fp8_cache_(s.fp8_cache) {
    const int64_t row = cfg_.kv_size(), cache_slots = kCacheBlocks * kBlockSize, pool_slots = kPoolBlocks * kBlockSize;
    const size_t elem = fp8_cache_ ? 1 : 2;
    for (DeviceBuffer* b : {&k_cache_, &v_cache_}) zeroed(*b, static_cast<size_t>(cache_slots * row) * elem);
    if (fp8_cache_)
      for (DeviceBuffer* b : {&k_scale_, &v_scale_}) zeroed(*b, static_cast<size_t>(cache_slots * cfg_.num_kv_heads) * 4);
    for (DeviceBuffer* b : {&k_pool_, &v_pool_}) zeroed(*b, static_cast<size_t>(pool_slots * row) * 2);
    CUDA_CHECK(cudaStreamCreate(&stream_));
    CudaKv kv;
    kv.cache = {k_cache_.data(), v_cache_.data(), fp8_cache_ ? k_scale_.as<float>() : nullptr,
                fp8_cache_ ? v_scale_.as<float>() : nullptr, fp8_cache_};
    kv.pool = {k_pool_.data(), v_pool_.data(), nullptr, nullptr, false};
    kv.cache_layer_stride = cache_slots * row;
    kv.pool_layer_stride = pool_slots * row;
    kv.cache_slots = cache_slots;
    kv.pool_slots = pool_slots;
    ops_ = std::make_unique<CudaForwardOps>(cfg_, kv, rope_, kBlockSize, stream_);
    ops_->set_e4m3_projections(s.fp8_projections);
  }
  ~GpuOps() override {
    ops_.reset();
    cudaStreamDestroy(stream_);
  }
  ForwardOps& ops() override { return *ops_; }
  void write(Act a, const std::vector<float>& v) override {
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (a.type == ActType::kCompute) {
      const std::vector<uint16_t> h = to_bf16(v);
      CUDA_CHECK(cudaMemcpy(a.data, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
    } else {
      CUDA_CHECK(cudaMemcpy(a.data, v.data(), v.size() * 4, cudaMemcpyHostToDevice));
    }
  }
  std::vector<float> read(Act a, bool ids) override {
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    const size_t n = static_cast<size_t>(a.rows * a.cols);
    if (a.type == ActType::kCompute) {
      std::vector<uint16_t> h(n);
      CUDA_CHECK(cudaMemcpy(h.data(), a.data, n * 2, cudaMemcpyDeviceToHost));
      return from_bf16(h);
    }
    std::vector<float> v(n);
    CUDA_CHECK(cudaMemcpy(v.data(), a.data, n * 4, cudaMemcpyDeviceToHost));
    if (ids)
      for (float& x : v) {
        int32_t id = 0;
        std::memcpy(&id, &x, 4);
        x = static_cast<float>(id);
      }
    return v;
  }
  void poison(Act a) override {
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    const size_t elem = a.type == ActType::kCompute ? 2 : 4;
    CUDA_CHECK(cudaMemset(a.data, 0xFF, static_cast<size_t>(a.rows * a.cols) * elem));
  }
  std::vector<float> kv_rows(bool pool, int which, const std::vector<int64_t>& slots) override {
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    const int64_t row = cfg_.kv_size(), D = cfg_.head_dim;
    const bool fp8 = !pool && fp8_cache_;
    const DeviceBuffer& data = pool ? (which == 0 ? k_pool_ : v_pool_) : (which == 0 ? k_cache_ : v_cache_);
    std::vector<float> rows(slots.size() * static_cast<size_t>(row));
    for (size_t i = 0; i < slots.size(); ++i) {
      float* dst = &rows[i * static_cast<size_t>(row)];
      if (!fp8) {
        std::vector<uint16_t> h(static_cast<size_t>(row));
        CUDA_CHECK(cudaMemcpy(h.data(), data.as<uint16_t>() + slots[i] * row, h.size() * 2, cudaMemcpyDeviceToHost));
        for (int64_t e = 0; e < row; ++e) dst[e] = bf16_to_f32(h[static_cast<size_t>(e)]);
        continue;
      }
      std::vector<uint8_t> codes(static_cast<size_t>(row));
      std::vector<float> scales(static_cast<size_t>(cfg_.num_kv_heads));
      const DeviceBuffer& sc = which == 0 ? k_scale_ : v_scale_;
      CUDA_CHECK(cudaMemcpy(codes.data(), data.as<uint8_t>() + slots[i] * row, codes.size(), cudaMemcpyDeviceToHost));
      CUDA_CHECK(cudaMemcpy(scales.data(), sc.as<float>() + slots[i] * cfg_.num_kv_heads, scales.size() * 4,
                            cudaMemcpyDeviceToHost));
      for (int64_t e = 0; e < row; ++e) dst[e] = e4m3_to_f32(codes[static_cast<size_t>(e)]) * scales[static_cast<size_t>(e / D)];
    }
    return rows;
  }
  void complete() override { ops_->complete(); }

 private:
  static void zeroed(DeviceBuffer& b, size_t bytes) {
    b.resize(std::max<size_t>(bytes, 16));
    CUDA_CHECK(cudaMemset(b.data(), 0, b.bytes()));
  }
  ModelConfig cfg_;
  RopeTable rope_;
  bool fp8_cache_;
  DeviceBuffer k_cache_, v_cache_, k_scale_, v_scale_, k_pool_, v_pool_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<CudaForwardOps> ops_;
};

std::string test_name(const ::testing::TestParamInfo<OpCase>& info) {
  std::string n = info.param.name;
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
}

class OpParity : public ::testing::TestWithParam<OpCase> {};

// The case on both backends; each output of the GPU against the CPU's, by name.
TEST_P(OpParity, GpuMatchesCpu) {
  REQUIRE_GPU();
  const OpCase& c = GetParam();
  std::unique_ptr<OpsUnderTest> cpu = cpu_ops(c.shape);
  const OpCaseResult want = run_case(c, *cpu);
  ASSERT_TRUE(want.unsupported.empty()) << "the CPU reference lacks an op: " << want.unsupported;
  std::unique_ptr<OpsUnderTest> gpu = gpu_ops(c.shape);
  const OpCaseResult got = run_case(c, *gpu);
  if (!got.unsupported.empty()) GTEST_SKIP() << "not on the GPU: " << got.unsupported;
  ASSERT_EQ(got.outputs.size(), want.outputs.size());
  for (const auto& [name, ref] : want.outputs) {
    const auto it = got.outputs.find(name);
    ASSERT_NE(it, got.outputs.end()) << name;
    record(c.name + "/" + name, compare(it->second.values, ref.values), ref.tol);
  }
}

INSTANTIATE_TEST_SUITE_P(EveryOp, OpParity, ::testing::ValuesIn(op_cases()), test_name);

// Every case on the CPU: it runs, and every output it names is written (the poison is gone) and
// finite.
TEST(HostOpCases, EveryCaseRunsOnTheCpu) {
  const std::vector<OpCase> cases = op_cases();
  EXPECT_GE(cases.size(), 60u);
  for (const OpCase& c : cases) {
    std::unique_ptr<OpsUnderTest> cpu = cpu_ops(c.shape);
    const OpCaseResult r = run_case(c, *cpu);
    EXPECT_TRUE(r.unsupported.empty()) << c.name << ": " << r.unsupported;
    EXPECT_FALSE(r.outputs.empty()) << c.name;
    for (const auto& [name, out] : r.outputs) {
      EXPECT_FALSE(out.values.empty()) << c.name << "/" << name;
      size_t bad = 0;
      for (float v : out.values) bad += !std::isfinite(v);
      EXPECT_EQ(bad, 0u) << c.name << "/" << name;
    }
  }
}

}  // namespace

std::unique_ptr<OpsUnderTest> gpu_ops(const OpShape& s) { return std::make_unique<GpuOps>(s); }

}  // namespace inferscale::test
