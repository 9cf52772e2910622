#include "backend/cpu/cpu_forward_ops.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "backend/cpu/cpu_linear_rows.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/cpu_twins.h"
#include "backend/fp8_projections.h"
#include "backend/probe_shape.h"
#include "tensor/fp8.h"
#include "tensor/quant.h"
#include "util/check.h"

namespace inferscale {
namespace {

float* f(Act a) { return static_cast<float*>(a.data); }
const float* vec(const Weight& w) { return w.empty() ? nullptr : static_cast<const HostTensor*>(w.impl)->as<const float>(); }

}  // namespace

CpuForwardOps::CpuForwardOps(const ModelConfig& cfg, CpuKv& kv, int32_t block_size, int32_t num_threads,
                             bool linear_rows, bool quant_linears, bool e4m3_projections, CpuRank rank)
    : cfg_(cfg),
      kv_(kv),
      rope_(cfg),
      block_size_(block_size),
      threads_(num_threads),
      linear_rows_(linear_rows && cpu::linear_rows_available()),
      quant_linears_(quant_linears && cpu::linear_rows_available()),
      e4m3_projections_(e4m3_projections),
      rank_(rank) {
  if (num_threads > 0) openblas_set_num_threads(num_threads);
}

Weight CpuForwardOps::matrix(std::initializer_list<const HostTensor*> parts) {
  Matrix m;
  int64_t rows = 0, cols = -1;
  for (const HostTensor* p : parts) {
    IS_CHECK(p != nullptr && !p->empty(), "a matrix part is missing");
    IS_CHECK(cols < 0 || p->row_size() == cols, "stacked matrix parts differ in columns ({} vs {})", p->row_size(), cols);
    cols = p->row_size();
    rows += p->num_rows();
    m.parts.push_back(p->to_f32());  // a view when stored as f32
    m.blocks.push_back(*p);  // a view: the tensor's owner keeps its bytes
  }
  for (const HostTensor& p : m.blocks)
    if (!cpu::linear_rows_quant_supported(p.dtype)) m.blocks.clear();
  matrices_.push_back(std::move(m));
  return Weight{&matrices_.back(), rows, cols};
}

void CpuForwardOps::round_back_e4m3(int64_t rows, int64_t cols) {
  Matrix& m = matrices_.back();
  HostTensor all = HostTensor::uninitialized(DType::kF32, {rows, cols});
  int64_t at = 0;
  for (const HostTensor& p : m.parts) {
    std::memcpy(all.as<float>() + at, p.data, static_cast<size_t>(p.numel()) * 4);
    at += p.numel();
  }
  round_e4m3_row(all.as<float>(), rows * cols, all.as<float>());
  m.parts.clear();
  m.parts.push_back(std::move(all));
  m.blocks.clear();
  m.e4m3 = true;
}

Weight CpuForwardOps::projection(std::initializer_list<const HostTensor*> parts) {
  const Weight w = matrix(parts);
  if (e4m3_projections_ && fp8_projection_shape(w.rows, w.cols)) round_back_e4m3(w.rows, w.cols);
  return w;
}

Weight CpuForwardOps::random_projection(int64_t rows, int64_t cols, uint64_t seed, float std) {
  const Weight w = random_matrix(rows, cols, seed, std);
  if (e4m3_projections_ && fp8_projection_shape(rows, cols)) round_back_e4m3(rows, cols);
  return w;
}

Weight CpuForwardOps::keep_vector(HostTensor t) {
  vectors_.push_back(std::move(t));
  return Weight{&vectors_.back(), 1, vectors_.back().numel()};
}

Weight CpuForwardOps::vector(std::initializer_list<const HostTensor*> parts) {
  int64_t n = 0;
  bool any = false;
  for (const HostTensor* p : parts) {
    any = any || !p->empty();
    n += p->numel();
  }
  if (!any) return {};
  if (parts.size() == 1) return keep_vector((*parts.begin())->to_f32());
  HostTensor all = HostTensor::uninitialized(DType::kF32, {n});
  int64_t at = 0;
  for (const HostTensor* p : parts) {
    IS_CHECK(!p->empty(), "a part of a concatenated vector is missing");
    const HostTensor v = p->to_f32();
    std::memcpy(all.as<float>() + at, v.data, static_cast<size_t>(v.numel()) * 4);
    at += v.numel();
  }
  return keep_vector(std::move(all));
}

Weight CpuForwardOps::random_matrix(int64_t rows, int64_t cols, uint64_t seed, float std) {
  HostTensor t = HostTensor::uninitialized(DType::kF32, {rows, cols});
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, std);
  for (int64_t i = 0; i < rows * cols; ++i) t.as<float>()[i] = dist(rng);
  Matrix m;
  m.parts.push_back(std::move(t));
  matrices_.push_back(std::move(m));
  return Weight{&matrices_.back(), rows, cols};
}

