#include "memory/cuda/cuda_vector_index.h"

#include <algorithm>
#include <mutex>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/device_buffer.h"
#include "memory/retrieval/cpu_vector_index.h"

namespace inferscale {
namespace {

constexpr size_t kKernelMaxK = 1024;

class CudaVectorIndex final : public VectorIndex {
 public:
  CudaVectorIndex(int32_t dim, int64_t min_device_elements) : host_(dim), min_device_elements_(min_device_elements) {
    CUDA_CHECK(cudaGetDevice(&device_));
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~CudaVectorIndex() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  int32_t dim() const override { return host_.dim(); }
  size_t size() const override { return host_.size(); }
  bool contains(int64_t id) const override { return host_.contains(id); }

  void add(std::span<const int64_t> ids, std::span<const float> vectors) override {
    const size_t before = host_.size();
    host_.add(ids, vectors);
    mark(before, host_.size());
  }
  void replace(std::span<const int64_t> ids, std::span<const float> vectors) override {
    host_.replace(ids, vectors);
    for (int64_t id : ids) {
      const size_t r = host_.row_of(id);
      mark(r, r + 1);
    }
  }
  bool remove(int64_t id) override {
    const size_t row = host_.row_of(id);
    if (!host_.remove(id)) return false;
    if (row < host_.size()) mark(row, row + 1);  // the last row moved here
    clamp_dirty();
    return true;
  }
  void clear() override {
    host_.clear();
    clamp_dirty();
  }

  std::vector<ScoredFact> search(std::span<const float> query, size_t k) const override {
    host_.check_query(query);
    const size_t n = host_.size();
    if (n == 0 || k == 0) return {};
    const size_t kk = std::min(k, n);
    if (kk > kKernelMaxK || static_cast<int64_t>(n) * host_.dim() < min_device_elements_) return host_.search(query, k);
    const auto d = static_cast<size_t>(host_.dim());

    std::lock_guard lock(mu_);
    CUDA_CHECK(cudaSetDevice(device_));
    sync_rows();
    staging_.reserve(d * sizeof(float) + kk * 8);
    float* h_query = staging_.as<float>();
    std::copy(query.begin(), query.end(), h_query);
    query_.reserve(d * sizeof(float));
    results_.reserve(kk * 8);
    const size_t ws = cuda::similarity_topk_workspace_bytes(static_cast<int64_t>(n), static_cast<int32_t>(kk));
    workspace_.reserve(ws);
    CUDA_CHECK(cudaMemcpyAsync(query_.data(), h_query, d * sizeof(float), cudaMemcpyHostToDevice, stream_));
    auto* d_ids = results_.as<int32_t>();
    auto* d_scores = reinterpret_cast<float*>(d_ids + kk);
    cuda::similarity_topk(matrix_.data(), false, query_.as<float>(), static_cast<int64_t>(n), static_cast<int64_t>(d),
                          static_cast<int32_t>(kk), d_ids, d_scores, workspace_.data(), workspace_.bytes(), stream_);
    auto* h_rows = reinterpret_cast<int32_t*>(h_query + d);
    CUDA_CHECK(cudaMemcpyAsync(h_rows, d_ids, kk * 8, cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    const auto* h_scores = reinterpret_cast<const float*>(h_rows + kk);
    std::vector<ScoredFact> out(kk);
    for (size_t i = 0; i < kk; ++i) out[i] = ScoredFact{host_.id_at(static_cast<size_t>(h_rows[i])), h_scores[i]};
    std::sort(out.begin(), out.end(), ranks_before);
    return out;
  }

 private:
  void mark(size_t lo, size_t hi) {
    if (lo >= hi) return;
    dirty_lo_ = std::min(dirty_lo_, lo);
    dirty_hi_ = std::max(dirty_hi_, hi);
  }
  void clamp_dirty() {
    dirty_hi_ = std::min(dirty_hi_, host_.size());
    if (dirty_lo_ >= dirty_hi_) dirty_lo_ = SIZE_MAX, dirty_hi_ = 0;
  }

  // Brings the device rows up to the host's (under mu_).
  void sync_rows() const {
    const size_t n = host_.size(), d = static_cast<size_t>(host_.dim());
    const size_t row_bytes = d * sizeof(float);
    if (matrix_.bytes() < n * row_bytes) {  // grow: contents lost, everything is re-uploaded
      matrix_.reserve(n * row_bytes);
      dirty_lo_ = 0;
      dirty_hi_ = n;
    }
    if (dirty_lo_ < dirty_hi_) {
      // On stream_, so the search's kernels see the rows; the search synchronizes before it
      // returns, and writes never overlap a search, so the host rows stay put until copied.
      CUDA_CHECK(cudaMemcpyAsync(matrix_.as<char>() + dirty_lo_ * row_bytes, host_.matrix() + dirty_lo_ * d,
                                 (dirty_hi_ - dirty_lo_) * row_bytes, cudaMemcpyHostToDevice, stream_));
    }
    dirty_lo_ = SIZE_MAX;
    dirty_hi_ = 0;
  }

  CpuVectorIndex host_;
  int64_t min_device_elements_;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  mutable std::mutex mu_;
  mutable DeviceBuffer matrix_;      // [capacity, dim] f32
  mutable DeviceBuffer query_;       // [dim] f32
  mutable DeviceBuffer results_;     // [k] i32 rows, then [k] f32 scores
  mutable DeviceBuffer workspace_;
  mutable PinnedBuffer staging_;     // [dim] query, then [k] rows, [k] scores
  mutable size_t dirty_lo_ = SIZE_MAX, dirty_hi_ = 0;
};

}  // namespace

std::unique_ptr<VectorIndex> make_cuda_vector_index(int32_t dim, int64_t min_device_elements) {
  return std::make_unique<CudaVectorIndex>(dim, min_device_elements);
}

}  // namespace inferscale
