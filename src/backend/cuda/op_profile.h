// Where an eager forward's GPU time goes: an event recorded on the stream before each op; the
// interval from one mark to the next (the last one to the forward's stop event) is the marking
// op's. Summed per op name over forwards until reset(). Events between kernels keep PDL from
// overlapping them, so the profile is of a forward that runs one op after the other.
#pragma once
#include <cuda_runtime.h>

#include <string>
#include <vector>

namespace inferscale {

struct OpTime {
  std::string op;      // e.g. "rms_norm", "linear 6144x4096" (N x K)
  double ms = 0.0;     // summed GPU time
  int64_t calls = 0;
};

class OpProfiler {
 public:
  OpProfiler() = default;
  OpProfiler(const OpProfiler&) = delete;
  OpProfiler& operator=(const OpProfiler&) = delete;
  ~OpProfiler();

  void set_enabled(bool on);  // on: forgets the totals
  bool enabled() const { return enabled_; }
  // The first mark of a forward: forgets marks a forward that threw left behind.
  void start(std::string op, cudaStream_t stream) {
    names_.clear();
    mark(std::move(op), stream);
  }
  void mark(std::string op, cudaStream_t stream);
  // After the stream has passed `stop` (the forward synchronised): adds this forward's intervals.
  void collect(cudaEvent_t stop);
  // Totals in first-seen order.
  const std::vector<OpTime>& totals() const { return totals_; }

 private:
  bool enabled_ = false;
  std::vector<cudaEvent_t> events_;  // reused across forwards
  std::vector<std::string> names_;   // this forward's marks
  std::vector<OpTime> totals_;
};

}  // namespace inferscale