Weight CpuForwardOps::filled_vector(int64_t n, float value) {
  HostTensor t = HostTensor::uninitialized(DType::kF32, {n});
  for (int64_t i = 0; i < n; ++i) t.as<float>()[i] = value;
  return keep_vector(std::move(t));
}

void CpuForwardOps::begin(const ForwardBatch& b, AttnMask mask) {
  check_forward_batch(b, kv_.cache_slots, block_size_, kv_.pool.slots(), cfg_.vocab_size);
  batch_ = &b;
  mask_ = mask;
  probe_mass_.assign(static_cast<size_t>(b.probe_mass_size()), 0.0f);
  const int64_t T = b.num_tokens(), half = cfg_.head_dim / 2;
  cos_.resize(static_cast<size_t>(T * half));
  sin_.resize(cos_.size());
  for (int64_t t = 0; t < T; ++t) rope_.angles(b.positions[static_cast<size_t>(t)], &cos_[static_cast<size_t>(t * half)], &sin_[static_cast<size_t>(t * half)]);
  int64_t fact_end = 0;
  for (int32_t s = 0; s < b.num_seqs(); ++s) fact_end = std::max<int64_t>(fact_end, b.fact_range(s).second);
  if (fact_end > 0) ensure_rope_table(fact_end);
}

void CpuForwardOps::ensure_rope_table(int64_t positions) {
  const int64_t half = cfg_.head_dim / 2, have = static_cast<int64_t>(table_cos_.size()) / std::max<int64_t>(half, 1);
  if (positions <= have) return;
  const int64_t n = std::max(positions, 2 * have);  // doubling: a growing context rebuilds rarely
  table_cos_.resize(static_cast<size_t>(n * half));
  table_sin_.resize(table_cos_.size());
  for (int64_t p = have; p < n; ++p) rope_.angles(p, &table_cos_[static_cast<size_t>(p * half)], &table_sin_[static_cast<size_t>(p * half)]);
}

Act CpuForwardOps::act(int slot, int64_t rows, int64_t cols, ActType type) {
  IS_CHECK(slot >= 0 && slot < 64, "activation slot {} out of range", slot);
  if (static_cast<size_t>(slot) >= acts_.size()) acts_.resize(static_cast<size_t>(slot) + 1);
  // Every element is written before it is read: the buffer keeps its capacity across forwards.
  acts_[static_cast<size_t>(slot)].resize(static_cast<size_t>(rows * cols));
  return Act{acts_[static_cast<size_t>(slot)].data(), rows, cols, type};
}

void CpuForwardOps::embed(const Weight& table, EmbedIndex index, Act x, bool accumulate) {
  const auto& m = *static_cast<const Matrix*>(table.impl);
  IS_CHECK(m.parts.size() == 1 && table.cols == x.cols, "embedding table of {} columns for rows of {}", table.cols, x.cols);
  const float* tab = m.parts[0].as<const float>();
  const int64_t H = x.cols;
  for (int64_t t = 0; t < x.rows; ++t) {
    int64_t row = 0;
    if (index == EmbedIndex::kTokenIds) row = batch_->token_ids[static_cast<size_t>(t)];
    if (index == EmbedIndex::kPositions) row = batch_->positions[static_cast<size_t>(t)];
    IS_REQUIRE(row >= 0 && row < table.rows, kInvalidInput, "{} {} is outside the embedding table of {} rows",
               index == EmbedIndex::kPositions ? "position" : "row", row, table.rows);
    float* xr = f(x) + t * H;
    const float* src = tab + row * H;
    if (accumulate) {
      for (int64_t i = 0; i < H; ++i) xr[i] += src[i];
    } else {
      std::memcpy(xr, src, static_cast<size_t>(H) * 4);
    }
  }
}

