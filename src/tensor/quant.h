// GGML's block-quantized weight formats (as llama.cpp writes them into GGUF files) and their
// dequantization to float, value for value what ggml's dequantize_row_* and the `gguf` Python
// package's gguf.quants.dequantize compute (the same float operations in the same order).
//
// A tensor row of n values is n / QK consecutive blocks (n must be a multiple of QK); blocks are
// packed with no padding, little-endian. `f16` is an IEEE half holding a scale (d) or a minimum (m);
// a block's value i is computed in float from its quant q_i and those scales.
//
// Legacy types: QK = 32 values per block; value i < 16 sits in the low nibble of qs[i], value
// i + 16 in its high nibble (Q8_0: one signed byte per value).
//
//   Q4_0 (18 B)  | d f16 | qs[16]: 32 x 4 bits |                    y = d * (q - 8)
//   Q4_1 (20 B)  | d f16 | m f16 | qs[16] |                          y = d * q + m
//   Q5_0 (22 B)  | d f16 | qh u32: bit i = 5th bit of q_i | qs[16] | y = d * (q - 16)
//   Q5_1 (24 B)  | d f16 | m f16 | qh u32 | qs[16] |                 y = d * q + m
//   Q8_0 (34 B)  | d f16 | qs[32]: int8 |                            y = q * d
//
// K-quants: a super-block of QK_K = 256 values in sub-blocks of 16 or 32 values, each with its own
// small integer scale (and min) that multiplies the super-block's f16 d (and dmin).
//
//   Q2_K (84 B)  | scales[16]: lo nibble = scale, hi = min, one per 16 values | qs[64]: 2 bits |
//                | d f16 | dmin f16 |                          y = (d * sc) * q - (dmin * m)
//   Q3_K (110 B) | hmask[32]: 3rd bit | qs[64]: low 2 bits | scales[12]: 16 x 6 bits | d f16 |
//                                                              y = (d * (sc - 32)) * (q - 4 * !hbit)
//   Q4_K (144 B) | d f16 | dmin f16 | scales[12]: 8 x (6-bit scale, 6-bit min) | qs[128]: 4 bits |
//                                                              y = (d * sc) * q - (dmin * m)
//   Q5_K (176 B) | d f16 | dmin f16 | scales[12] | qh[32]: 5th bit | qs[128]: low 4 bits |
//                                                              y = (d * sc) * q - (dmin * m)
//   Q6_K (210 B) | ql[128]: low 4 bits | qh[64]: high 2 bits | scales[16]: int8 | d f16 |
//                                                              y = (d * sc) * (q - 32)
// Where each value's bits sit inside qs / qh / hmask / scales is drawn at each struct below.
#pragma once
#include <cstdint>

#include "tensor/dtype.h"

namespace inferscale::quant {

constexpr int kQK = 32;     // values per legacy block
constexpr int kQK_K = 256;  // values per K-quant super-block

struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK / 2];  // byte j: value j (low nibble), value j + 16 (high nibble)
};

struct BlockQ4_1 {
  uint16_t d, m;
  uint8_t qs[kQK / 2];  // as Q4_0
};

struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];        // little-endian u32: bit i is bit 4 of value i
  uint8_t qs[kQK / 2];  // low 4 bits, as Q4_0
};

struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};

struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK];
};

// Values in two halves of 128. In half h, byte qs[32 h + l] holds values 128 h + 32 s + l at bits
// 2 s .. 2 s + 1 (s = 0..3, l = 0..31). scales[k] covers values 16 k .. 16 k + 15.
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];
  uint8_t qs[kQK_K / 4];
  uint16_t d, dmin;
};

// Low 2 bits as Q2_K's qs. The 3rd bit of value 32 j + l (j = 0..7) is bit j of hmask[l]; a clear
// bit subtracts 4 (q = low - 4 * !bit, in -4..3). The 16 6-bit scales (one per 16 values), biased
// by 32:
//   bytes 0-7:  low nibbles of scales 0-7, high nibbles: low 4 bits of scales 8-15
//   bytes 8-11: 2-bit pairs, byte 8 + i: bits 0-1 -> scale i, 2-3 -> 4 + i, 4-5 -> 8 + i, 6-7 -> 12 + i
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[12];
  uint16_t d;
};

// Eight sub-blocks of 32 values, each with a 6-bit scale sc_j and 6-bit min m_j packed in 12 bytes:
//   j < 4:  sc_j = scales[j] & 63,                              m_j = scales[j + 4] & 63
//   j >= 4: sc_j = (scales[j + 4] & 15) | (scales[j - 4] >> 6) << 4,
//           m_j  = (scales[j + 4] >> 4) | (scales[j] >> 6) << 4
// qs[32 p + l]: low nibble = value 64 p + l (sub-block 2 p), high nibble = value 64 p + 32 + l.
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qs[kQK_K / 2];
};

// As Q4_K, plus the 5th bit of value 32 j + l (j = 0..7) as bit j of qh[l].
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};

// Two halves of 128 values; in half h (ql += 64 h, qh += 32 h), for l = 0..31:
//   value 128 h + l      = ql[l] low nibble      | (qh[l] bits 0-1) << 4
//   value 128 h + 32 + l = ql[l + 32] low nibble | (qh[l] bits 2-3) << 4
//   value 128 h + 64 + l = ql[l] high nibble     | (qh[l] bits 4-5) << 4
//   value 128 h + 96 + l = ql[l + 32] high nibble| (qh[l] bits 6-7) << 4
// minus 32; scales[k] (signed) covers values 16 k .. 16 k + 15.
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;
};

static_assert(sizeof(BlockQ4_0) == dtype_block(DType::kQ4_0).bytes && kQK == dtype_block(DType::kQ4_0).elems);
static_assert(sizeof(BlockQ4_1) == dtype_block(DType::kQ4_1).bytes && kQK == dtype_block(DType::kQ4_1).elems);
static_assert(sizeof(BlockQ5_0) == dtype_block(DType::kQ5_0).bytes && kQK == dtype_block(DType::kQ5_0).elems);
static_assert(sizeof(BlockQ5_1) == dtype_block(DType::kQ5_1).bytes && kQK == dtype_block(DType::kQ5_1).elems);
static_assert(sizeof(BlockQ8_0) == dtype_block(DType::kQ8_0).bytes && kQK == dtype_block(DType::kQ8_0).elems);
static_assert(sizeof(BlockQ2_K) == dtype_block(DType::kQ2_K).bytes && kQK_K == dtype_block(DType::kQ2_K).elems);
static_assert(sizeof(BlockQ3_K) == dtype_block(DType::kQ3_K).bytes && kQK_K == dtype_block(DType::kQ3_K).elems);
static_assert(sizeof(BlockQ4_K) == dtype_block(DType::kQ4_K).bytes && kQK_K == dtype_block(DType::kQ4_K).elems);
static_assert(sizeof(BlockQ5_K) == dtype_block(DType::kQ5_K).bytes && kQK_K == dtype_block(DType::kQ5_K).elems);
static_assert(sizeof(BlockQ6_K) == dtype_block(DType::kQ6_K).bytes && kQK_K == dtype_block(DType::kQ6_K).elems);

// Dequantizes `n_blocks` consecutive blocks of block-quantized type `t` starting at `src` into
// dst[n_blocks * dtype_block(t).elems]. `src` is 2-byte aligned (every block size is even and GGUF
// tensor data is 32-byte aligned). Single-threaded: convert_to_f32 splits large tensors over
// threads. Not a block type or a misaligned `src`: an internal error.
void dequantize_blocks(DType t, const void* src, float* dst, int64_t n_blocks);

}  // namespace inferscale::quant
