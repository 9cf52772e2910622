// The CPU backend's KV rows, for its memory pool and its paged cache alike: per layer, the K and
// the V row of every slot ([slots, NKV * D]; the pool's keys before RoPE, the cache's after),
// stored in f32, or in FP8 E4M3 with one f32 scale per (slot, kv head) (BackendOptions::pool_fp8,
// cache_fp8; tensor/fp8.h): 1 byte an element plus 4 a head, about a quarter of f32. Rows go in
// and out as f32; an FP8 row reads back as its codes times its scales, and writing such a row
// again stores the same codes and scales.
#pragma once
#include <cstdint>
#include <vector>

namespace inferscale {

class CpuKvStore {
 public:
  CpuKvStore() = default;
  CpuKvStore(int64_t layers, int64_t slots, int64_t num_kv_heads, int64_t head_dim, bool fp8);

  int64_t slots() const { return slots_; }  // 0: none (no pool)
  // rows: [n, NKV * D] f32; which: 0 = K, 1 = V. Slots must be in [0, slots()).
  void write(int64_t layer, int which, const int64_t* slots, int64_t n, const float* rows);
  void read(int64_t layer, int which, const int64_t* slots, int64_t n, float* rows) const;
  // A layer's rows in place: f32 rows (null when FP8), or codes and per-(slot, head) scales (null
  // when f32), for readers that gather rows themselves (paged attention).
  const float* f32_rows(int64_t layer, int which) const;
  const uint8_t* codes(int64_t layer, int which) const;
  const float* scales(int64_t layer, int which) const;

 private:
  bool fp8_ = false;
  int64_t slots_ = 0, heads_ = 0, dim_ = 0;
  std::vector<std::vector<float>> f32_[2];       // [layer][slot * row + i]
  std::vector<std::vector<uint8_t>> codes_[2];   // [layer][slot * row + i]
  std::vector<std::vector<float>> scales_[2];    // [layer][slot * heads + h]
};

}  // namespace inferscale