void CpuForwardOps::rms_norm(Act x, const Weight& w, Act y, float eps, bool output_rows) {
  if (!output_rows) {
    cpu::rmsnorm(f(x), vec(w), f(y), x.rows, x.cols, eps, &threads_);
    return;
  }
  gather_output_rows(x, y);
  cpu::rmsnorm(f(y), vec(w), f(y), y.rows, y.cols, eps);
}

void CpuForwardOps::layer_norm(Act x, const Weight& w, const Weight& b, Act y, float eps) {
  cpu::layer_norm(f(x), vec(w), vec(b), f(y), x.rows, x.cols, eps, &threads_);
}

// All parts' rows in one parallel_for (one wake of the pool a linear), each chunk through the parts
// it overlaps; a chunk covers at least ~64 K weights, so small matrices run on one thread.
template <typename RowsFn>
void CpuForwardOps::linear_parts(const Matrix& m, int64_t K, float* y, const RowsFn& rows) {
  int64_t total = 0;
  for (const HostTensor& p : m.parts) total += p.num_rows();
  const int64_t grain = std::max<int64_t>(16, (int64_t{64} << 10) / std::max<int64_t>(1, K));
  threads_.parallel_for(total, grain, [&](int64_t r0, int64_t r1) {
    int64_t base = 0;
    for (size_t j = 0; j < m.parts.size(); ++j) {
      const int64_t n = m.parts[j].num_rows(), lo = std::max(r0, base), hi = std::min(r1, base + n);
      if (lo < hi) rows(j, lo - base, hi - base, y + base);
      base += n;
    }
  });
}

void CpuForwardOps::all_reduce(Act y) {
  if (rank_.reduce != nullptr) rank_.reduce->sum(f(y), y.rows * y.cols);
}

void CpuForwardOps::linear(Act x, const Weight& w, const Weight& bias, Act y, bool accumulate) {
  const auto& m = *static_cast<const Matrix*>(w.impl);
  IS_CHECK(x.cols == w.cols && y.cols == w.rows && x.rows == y.rows, "linear [{}, {}] x [{}, {}]^T into [{}, {}]",
           x.rows, x.cols, w.rows, w.cols, y.rows, y.cols);
  // accumulate: the product first, then added, as y += (x w^T) (the residual adds).
  float* dst = f(y);
  if (accumulate) {
    scratch_.resize(static_cast<size_t>(y.rows * y.cols));
    dst = scratch_.data();
  }
  const float* b = vec(bias);
  const int64_t T = x.rows, K = x.cols;
  const float* xs = f(x);
  if (m.e4m3) {  // the GPU's W8A8: x rounded to E4M3 with one scale for the batch
    x_e4m3_.resize(static_cast<size_t>(T * K));
    round_e4m3_row(xs, T * K, x_e4m3_.data());
    xs = x_e4m3_.data();
  }
  if (quant_linears_ && !m.blocks.empty() && T <= cpu::kQuantRowsMax) {
    block_sums_.resize(static_cast<size_t>(T * (K / quant::kQK)));
    cpu::block_sums(xs, T, K, block_sums_.data());
    linear_parts(m, K, dst, [&](size_t part, int64_t n0, int64_t n1, float* yp) {
      const HostTensor& q = m.blocks[part];
      cpu::linear_rows_quant(xs, block_sums_.data(), T, K, q.data, q.dtype, n0, n1, yp, y.cols);
    });
  } else if (linear_rows_ && T >= 2 && T <= cpu::kLinearRowsMax) {  // one row: sgemv
    linear_parts(m, K, dst, [&](size_t part, int64_t n0, int64_t n1, float* yp) {
      cpu::linear_rows(xs, T, K, m.parts[part].as<const float>(), n0, n1, yp, y.cols);
    });
  } else {
    int64_t col = 0;
    for (const HostTensor& p : m.parts) {
      cpu::linear(xs, p.as<const float>(), nullptr, dst + col, T, K, p.num_rows(), y.cols);
      col += p.num_rows();
    }
  }
  if (b != nullptr)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t o = 0; o < y.cols; ++o) dst[t * y.cols + o] += b[o];
  if (accumulate) {
    float* yy = f(y);
    for (size_t i = 0; i < scratch_.size(); ++i) yy[i] += scratch_[i];
  }
}

