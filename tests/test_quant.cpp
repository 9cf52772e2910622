// Block-quantized dtypes: every type's dequantization against the reference of the `gguf` PyPI
// package (gguf.quants.dequantize) on random blocks with extreme f16 scales (fixtures made by
// scripts/make_quant_fixtures.py), bit for bit; block-honest sizes in dtype_bytes / HostTensor;
// row ranges; and the multithreaded path on a large tensor (same bits, and its speed).
#include <gtest/gtest.h>
#include <omp.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "model_test_util.h"
#include "tensor/dtype.h"
#include "tensor/host_tensor.h"

using namespace inferscale;
using namespace inferscale::testing;

namespace {

struct TypeCase {
  const char* name;  // fixture stem
  DType dtype;
};

const TypeCase kTypes[] = {
    {"q4_0", DType::kQ4_0}, {"q4_1", DType::kQ4_1}, {"q5_0", DType::kQ5_0}, {"q5_1", DType::kQ5_1},
    {"q8_0", DType::kQ8_0}, {"q2_k", DType::kQ2_K}, {"q3_k", DType::kQ3_K}, {"q4_k", DType::kQ4_K},
    {"q5_k", DType::kQ5_K}, {"q6_k", DType::kQ6_K},
};

struct Fixture {
  std::string blocks;          // raw blocks (kept as bytes: std::string storage is suitably aligned)
  std::vector<float> expected;  // gguf.quants.dequantize of them
};

Fixture load(const TypeCase& t) {
  Fixture f;
  f.blocks = read_file(fixture(std::string("quant/") + t.name + ".blocks"));
  const std::string e = read_file(fixture(std::string("quant/") + t.name + ".f32"));
  f.expected.resize(e.size() / 4);
  std::memcpy(f.expected.data(), e.data(), f.expected.size() * 4);
  return f;
}

// Bitwise equality (also tells -0 from +0); reports the first few mismatches.
void expect_same_bits(const float* got, const float* want, size_t n, const std::string& what) {
  int bad = 0;
  for (size_t i = 0; i < n && bad < 5; ++i) {
    if (std::memcmp(&got[i], &want[i], 4) != 0) {
      ADD_FAILURE() << what << ": value " << i << " is " << got[i] << ", reference " << want[i];
      ++bad;
    }
  }
}

}  // namespace

TEST(Quant, BlockShapes) {
  EXPECT_EQ(dtype_block(DType::kF32).elems, 1);
  EXPECT_EQ(dtype_block(DType::kQ4_1).elems, 32);
  EXPECT_EQ(dtype_block(DType::kQ4_1).bytes, 20);
  EXPECT_EQ(dtype_block(DType::kQ6_K).elems, 256);
  EXPECT_EQ(dtype_block(DType::kQ6_K).bytes, 210);
  EXPECT_TRUE(is_block_quantized(DType::kQ8_0));
  EXPECT_FALSE(is_block_quantized(DType::kBF16));
  EXPECT_EQ(dtype_bytes(DType::kQ8_0, 64), 68u);
  EXPECT_EQ(dtype_bytes(DType::kQ3_K, 512), 220u);
  EXPECT_EQ(dtype_bytes(DType::kF16, 3), 6u);
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  // No per-element size for a block type, and no partial blocks.
  expect_error([] { (void)dtype_size(DType::kQ4_0); }, ErrorKind::kInternal, {"q4_0", "block"});
  expect_error([] { (void)dtype_bytes(DType::kQ8_0, 33); }, ErrorKind::kInvalidInput, {"q8_0", "33", "32"});
}

TEST(Quant, HostTensorSizesAreBlockHonest) {
  const HostTensor a = HostTensor::view(DType::kQ4_K, {3, 512}, nullptr);
  EXPECT_EQ(a.numel(), 1536);
  EXPECT_EQ(a.row_size(), 512);
  EXPECT_EQ(a.num_rows(), 3);
  EXPECT_EQ(a.row_bytes(), 288u);
  EXPECT_EQ(a.nbytes(), 3u * 2 * 144);
  EXPECT_EQ(HostTensor::view(DType::kQ8_0, {2, 5, 64}, nullptr).nbytes(), 10u * 68);
  EXPECT_EQ(HostTensor::zeros(DType::kQ5_1, {4, 32}).nbytes(), 4u * 24);
  // A row that is not a whole number of blocks: an error naming dtype, shape and block size.
  const HostTensor bad = HostTensor::view(DType::kQ4_0, {3, 100}, nullptr);
  expect_error([&] { (void)bad.nbytes(); }, ErrorKind::kInvalidInput, {"q4_0", "[3, 100]", "32"});
  expect_error([] { HostTensor::zeros(DType::kQ6_K, {128}); }, ErrorKind::kInvalidInput, {"q6_k", "[128]", "256"});
}

