// A backend that overlaps its forwards with the host as the GPU's does (Backend::launch_forward),
// over a real one that computes on the host: launch_forward() only takes the batch; the forward is
// computed at wait_forward() (or by any other call, which completes it first, as the CUDA backend
// does); forward_running() answers true for the first `busy_polls` questions after each launch, as
// a device still computing would. The engine's overlap (memory planned beside a forward) runs on
// the CPU with it, the outputs computed by the inner backend exactly.
#pragma once
#include <memory>
#include <optional>
#include <vector>

#include "forwarding_backend.h"

namespace inferscale::test_support {

class DeferringBackend final : public ForwardingBackend {
 public:
  DeferringBackend(std::unique_ptr<Backend> inner, int busy_polls) : ForwardingBackend(std::move(inner)), busy_polls_(busy_polls) {}

  bool overlaps_forward() const override { return true; }
  void launch_forward(const ForwardBatch& b, ForwardOutput& out) override {
    wait_forward();
    pending_ = b;
    out_ = &out;
    polls_left_ = busy_polls_;
    ++launches;
  }
  bool forward_running() override {
    if (!pending_ || polls_left_ == 0) return false;
    --polls_left_;
    return true;
  }
  void wait_forward() override {
    if (!pending_) return;
    const ForwardBatch b = std::move(*pending_);
    pending_.reset();
    ForwardingBackend::forward(b, *out_);
  }

  using ForwardingBackend::forward;
  void forward(const ForwardBatch& b, ForwardOutput& out) override {
    wait_forward();
    ForwardingBackend::forward(b, out);
  }
  void inject(const InjectBatch& b) override {
    wait_forward();
    ForwardingBackend::inject(b);
  }
  void read_pool(const std::vector<int64_t>& s, HostTensor& k, HostTensor& v) override {
    wait_forward();
    ForwardingBackend::read_pool(s, k, v);
  }
  void write_pool(const std::vector<int64_t>& s, const HostTensor& k, const HostTensor& v) override {
    pool_writes_beside_forward += pending_.has_value();
    wait_forward();
    ForwardingBackend::write_pool(s, k, v);
  }
  void read_cache(const std::vector<int64_t>& s, HostTensor& k, HostTensor& v) override {
    wait_forward();
    ForwardingBackend::read_cache(s, k, v);
  }

  bool pending() const { return pending_.has_value(); }
  int64_t launches = 0;
  int64_t pool_writes_beside_forward = 0;  // write_pool calls that had to complete a launched forward

 private:
  int busy_polls_;
  int polls_left_ = 0;
  std::optional<ForwardBatch> pending_;
  ForwardOutput* out_ = nullptr;
};

}  // namespace inferscale::test_support