void CpuForwardOps::qkv(Act qkv, const QkvStep& step, int32_t layer, Act q) {
  const ForwardBatch& b = *batch_;
  const int64_t T = qkv.rows, NH = cfg_.num_heads, NKV = cfg_.num_kv_heads, D = cfg_.head_dim;
  const int64_t QS = NH * D, KS = NKV * D, W = QS + 2 * KS, half = D / 2;
  IS_CHECK(qkv.cols == W && q.cols == QS, "qkv rows of {} (want {}), q rows of {}", qkv.cols, W, q.cols);
  const float* bias = vec(step.bias);
  float* all = f(qkv);
  // Per token: + bias -> per-head q/k RMSNorm.
  threads_.parallel_for(T, 16, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* row = all + t * W;
      if (bias)
        for (int64_t i = 0; i < W; ++i) row[i] += bias[i];
      if (!step.q_norm.empty()) {
        cpu::rmsnorm(row, vec(step.q_norm), row, NH, D, step.eps);
        cpu::rmsnorm(row + QS, vec(step.k_norm), row + QS, NKV, D, step.eps);
      }
    }
  });
  // Write path: keys BEFORE rotation, values as they are.
  if (!b.capture_tokens.empty()) {
    capture_.resize(b.capture_tokens.size() * static_cast<size_t>(KS));
    for (int which = 0; which < 2; ++which) {
      for (size_t c = 0; c < b.capture_tokens.size(); ++c)
        std::memcpy(&capture_[c * static_cast<size_t>(KS)], all + b.capture_tokens[c] * W + QS + which * KS,
                    static_cast<size_t>(KS) * 4);
      kv_.pool.write(layer, which, b.capture_slots.data(), static_cast<int64_t>(b.capture_tokens.size()), capture_.data());
    }
  }
  // RoPE of q and k at each token's position -> q, and K / V rows into the cache.
  for (int64_t t = 0; t < T; ++t) {
    float* row = all + t * W;
    if (step.rope) {
      rope_.rotate_with(row, NH, &cos_[static_cast<size_t>(t * half)], &sin_[static_cast<size_t>(t * half)]);
      rope_.rotate_with(row + QS, NKV, &cos_[static_cast<size_t>(t * half)], &sin_[static_cast<size_t>(t * half)]);
    }
    std::memcpy(f(q) + t * QS, row, static_cast<size_t>(QS) * 4);
    const int64_t slot = b.slot_mapping[static_cast<size_t>(t)];
    kv_.cache.write(layer, 0, &slot, 1, row + QS);
    kv_.cache.write(layer, 1, &slot, 1, row + QS + KS);
  }
}

void CpuForwardOps::attention(Act q, int32_t layer, Act out) {
  const ForwardBatch& b = *batch_;
  const CpuKvStore& c = kv_.cache;
  cpu::PagedAttentionArgs pa{f(q), c.f32_rows(layer, 0), c.f32_rows(layer, 1), f(out), b.positions.data(),
                             b.q_indptr.data(), b.kv_indptr.data(), b.kv_indices.data(),
                             b.kv_start.empty() ? nullptr : b.kv_start.data(), b.num_seqs(),
                             static_cast<int32_t>(cfg_.num_heads), static_cast<int32_t>(cfg_.num_kv_heads),
                             static_cast<int32_t>(cfg_.head_dim), block_size_,
                             static_cast<float>(1.0 / std::sqrt(static_cast<double>(cfg_.head_dim))),
                             mask_ == AttnMask::kCausal,
                             c.codes(layer, 0),
                             c.codes(layer, 1),
                             c.scales(layer, 0),
                             c.scales(layer, 1),
                             {}};
  if (b.reads_facts_in_place()) {
    const CpuKvStore& p = kv_.pool;
    pa.facts = {b.fact_indptr.data(), b.fact_start.data(), b.fact_slots.data(),
                {p.f32_rows(layer, 0), p.f32_rows(layer, 1), p.codes(layer, 0), p.codes(layer, 1), p.scales(layer, 0), p.scales(layer, 1)},
                table_cos_.data(), table_sin_.data(), &rope_};
  }
  cpu::paged_attention(pa, &threads_);
  probe_attention(q, layer);
}