// The fixture's blocks through HostTensor::to_f32 (one row) and through rows_to_f32 on a
// multi-row view, every row range start: bit-identical to gguf.quants.
TEST(Quant, EveryTypeMatchesGgufReferenceBitForBit) {
  for (const TypeCase& t : kTypes) {
    SCOPED_TRACE(t.name);
    const Fixture f = load(t);
    const BlockShape b = dtype_block(t.dtype);
    ASSERT_FALSE(f.expected.empty());
    const auto n = static_cast<int64_t>(f.expected.size());
    ASSERT_EQ(n % b.elems, 0);
    ASSERT_EQ(static_cast<int64_t>(f.blocks.size()), n / b.elems * b.bytes);
    void* raw = const_cast<char*>(f.blocks.data());

    const HostTensor one_row = HostTensor::view(t.dtype, {n}, raw);
    EXPECT_EQ(one_row.nbytes(), f.blocks.size());
    const HostTensor y = one_row.to_f32();
    ASSERT_EQ(y.dtype, DType::kF32);
    ASSERT_EQ(y.shape, one_row.shape);
    expect_same_bits(y.as<float>(), f.expected.data(), f.expected.size(), t.name);

    // Four rows of a quarter each (a whole number of blocks for every fixture), rows [r, 4).
    const HostTensor rows = HostTensor::view(t.dtype, {4, n / 4}, raw);
    for (int64_t r = 0; r < 4; ++r) {
      std::vector<float> part(static_cast<size_t>((4 - r) * (n / 4)));
      rows.rows_to_f32(r, 4 - r, part.data());
      expect_same_bits(part.data(), f.expected.data() + r * (n / 4), part.size(), std::string(t.name) + " rows");
    }
  }
}

TEST(Quant, FixturesCoverExtremeScales) {
  // The fixtures do hold what they claim: zeros, subnormal-scaled, and huge values.
  for (const TypeCase& t : kTypes) {
    SCOPED_TRACE(t.name);
    const Fixture f = load(t);
    int zeros = 0, tiny = 0, huge = 0, negative = 0;
    for (float v : f.expected) {
      zeros += v == 0.0f;
      tiny += v != 0.0f && std::fabs(v) < 1e-4f;
      huge += std::fabs(v) > 1e5f;
      negative += v < 0.0f;
    }
    EXPECT_GT(zeros, 0);
    EXPECT_GT(tiny, 0);
    EXPECT_GT(huge, 0);
    EXPECT_GT(negative, 0);
  }
}

// A large tensor (the fixture's blocks repeated to ~8M values) goes through the parallel chunks:
// the same bits with 1 thread and with all, and a throughput number.
TEST(Quant, LargeTensorsUseEveryCoreWithTheSameResult) {
  for (const TypeCase& t : {kTypes[1], kTypes[4], kTypes[7], kTypes[9]}) {  // q4_1, q8_0, q4_k, q6_k
    SCOPED_TRACE(t.name);
    const Fixture f = load(t);
    const size_t reps = (size_t{8} << 20) / f.expected.size();
    std::string raw;
    raw.reserve(f.blocks.size() * reps);
    for (size_t r = 0; r < reps; ++r) raw += f.blocks;
    const auto n = static_cast<int64_t>(f.expected.size() * reps);
    const HostTensor q = HostTensor::view(t.dtype, {static_cast<int64_t>(reps), n / static_cast<int64_t>(reps)},
                                          raw.data());
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    const HostTensor serial = q.to_f32();
    omp_set_num_threads(saved);
    const auto t0 = std::chrono::steady_clock::now();
    const HostTensor parallel = q.to_f32();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%s: %.1f M values dequantized in %.1f ms on %d threads (%.0f M values/s)\n", t.name, n / 1e6,
                s * 1e3, saved, n / 1e6 / s);
    ASSERT_EQ(std::memcmp(serial.data, parallel.data, static_cast<size_t>(n) * 4), 0);
    for (size_t r = 0; r < reps; r += reps / 7 + 1)
      expect_same_bits(parallel.as<float>() + r * f.expected.size(), f.expected.data(), f.expected.size(), t.name);
  }
}

TEST(Quant, ConvertToF32Errors) {
  std::vector<float> out(64);
  const std::vector<uint8_t> raw(68);
  expect_error([&] { convert_to_f32(DType::kQ8_0, raw.data(), out.data(), 40); }, ErrorKind::kInvalidInput,
               {"q8_0", "40"});
  expect_error([&] { convert_to_f32(DType::kI32, raw.data(), out.data(), 4); }, ErrorKind::kUnsupported, {"i32"});
}
