#include "model/rope.h"

#include <algorithm>
#include <cmath>

#include "util/check.h"

namespace inferscale {
namespace {

constexpr double kPi = 3.14159265358979323846;

void apply_llama3(const RopeScaling& s, std::vector<double>& inv_freq) {
  const double old_ctx = static_cast<double>(s.original_max_position_embeddings);
  const double low_wavelen = old_ctx / s.low_freq_factor;
  const double high_wavelen = old_ctx / s.high_freq_factor;
  for (double& f : inv_freq) {
    const double wavelen = 2 * kPi / f;
    if (wavelen < high_wavelen) continue;              // high frequency: unchanged
    if (wavelen > low_wavelen) {                       // low frequency: divided by factor
      f /= s.factor;
      continue;
    }
    const double smooth = (old_ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
    f = (1 - smooth) * f / s.factor + smooth * f;
  }
}

double yarn_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

// Mirrors transformers' _compute_yarn_parameters; `factor` is the effective scale.
double apply_yarn(const ModelConfig& cfg, std::vector<double>& inv_freq) {
  const RopeScaling& s = cfg.rope_scaling;
  const double dim = static_cast<double>(cfg.head_dim);
  const double base = cfg.rope_theta;
  const double factor = s.factor;
  const double orig = static_cast<double>(s.original_max_position_embeddings > 0 ? s.original_max_position_embeddings
                                                                                  : cfg.max_position_embeddings);
  double attention_factor = s.attention_factor;
  if (attention_factor <= 0) {
    attention_factor = (s.mscale > 0 && s.mscale_all_dim > 0)
                           ? yarn_mscale(factor, s.mscale) / yarn_mscale(factor, s.mscale_all_dim)
                           : yarn_mscale(factor, 1.0);
  }
  auto correction_dim = [&](double rotations) {
    return (dim * std::log(orig / (rotations * 2 * kPi))) / (2 * std::log(base));
  };
  double low = correction_dim(s.beta_fast);
  double high = correction_dim(s.beta_slow);
  if (s.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1);
  if (low == high) high += 0.001;  // avoid a zero-width ramp
  const size_t half = inv_freq.size();
  for (size_t i = 0; i < half; ++i) {
    const double extrap = inv_freq[i];
    const double interp = extrap / factor;
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    const double extrap_weight = 1.0 - ramp;
    inv_freq[i] = interp * (1 - extrap_weight) + extrap * extrap_weight;
  }
  return attention_factor;
}

}  // namespace

Rope::Rope(const ModelConfig& cfg) : head_dim_(cfg.head_dim), interleaved_(cfg.rope_interleaved) {
  IS_REQUIRE(head_dim_ > 0 && head_dim_ % 2 == 0, kInvalidInput, "rope needs an even head_dim, got {}", head_dim_);
  const int64_t half = head_dim_ / 2;
  inv_freq_.resize(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    inv_freq_[static_cast<size_t>(i)] =
        1.0 / std::pow(cfg.rope_theta, static_cast<double>(2 * i) / static_cast<double>(head_dim_));
  const RopeScaling& s = cfg.rope_scaling;
  switch (s.type) {
    case RopeType::kDefault:
      break;
    case RopeType::kLinear:
      for (double& f : inv_freq_) f /= s.factor;
      break;
    case RopeType::kLlama3:
      apply_llama3(s, inv_freq_);
      break;
    case RopeType::kYarn:
      attention_factor_ = apply_yarn(cfg, inv_freq_);
      break;
  }
}

void Rope::angles(int64_t pos, float* cos_out, float* sin_out) const {
  const double p = static_cast<double>(pos);
  for (size_t i = 0; i < inv_freq_.size(); ++i) {
    const double a = p * inv_freq_[i];
    cos_out[i] = static_cast<float>(std::cos(a) * attention_factor_);
    sin_out[i] = static_cast<float>(std::sin(a) * attention_factor_);
  }
}

void Rope::rotate_with(float* x, int64_t n_heads, const float* cos, const float* sin) const {
  const int64_t half = head_dim_ / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* v = x + h * head_dim_;
    if (interleaved_) {
      for (int64_t i = 0; i < half; ++i) {
        const float a = v[2 * i], b = v[2 * i + 1];
        v[2 * i] = a * cos[i] - b * sin[i];
        v[2 * i + 1] = b * cos[i] + a * sin[i];
      }
    } else {
      for (int64_t i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half];
        v[i] = a * cos[i] - b * sin[i];
        v[i + half] = b * cos[i] + a * sin[i];
      }
    }
  }
}

void Rope::rotate(float* x, int64_t n_heads, int64_t pos) const {
  std::vector<float> c(inv_freq_.size()), s(inv_freq_.size());
  angles(pos, c.data(), s.data());
  rotate_with(x, n_heads, c.data(), s.data());
}

}  // namespace inferscale
