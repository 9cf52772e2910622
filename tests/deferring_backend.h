// A backend that overlaps its forwards with the host as the GPU's does (Backend::launch_forward),
// over a real one that computes on the host: launch_forward() only queues the batch (at most two,
// a third completes the oldest first); a forward is computed, in launch order, at wait_forward()
// (the oldest), wait_forwards() or any other call, which completes them all first, as the CUDA
// backend does; forward_running() answers true for the first `busy_polls` questions after each
// launch, as a device still computing would. The engine's overlap (memory planned beside a
// forward, the next forward queued behind it with fed tokens) runs on the CPU with it, the outputs
// computed by the inner backend exactly.
#pragma once
#include <deque>
#include <memory>
#include <vector>

#include "forwarding_backend.h"

namespace inferscale::test_support {

class DeferringBackend final : public ForwardingBackend {
 public:
  DeferringBackend(std::unique_ptr<Backend> inner, int busy_polls) : ForwardingBackend(std::move(inner)), busy_polls_(busy_polls) {}

  bool overlaps_forward() const override { return true; }
  void launch_forward(const ForwardBatch& b, ForwardOutput& out) override {
    if (queue_.size() >= 2) wait_forward();
    queue_.push_back({b, &out});
    polls_left_ = busy_polls_;
    ++launches;
    queued_beside += queue_.size() > 1;
  }
  bool forward_running() override {
    if (queue_.empty() || polls_left_ == 0) return false;
    --polls_left_;
    return true;
  }
  void wait_forward() override {
    if (queue_.empty()) return;
    Deferred d = std::move(queue_.front());
    queue_.pop_front();
    ForwardingBackend::forward(d.batch, *d.out);
  }
  void wait_forwards() override {
    while (!queue_.empty()) wait_forward();
  }

  using ForwardingBackend::forward;
  void forward(const ForwardBatch& b, ForwardOutput& out) override {
    wait_forwards();
    ForwardingBackend::forward(b, out);
  }
  void inject(const InjectBatch& b) override {
    wait_forwards();
    ForwardingBackend::inject(b);
  }
  void read_pool(const std::vector<int64_t>& s, HostTensor& k, HostTensor& v) override {
    wait_forwards();
    ForwardingBackend::read_pool(s, k, v);
  }
  void write_pool(const std::vector<int64_t>& s, const HostTensor& k, const HostTensor& v) override {
    pool_writes_beside_forward += !queue_.empty();
    wait_forwards();
    ForwardingBackend::write_pool(s, k, v);
  }
  void read_cache(const std::vector<int64_t>& s, HostTensor& k, HostTensor& v) override {
    wait_forwards();
    ForwardingBackend::read_cache(s, k, v);
  }

  bool pending() const { return !queue_.empty(); }
  int64_t launches = 0;
  int64_t queued_beside = 0;  // launches while another forward was pending
  int64_t pool_writes_beside_forward = 0;  // write_pool calls that had to complete a launched forward

 private:
  int busy_polls_;
  int polls_left_ = 0;
  struct Deferred {
    ForwardBatch batch;
    ForwardOutput* out;
  };
  std::deque<Deferred> queue_;
};

}  // namespace inferscale::test_support
