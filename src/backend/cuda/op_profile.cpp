#include "backend/cuda/op_profile.h"

#include "backend/cuda/cuda_check.h"

namespace inferscale {

OpProfiler::~OpProfiler() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

void OpProfiler::set_enabled(bool on) {
  enabled_ = on;
  totals_.clear();
  names_.clear();
}

void OpProfiler::mark(std::string op, cudaStream_t stream) {
  if (names_.size() == events_.size()) {
    cudaEvent_t e = nullptr;
    CUDA_CHECK(cudaEventCreate(&e));
    events_.push_back(e);
  }
  CUDA_CHECK(cudaEventRecord(events_[names_.size()], stream));
  names_.push_back(std::move(op));
}

void OpProfiler::collect(cudaEvent_t stop) {
  for (size_t i = 0; i < names_.size(); ++i) {
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, events_[i], i + 1 < names_.size() ? events_[i + 1] : stop));
    OpTime* t = nullptr;
    for (OpTime& x : totals_)
      if (x.op == names_[i]) t = &x;
    if (t == nullptr) t = &totals_.emplace_back(OpTime{names_[i]});
    t->ms += ms;
    ++t->calls;
  }
  names_.clear();
}

}  // namespace inferscale
