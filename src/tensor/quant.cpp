// Dequantization of GGML's block formats (layouts drawn in quant.h). Each function follows ggml's
// dequantize_row_* (ggml-quants.c) operation for operation, which is also what gguf.quants does in
// numpy: products and sums are single float operations in the order written, so the results are
// bit-identical to both. The file is compiled with -ffp-contract=off (CMakeLists.txt): a fused
// multiply-add would round once where the reference rounds twice.
#include "tensor/quant.h"

#include <cstring>

#include "util/check.h"

namespace inferscale::quant {
namespace {

float f16(uint16_t h) { return f16_to_f32(h); }

void q4_0(const BlockQ4_0& b, float* y) {
  const float d = f16(b.d);
  for (int j = 0; j < kQK / 2; ++j) {
    y[j] = d * static_cast<float>((b.qs[j] & 0x0F) - 8);
    y[j + kQK / 2] = d * static_cast<float>((b.qs[j] >> 4) - 8);
  }
}

void q4_1(const BlockQ4_1& b, float* y) {
  const float d = f16(b.d), m = f16(b.m);
  for (int j = 0; j < kQK / 2; ++j) {
    y[j] = d * static_cast<float>(b.qs[j] & 0x0F) + m;
    y[j + kQK / 2] = d * static_cast<float>(b.qs[j] >> 4) + m;
  }
}

uint32_t high_bits(const uint8_t (&qh)[4]) {
  uint32_t v;
  std::memcpy(&v, qh, 4);
  return v;
}

void q5_0(const BlockQ5_0& b, float* y) {
  const float d = f16(b.d);
  const uint32_t qh = high_bits(b.qh);
  for (int j = 0; j < kQK / 2; ++j) {
    const int h0 = static_cast<int>((qh >> j) << 4) & 0x10;
    const int h1 = static_cast<int>(qh >> (j + 12)) & 0x10;
    y[j] = d * static_cast<float>(((b.qs[j] & 0x0F) | h0) - 16);
    y[j + kQK / 2] = d * static_cast<float>(((b.qs[j] >> 4) | h1) - 16);
  }
}

void q5_1(const BlockQ5_1& b, float* y) {
  const float d = f16(b.d), m = f16(b.m);
  const uint32_t qh = high_bits(b.qh);
  for (int j = 0; j < kQK / 2; ++j) {
    const int h0 = static_cast<int>((qh >> j) << 4) & 0x10;
    const int h1 = static_cast<int>(qh >> (j + 12)) & 0x10;
    y[j] = d * static_cast<float>((b.qs[j] & 0x0F) | h0) + m;
    y[j + kQK / 2] = d * static_cast<float>((b.qs[j] >> 4) | h1) + m;
  }
}

void q8_0(const BlockQ8_0& b, float* y) {
  const float d = f16(b.d);
  for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(b.qs[j]) * d;
}

void q2_k(const BlockQ2_K& b, float* y) {
  const float d = f16(b.d), dmin = f16(b.dmin);
  const uint8_t* q = b.qs;
  int is = 0;
  for (int half = 0; half < 2; ++half, q += 32) {
    for (int shift = 0; shift < 8; shift += 2) {
      for (int part = 0; part < 2; ++part) {  // values 16 at a time, each with its own scale
        const uint8_t sc = b.scales[is++];
        const float dl = d * static_cast<float>(sc & 0x0F), ml = dmin * static_cast<float>(sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[16 * part + l] >> shift) & 3) - ml;
      }
    }
  }
}

// The 16 6-bit scales of a Q3_K block (still biased by 32), unpacked as ggml does.
void q3_k_scales(const uint8_t (&packed)[12], int8_t (&out)[16]) {
  constexpr uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
  uint32_t aux[4];
  std::memcpy(aux, packed, 12);
  const uint32_t tmp = aux[2];
  aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
  aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
  aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
  aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
  std::memcpy(out, aux, 16);
}

void q3_k(const BlockQ3_K& b, float* y) {
  const float d_all = f16(b.d);
  int8_t scales[16];
  q3_k_scales(b.scales, scales);
  const uint8_t* q = b.qs;
  const uint8_t* hm = b.hmask;
  uint8_t m = 1;
  int is = 0;
  for (int half = 0; half < 2; ++half, q += 32) {
    for (int shift = 0; shift < 8; shift += 2, m = static_cast<uint8_t>(m << 1)) {
      for (int part = 0; part < 2; ++part) {
        const float dl = d_all * static_cast<float>(scales[is++] - 32);
        for (int l = 16 * part; l < 16 * part + 16; ++l)
          *y++ = dl * static_cast<float>(((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
      }
    }
  }
}

// Sub-block j's 6-bit scale and min of a Q4_K / Q5_K block.
void scale_min_k4(int j, const uint8_t (&q)[12], uint8_t& sc, uint8_t& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = static_cast<uint8_t>((q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4));
    m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

void q4_k(const BlockQ4_K& b, float* y) {
  const float d = f16(b.d), dmin = f16(b.dmin);
  const uint8_t* q = b.qs;
  for (int is = 0; is < 8; is += 2, q += 32) {
    uint8_t sc, m;
    scale_min_k4(is, b.scales, sc, m);
    const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
    scale_min_k4(is + 1, b.scales, sc, m);
    const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0x0F) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
  }
}

void q5_k(const BlockQ5_K& b, float* y) {
  const float d = f16(b.d), dmin = f16(b.dmin);
  const uint8_t* ql = b.qs;
  const uint8_t* qh = b.qh;
  uint8_t u1 = 1, u2 = 2;
  for (int is = 0; is < 8; is += 2, ql += 32, u1 = static_cast<uint8_t>(u1 << 2), u2 = static_cast<uint8_t>(u2 << 2)) {
    uint8_t sc, m;
    scale_min_k4(is, b.scales, sc, m);
    const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
    scale_min_k4(is + 1, b.scales, sc, m);
    const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>((ql[l] & 0x0F) + ((qh[l] & u1) ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
  }
}

void q6_k(const BlockQ6_K& b, float* y) {
  const float d = f16(b.d);
  const uint8_t* ql = b.ql;
  const uint8_t* qh = b.qh;
  const int8_t* sc = b.scales;
  for (int half = 0; half < 2; ++half, y += 128, ql += 64, qh += 32, sc += 8) {
    for (int is = 0; is < 2; ++is) {  // l in [16 is, 16 is + 16) shares its four scales: vectorizes
      const float s1 = static_cast<float>(sc[is]), s2 = static_cast<float>(sc[is + 2]);
      const float s3 = static_cast<float>(sc[is + 4]), s4 = static_cast<float>(sc[is + 6]);
      for (int l = 16 * is; l < 16 * is + 16; ++l) {
        const int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * s1 * static_cast<float>(q1);  // (d * sc) * q, as ggml
        y[l + 32] = d * s2 * static_cast<float>(q2);
        y[l + 64] = d * s3 * static_cast<float>(q3);
        y[l + 96] = d * s4 * static_cast<float>(q4);
      }
    }
  }
}

// The block function is a template argument so that it is inlined into the loop.
template <class Block, void (*Fn)(const Block&, float*), int Elems>
void run(const void* src, float* dst, int64_t n_blocks) {
  const Block* b = static_cast<const Block*>(src);
  for (int64_t i = 0; i < n_blocks; ++i) Fn(b[i], dst + i * Elems);
}

}  // namespace

void dequantize_blocks(DType t, const void* src, float* dst, int64_t n_blocks) {
  IS_CHECK(reinterpret_cast<uintptr_t>(src) % 2 == 0, "quantized blocks at an odd address");
  switch (t) {
    case DType::kQ4_0: return run<BlockQ4_0, q4_0, kQK>(src, dst, n_blocks);
    case DType::kQ4_1: return run<BlockQ4_1, q4_1, kQK>(src, dst, n_blocks);
    case DType::kQ5_0: return run<BlockQ5_0, q5_0, kQK>(src, dst, n_blocks);
    case DType::kQ5_1: return run<BlockQ5_1, q5_1, kQK>(src, dst, n_blocks);
    case DType::kQ8_0: return run<BlockQ8_0, q8_0, kQK>(src, dst, n_blocks);
    case DType::kQ2_K: return run<BlockQ2_K, q2_k, kQK_K>(src, dst, n_blocks);
    case DType::kQ3_K: return run<BlockQ3_K, q3_k, kQK_K>(src, dst, n_blocks);
    case DType::kQ4_K: return run<BlockQ4_K, q4_k, kQK_K>(src, dst, n_blocks);
    case DType::kQ5_K: return run<BlockQ5_K, q5_k, kQK_K>(src, dst, n_blocks);
    case DType::kQ6_K: return run<BlockQ6_K, q6_k, kQK_K>(src, dst, n_blocks);
    default: IS_THROW(kInternal, "dtype {} is not block-quantized", dtype_name(t));
  }
}

}  // namespace inferscale::quant
