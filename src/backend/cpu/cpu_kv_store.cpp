#include "backend/cpu/cpu_kv_store.h"

#include <cstring>

#include "tensor/fp8.h"

namespace inferscale {

CpuKvStore::CpuKvStore(int64_t layers, int64_t slots, int64_t num_kv_heads, int64_t head_dim, bool fp8)
    : fp8_(fp8), slots_(slots), heads_(num_kv_heads), dim_(head_dim) {
  const size_t elems = static_cast<size_t>(slots * num_kv_heads * head_dim);
  for (int w = 0; w < 2; ++w)
    for (int64_t l = 0; l < layers; ++l) {
      if (fp8) {
        codes_[w].emplace_back(elems, uint8_t{0});
        scales_[w].emplace_back(static_cast<size_t>(slots * num_kv_heads), 0.0f);
      } else {
        f32_[w].emplace_back(elems, 0.0f);
      }
    }
}

void CpuKvStore::write(int64_t layer, int which, const int64_t* slots, int64_t n, const float* rows) {
  const int64_t row = heads_ * dim_;
  const auto l = static_cast<size_t>(layer);
  for (int64_t i = 0; i < n; ++i) {
    const float* src = rows + i * row;
    if (!fp8_) {
      std::memcpy(f32_[which][l].data() + slots[i] * row, src, static_cast<size_t>(row) * 4);
      continue;
    }
    uint8_t* codes = codes_[which][l].data() + slots[i] * row;
    float* scales = scales_[which][l].data() + slots[i] * heads_;
    for (int64_t h = 0; h < heads_; ++h) scales[h] = quantize_e4m3_row(src + h * dim_, dim_, codes + h * dim_);
  }
}

void CpuKvStore::read(int64_t layer, int which, const int64_t* slots, int64_t n, float* rows) const {
  const int64_t row = heads_ * dim_;
  const auto l = static_cast<size_t>(layer);
  for (int64_t i = 0; i < n; ++i) {
    float* dst = rows + i * row;
    if (!fp8_) {
      std::memcpy(dst, f32_[which][l].data() + slots[i] * row, static_cast<size_t>(row) * 4);
      continue;
    }
    const uint8_t* codes = codes_[which][l].data() + slots[i] * row;
    const float* scales = scales_[which][l].data() + slots[i] * heads_;
    for (int64_t h = 0; h < heads_; ++h) dequantize_e4m3_row(codes + h * dim_, dim_, scales[h], dst + h * dim_);
  }
}

const float* CpuKvStore::f32_rows(int64_t layer, int which) const {
  return fp8_ ? nullptr : f32_[which][static_cast<size_t>(layer)].data();
}
const uint8_t* CpuKvStore::codes(int64_t layer, int which) const {
  return fp8_ ? codes_[which][static_cast<size_t>(layer)].data() : nullptr;
}
const float* CpuKvStore::scales(int64_t layer, int which) const {
  return fp8_ ? scales_[which][static_cast<size_t>(layer)].data() : nullptr;
}

}  // namespace inferscale
