#include "server/request_stream.h"

namespace inferscale::server {

RequestStream::Poll RequestStream::poll(std::chrono::milliseconds timeout) {
  std::unique_lock lk(mu_);
  cv_.wait_for(lk, timeout, [&] { return !queue_.empty() || done_ || (accepted_ && !accepted_reported_); });
  Poll p;
  p.accepted = accepted_;
  accepted_reported_ = accepted_;
  p.outputs.assign(std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.end()));
  queue_.clear();
  p.done = done_;
  p.error = error_;
  return p;
}

void RequestStream::cancel() {
  if (cancelled_.exchange(true, std::memory_order_acq_rel)) return;
  wake_();
}

void RequestStream::accept() {
  {
    std::lock_guard lk(mu_);
    accepted_ = true;
  }
  cv_.notify_all();
}

void RequestStream::push(RequestOutput out) {
  {
    std::lock_guard lk(mu_);
    if (done_) return;
    done_ = out.finished;
    queue_.push_back(std::move(out));
  }
  cv_.notify_all();
}

void RequestStream::fail(std::exception_ptr error) {
  {
    std::lock_guard lk(mu_);
    if (done_) return;
    done_ = true;
    error_ = std::move(error);
  }
  cv_.notify_all();
}

void RequestStream::end_cancelled() {
  {
    std::lock_guard lk(mu_);
    done_ = true;
  }
  cv_.notify_all();
}

}  // namespace inferscale::server