// This layer's share of each probe's attention weights (ForwardBatch::probes), into probe_mass_.
void CpuForwardOps::probe_attention(Act q, int32_t layer) {
  const ForwardBatch& b = *batch_;
  const CpuKvStore& c = kv_.cache;
  float* mass = probe_mass_.data();
  for (const ForwardBatch::Probe& p : b.probes) {
    cpu::AttentionMassArgs a;
    a.s = probe_mass_shape(b, p, cfg_, block_size_);
    if (layer >= p.first_layer) {
      a.q = f(q) + static_cast<int64_t>(p.first_token) * cfg_.num_heads * cfg_.head_dim;
      a.cache = {c.f32_rows(layer, 0), c.f32_rows(layer, 1), c.codes(layer, 0), c.codes(layer, 1), c.scales(layer, 0), c.scales(layer, 1)};
      a.positions = b.positions.data() + p.first_token;
      a.blocks = b.kv_indices.data() + b.kv_indptr[p.seq];
      cpu::attention_mass(a, mass);
    }
    mass += static_cast<int64_t>(a.s.rows) * a.s.keys();
  }
}

void CpuForwardOps::silu_mul(Act gu, Act out) {
  const int64_t I = out.cols;
  IS_CHECK(gu.cols == 2 * I && gu.rows == out.rows, "silu_mul of [{}, {}] into [{}, {}]", gu.rows, gu.cols, out.rows, I);
  threads_.parallel_for(out.rows, std::max<int64_t>(1, 32768 / std::max<int64_t>(1, I)), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) cpu::silu_mul(f(gu) + t * 2 * I, f(gu) + t * 2 * I + I, f(out) + t * I, I);
  });
}

void CpuForwardOps::gelu(Act x) { cpu::gelu(f(x), x.rows * x.cols, &threads_); }

void CpuForwardOps::gather_output_rows(Act x, Act rows) {
  const ForwardBatch& b = *batch_;
  IS_CHECK(rows.rows == static_cast<int64_t>(b.output_tokens.size()) && rows.cols == x.cols, "output rows [{}, {}]",
           rows.rows, rows.cols);
  for (int64_t r = 0; r < rows.rows; ++r)
    std::memcpy(f(rows) + r * x.cols, f(x) + static_cast<int64_t>(b.output_tokens[static_cast<size_t>(r)]) * x.cols,
                static_cast<size_t>(x.cols) * 4);
}

void CpuForwardOps::argmax(Act logits, int64_t n, Act ids) {
  cpu::argmax_rows(f(logits), logits.rows, logits.cols, n, static_cast<int32_t*>(ids.data));
}

void CpuForwardOps::sample(Act logits, int64_t n, Act ids) {
  cpu::sample_rows(f(logits), logits.rows, logits.cols, n, batch_->sampling.data(), static_cast<int32_t*>(ids.data));
}

void CpuForwardOps::finish(Act result, bool ids, ForwardOutput& out) {
  out.probe_mass = probe_mass_;
  const size_t n = static_cast<size_t>(result.rows * result.cols);
  if (ids) {
    const auto* p = static_cast<const int32_t*>(result.data);
    out.ids.assign(p, p + n);
    out.values.clear();
    return;
  }
  out.values.assign(f(result), f(result) + n);
  out.ids.clear();
}

}  // namespace inferscale
