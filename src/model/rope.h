// Rotary position embedding: inverse frequencies for every rope_scaling type, built in double.
// Angles are position x inv_freq computed in double (in fp32 that product alone loses ~1e-3 at
// position 100k), then cos/sin are rounded to float. The forward pass and memory injection both
// rotate through this one class, which is what makes injected keys equal prefilled keys.
#pragma once
#include <cstdint>
#include <vector>

#include "model/config.h"

namespace inferscale {

class Rope {
 public:
  explicit Rope(const ModelConfig& cfg);

  int64_t head_dim() const { return head_dim_; }
  bool interleaved() const { return interleaved_; }
  // [head_dim / 2] inverse frequencies after scaling.
  const std::vector<double>& inv_freq() const { return inv_freq_; }
  // Multiplies cos and sin (YaRN's mscale; 1 otherwise).
  double attention_factor() const { return attention_factor_; }

  // cos_out/sin_out: [head_dim / 2] for one position, attention factor folded in.
  void angles(int64_t pos, float* cos_out, float* sin_out) const;
  // x: [n_heads, head_dim] contiguous, rotated in place to position `pos`.
  void rotate(float* x, int64_t n_heads, int64_t pos) const;
  // Same with precomputed angles from angles().
  void rotate_with(float* x, int64_t n_heads, const float* cos, const float* sin) const;

 private:
  int64_t head_dim_;
  bool interleaved_;
  std::vector<double> inv_freq_;
  double attention_factor_ = 1.0;
};

}  // namespace inferscale
