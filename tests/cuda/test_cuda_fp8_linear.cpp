// Parity of the FP8 projections (--quantization fp8) against their CPU twins at odd shapes:
//   quantize_e4m3_tensor   bit for bit against tensor/fp8.h's quantize_e4m3_row over the tensor
//   Gemm::run_e4m3 (W8A8, cuBLASLt) against the product in double of the dequantized codes
// Outputs are poisoned (NaN) before each launch; every element must be written.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/gemm.h"
#include "cuda_test_util.h"
#include "tensor/fp8.h"

namespace inferscale {
namespace {

using test::compare;
using test::download;
using test::poisoned;
using test::randn;
using test::record;
using test::round_bf16;
using test::upload;
using bf16 = cuda::bf16;

// A matrix as the FP8 path holds it: codes, one scale, and the values they stand for.
struct E4m3Matrix {
  std::vector<uint8_t> codes;
  float scale = 0;
  std::vector<float> values;  // code value * scale
};

E4m3Matrix quantize_host(const std::vector<float>& x) {
  E4m3Matrix q;
  q.codes.resize(x.size());
  q.scale = quantize_e4m3_row(x.data(), static_cast<int64_t>(x.size()), q.codes.data());
  q.values.resize(x.size());
  dequantize_e4m3_row(q.codes.data(), static_cast<int64_t>(x.size()), q.scale, q.values.data());
  return q;
}

std::string shape_tag(const char* fam, int64_t M, int64_t N, int64_t K) {
  return std::string(fam) + "/M" + std::to_string(M) + "_N" + std::to_string(N) + "_K" + std::to_string(K);
}

TEST(CudaFp8Linear, QuantizeTensorMatchesTwinBitForBit) {
  REQUIRE_GPU();
  struct Shape {
    int64_t M, K;
  };
  // One 8-value chunk, odd M, rows past a block's threads, more rows than the grid's blocks; up to
  // kQuantizeOneBlockElems values the one-block kernel (a decode step's o_proj and down inputs:
  // {4, 4096}, {1, 14336}), above it the row maxima and codes' kernels ({5, 4096}).
  static_assert(cuda::kQuantizeOneBlockElems == 4 * 4096);
  for (const Shape sh : {Shape{1, 8}, Shape{3, 136}, Shape{37, 4096}, Shape{1030, 24}, Shape{5, 14336}, Shape{2, 16},
                         Shape{4, 4096}, Shape{1, 14336}, Shape{5, 4096}}) {
    for (int zero = 0; zero < 2; ++zero) {
      if (zero == 1 && sh.M != 3 && sh.M != 37) continue;  // an all-zero tensor: scale 0, codes 0
      std::vector<float> x = round_bf16(randn(static_cast<size_t>(sh.M * sh.K), 40 + sh.M, 0.3f));
      if (zero == 1) std::fill(x.begin(), x.end(), 0.0f);
      if (zero == 0) x[x.size() / 2] = 7.5f;  // one outlier sets the scale
      const E4m3Matrix want = quantize_host(x);
      DeviceBuffer dx = upload(test::to_bf16(x)), amax = poisoned(static_cast<size_t>(sh.M) * 4),
                   codes = poisoned(x.size()), scale = poisoned(4);
      cuda::quantize_e4m3_tensor(dx.as<bf16>(), sh.M, sh.K, amax.as<float>(), codes.as<uint8_t>(), scale.as<float>(), nullptr);
      const std::vector<uint8_t> got = download<uint8_t>(codes, x.size());
      const float got_scale = download<float>(scale, 1)[0];
      const std::string tag = "quantize_e4m3/M" + std::to_string(sh.M) + "_K" + std::to_string(sh.K) + (zero ? "_zero" : "");
      EXPECT_EQ(got_scale, want.scale) << tag;
      size_t differ = 0;
      for (size_t i = 0; i < x.size(); ++i) differ += got[i] != want.codes[i];
      EXPECT_EQ(differ, 0u) << tag;
      test::note(tag, std::to_string(x.size() - differ) + "/" + std::to_string(x.size()) + " codes equal");
    }
  }
}

// A kernel's fused row maxima (amax: [R]) of its bf16 output y ([R, H], on the device): each
// row's max |y| exactly; and (H % 8 == 0) the codes quantize_e4m3_tensor makes from them equal the
// ones of its own pass.
void expect_row_maxima_of(const DeviceBuffer& y, const DeviceBuffer& amax, int64_t R, int64_t H, const std::string& tag) {
  const std::vector<float> yh = test::from_bf16(download<uint16_t>(y, static_cast<size_t>(R * H)));
  const std::vector<float> got = download<float>(amax, static_cast<size_t>(R));
  for (int64_t r = 0; r < R; ++r) {
    float want = 0;
    for (int64_t h = 0; h < H; ++h) want = std::max(want, std::fabs(yh[static_cast<size_t>(r * H + h)]));
    EXPECT_EQ(got[static_cast<size_t>(r)], want) << tag << " row " << r;
  }
  if (H % 8 != 0) return;
  DeviceBuffer c1 = poisoned(yh.size()), c2 = poisoned(yh.size()), s1 = poisoned(4), s2 = poisoned(4),
               scratch = poisoned(static_cast<size_t>(R) * 4);
  cuda::quantize_e4m3_tensor(y.as<bf16>(), R, H, amax.as<float>(), c1.as<uint8_t>(),
                             s1.as<float>(), nullptr, true);
  cuda::quantize_e4m3_tensor(y.as<bf16>(), R, H, scratch.as<float>(), c2.as<uint8_t>(), s2.as<float>(), nullptr);
  EXPECT_EQ(download<uint8_t>(c1, yh.size()), download<uint8_t>(c2, yh.size())) << tag;
  EXPECT_EQ(download<float>(s1, 1), download<float>(s2, 1)) << tag;
  test::note(tag, "row maxima and codes as the unfused pass");
}

// RMSNorm's row maxima (the FP8 projections' fused first pass): on the vector path and the scalar
// one (odd H), with a row gather too.
TEST(CudaFp8Linear, RmsNormRowMaximaMatchItsOutputs) {
  REQUIRE_GPU();
  for (const int64_t H : {int64_t{4096}, int64_t{576}, int64_t{100}, int64_t{18432}}) {
    for (const bool gather : {false, true}) {
      const int64_t T = 9, R = gather ? 4 : T;
      const std::vector<float> x = randn(static_cast<size_t>(T * H), 50 + H, 2.0f), w = randn(static_cast<size_t>(H), 51, 0.5f, 1.0f);
      const std::vector<int32_t> rows{7, 0, 3, 8};
      DeviceBuffer dx = upload(x), dw = upload(w), drows = upload(rows), y = poisoned(static_cast<size_t>(R * H) * 2),
                   amax = poisoned(static_cast<size_t>(R) * 4);
      cuda::rmsnorm(dx.as<float>(), gather ? drows.as<int32_t>() : nullptr, dw.as<float>(), y.as<bf16>(), R, H, 1e-5f, nullptr,
                    amax.as<float>());
      expect_row_maxima_of(y, amax, R, H, "rmsnorm_row_amax/H" + std::to_string(H) + (gather ? "_gather" : ""));
    }
  }
}

// The SiLU's row maxima (the down projection's input): one block a row, on the vector path (I % 8
// == 0) and the scalar one, with the same output bits as the grid-wide kernel without them.
TEST(CudaFp8Linear, SiluMulRowMaximaMatchItsOutputs) {
  REQUIRE_GPU();
  for (const int64_t I : {int64_t{14336}, int64_t{1000}, int64_t{100}, int64_t{13}}) {
    for (const int64_t T : {int64_t{1}, int64_t{9}}) {
      const std::vector<float> gu = round_bf16(randn(static_cast<size_t>(T * 2 * I), 60 + I + T, 2.0f));
      DeviceBuffer dgu = upload(test::to_bf16(gu)), y = poisoned(static_cast<size_t>(T * I) * 2),
                   plain = poisoned(static_cast<size_t>(T * I) * 2), amax = poisoned(static_cast<size_t>(T) * 4);
      cuda::silu_mul(dgu.as<bf16>(), y.as<bf16>(), T, I, nullptr, amax.as<float>());
      cuda::silu_mul(dgu.as<bf16>(), plain.as<bf16>(), T, I, nullptr);
      const std::string tag = "silu_mul_row_amax/I" + std::to_string(I) + "_T" + std::to_string(T);
      EXPECT_EQ(download<uint16_t>(y, static_cast<size_t>(T * I)), download<uint16_t>(plain, static_cast<size_t>(T * I))) << tag;
      expect_row_maxima_of(y, amax, T, I, tag);
    }
  }
}

// W8A8 through cuBLASLt: x quantized on the device (one scale), times the weight's codes; the
// reference is the product of both dequantized tensors (the twin's codes and scales). Hopper's
// FP8 MMAs add their products with fewer bits than f32 (about 1e-4 relative measured on the
// H100: a hundredth of FP8's own rounding), so f32 outputs are held to 3e-4.
constexpr double kFp8MmaTol = 3e-4;
TEST(CudaFp8Linear, GemmMatchesReference) {
  REQUIRE_GPU();
  struct Shape {
    int64_t M, N, K;
  };
  Gemm g;
  for (const Shape sh : {Shape{5, 128, 1024}, Shape{33, 1008, 4096}, Shape{100, 512, 2048}, Shape{7, 16, 16}, Shape{1, 4096, 1024}}) {
    const std::vector<float> x = round_bf16(randn(static_cast<size_t>(sh.M * sh.K), 300 + sh.M));
    const E4m3Matrix xq = quantize_host(x);
    const E4m3Matrix w = quantize_host(randn(static_cast<size_t>(sh.N * sh.K), 400 + sh.N, 0.05f));
    DeviceBuffer dx = upload(test::to_bf16(x)), dw = upload(w.codes), dwscale = upload(std::vector<float>{w.scale});
    DeviceBuffer xcodes = poisoned(x.size()), amax = poisoned(static_cast<size_t>(sh.M) * 4), xscale = poisoned(4);
    cuda::quantize_e4m3_tensor(dx.as<bf16>(), sh.M, sh.K, amax.as<float>(), xcodes.as<uint8_t>(), xscale.as<float>(), nullptr);
    const std::vector<float> ref = test::matmul_nt_ref(xq.values, w.values, sh.M, sh.N, sh.K);
    test::check_linear_outputs(shape_tag("gemm_e4m3", sh.M, sh.N, sh.K), ref, randn(ref.size(), 78),
                               [&](DeviceBuffer& y, bool f32, bool acc, const std::string&) {
      g.run_e4m3(xcodes.as<uint8_t>(), xscale.as<float>(), dw.as<uint8_t>(), dwscale.as<float>(), y.data(), f32, acc, sh.M,
                 sh.N, sh.K, nullptr);
    }, kFp8MmaTol);
  }
}

}  // namespace
}  // namespace inferscale
