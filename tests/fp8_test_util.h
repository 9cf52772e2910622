// FP8 E4M3 rows for tests: each row of `dim` values with its own scale, through tensor/fp8.h (the
// CPU twin of every FP8 store: the CPU pool, the GPU's FP8 KV cache).
#pragma once
#include <cstdint>
#include <vector>

#include "tensor/fp8.h"

namespace inferscale::test {

struct Fp8Rows {
  std::vector<uint8_t> codes;  // [rows * dim]
  std::vector<float> scales;   // [rows]
};

inline Fp8Rows fp8_quantize(const std::vector<float>& rows, int64_t dim) {
  Fp8Rows q;
  q.codes.resize(rows.size());
  for (size_t off = 0; off < rows.size(); off += static_cast<size_t>(dim))
    q.scales.push_back(quantize_e4m3_row(rows.data() + off, dim, q.codes.data() + off));
  return q;
}

// Codes times scales (a NaN code, e.g. 0xff poison, stays NaN).
inline std::vector<float> fp8_dequantize(const std::vector<uint8_t>& codes, const std::vector<float>& scales, int64_t dim) {
  std::vector<float> out(codes.size());
  for (size_t r = 0; r < scales.size(); ++r)
    dequantize_e4m3_row(codes.data() + r * static_cast<size_t>(dim), dim, scales[r], out.data() + r * static_cast<size_t>(dim));
  return out;
}

// What an FP8 store keeps of `rows`.
inline std::vector<float> fp8_rounded(const std::vector<float>& rows, int64_t dim) {
  std::vector<float> out(rows.size());
  for (size_t off = 0; off < rows.size(); off += static_cast<size_t>(dim)) round_e4m3_row(rows.data() + off, dim, out.data() + off);
  return out;
}

}  // namespace inferscale::test
