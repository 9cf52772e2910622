// Shared helpers of the GPU parity tests: random inputs, bf16 rounding, device copies, error
// metrics, poisoning, and a summary table of every parity check printed at the end of the run.
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_buffer.h"
#include "tensor/dtype.h"

namespace inferscale::test {

inline bool has_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}
#define REQUIRE_GPU()                                        \
  do {                                                       \
    if (!::inferscale::test::has_gpu()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

inline std::vector<float> randn(size_t n, uint64_t seed, float std = 1.0f, float mean = 0.0f) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(mean, std);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

inline std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = f32_to_bf16(v[i]);
  return o;
}
inline std::vector<float> from_bf16(const std::vector<uint16_t>& v) {
  std::vector<float> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = bf16_to_f32(v[i]);
  return o;
}
// The same values rounded to bf16 (what the GPU sees), kept as float for the CPU twin.
inline std::vector<float> round_bf16(const std::vector<float>& v) { return from_bf16(to_bf16(v)); }

template <class T>
DeviceBuffer upload(const std::vector<T>& v) {
  DeviceBuffer b(std::max<size_t>(v.size() * sizeof(T), 16));
  if (!v.empty()) CUDA_CHECK(cudaMemcpy(b.data(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return b;
}
template <class T>
std::vector<T> download(const DeviceBuffer& b, size_t n) {
  std::vector<T> v(n);
  CUDA_CHECK(cudaDeviceSynchronize());
  if (n > 0) CUDA_CHECK(cudaMemcpy(v.data(), b.data(), n * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}
// Poison: all bytes 0xFF, a NaN in bf16 and f32 and -1 in integers.
inline DeviceBuffer poisoned(size_t bytes) {
  DeviceBuffer b(std::max<size_t>(bytes, 16));
  CUDA_CHECK(cudaMemset(b.data(), 0xFF, b.bytes()));
  return b;
}

struct Err {
  double rel_l2 = 0;     // ||got - ref|| / ||ref||
  double max_abs = 0;    // max |got - ref|
  double max_ref = 0;    // max |ref|
  size_t unwritten = 0;  // NaN/Inf in got (poison left over)
  double max_rel() const { return max_ref > 0 ? max_abs / max_ref : max_abs; }
};
inline Err compare(const float* got, const float* ref, size_t n) {
  Err e;
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(got[i])) {
      ++e.unwritten;
      continue;
    }
    const double d = static_cast<double>(got[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
    e.max_abs = std::max(e.max_abs, std::abs(d));
    e.max_ref = std::max(e.max_ref, std::abs(static_cast<double>(ref[i])));
  }
  e.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return e;
}
inline Err compare(const std::vector<float>& got, const std::vector<float>& ref) {
  EXPECT_EQ(got.size(), ref.size());
  return compare(got.data(), ref.data(), std::min(got.size(), ref.size()));
}

// Records a parity result for the summary table and checks it: rel_l2 <= tol and max |error|
// <= 4 * tol * max |ref|, with nothing left unwritten.
void record(const std::string& name, const Err& e, double tol);
// Records a free-form line (e.g. token agreement) for the summary table.
void note(const std::string& name, const std::string& value);

// y[m, n] = sum_k x[m, k] w[n, k], in double.   x: [M, K]; w: [N, K]; y: [M, N]
inline std::vector<float> matmul_nt_ref(const std::vector<float>& x, const std::vector<float>& w, int64_t M, int64_t N,
                                        int64_t K) {
  std::vector<float> y(static_cast<size_t>(M * N));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k)
        acc += static_cast<double>(x[static_cast<size_t>(m * K + k)]) * w[static_cast<size_t>(n * K + k)];
      y[static_cast<size_t>(m * N + n)] = static_cast<float>(acc);
    }
  return y;
}

// A linear layer's three outputs, each written into y by `run(y, f32, accumulate, name)`: f32,
// f32 accumulated into y0 (y starts as y0), bf16; each against `ref` (+ y0) and recorded as
// tag + "/f32", "/f32_acc" or "/bf16" (the name run is given), f32 within f32_tol, bf16 4e-3.
template <class Run>
void check_linear_outputs(const std::string& tag, const std::vector<float>& ref, const std::vector<float>& y0, Run run,
                          double f32_tol = 1e-5) {
  for (int variant = 0; variant < 3; ++variant) {  // f32, f32 +=, bf16
    const bool acc = variant == 1, f32 = variant < 2;
    DeviceBuffer y = acc ? upload(y0) : poisoned(ref.size() * 4);
    const std::string what = tag + (acc ? "/f32_acc" : f32 ? "/f32" : "/bf16");
    run(y, f32, acc, what);
    std::vector<float> want = ref;
    if (acc)
      for (size_t i = 0; i < want.size(); ++i) want[i] += y0[i];
    const std::vector<float> got = f32 ? download<float>(y, want.size()) : from_bf16(download<uint16_t>(y, want.size()));
    record(what, compare(got, want), f32 ? f32_tol : 4e-3);
  }
}

}  // namespace inferscale::test
