// One GPU's place in a tensor-parallel group: an NCCL communicator (one process per GPU) and the
// all-reduce of the forward's row-parallel sums (CudaForwardOps::all_reduce).
//
// libnccl is opened at run time (dlopen "libnccl.so.2": the CUDA toolkit's, or the one a PyTorch
// install ships), so that binaries run where it is absent and only --tensor-parallel-size N > 1
// needs it; its absence is then a kUnsupported error naming the library.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

namespace inferscale {

class NcclComm {
 public:
  // The group's id, made by rank 0 and handed to every rank (128 bytes).
  static std::vector<char> unique_id();
  // Joins the group of `ranks` as `rank` on the current CUDA device (every rank calls this at
  // once: it returns when all have).
  NcclComm(const std::vector<char>& id, int32_t ranks, int32_t rank);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int32_t rank() const { return rank_; }
  int32_t ranks() const { return ranks_; }
  // data[0 .. n) := the sum over the ranks, in place, queued on `stream`.
  void sum(float* data, int64_t n, cudaStream_t stream);
  // Ends the group now: collectives pending on any rank fail instead of waiting.
  void abort();

 private:
  void* comm_ = nullptr;
  int32_t ranks_, rank_;
};

}  // namespace inferscale
