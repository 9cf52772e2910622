// The dense retrieval index kept on the GPU: the VectorIndex of a user whose model runs on the
// CUDA backend (serve/chat --device cuda).
//
//   host_:    CpuVectorIndex, the source of truth: ids, id -> row, validation, f32 rows
//   matrix_:  device [capacity, dim] f32, row r == host_ row r once synced
//   dirty:    rows [dirty_lo_, dirty_hi_) changed on the host since the last upload
//
// Writes change the host rows and widen the dirty range; a search uploads the dirty rows, scores
// every row against the query and selects the top k on the device (cuda::similarity_topk, the
// kernel with the CPU twin and parity test), then maps rows to ids. The kernel breaks score ties
// by row, the contract by id: the k results are re-sorted by (score desc, id asc); a tie exactly
// at the k-th place may keep a different fact than the CPU index would. k above the kernel's
// limit (1024) with more rows than k is served by the host index, and so is an index smaller than
// `min_device_elements` (rows x dim): there a launch and a synchronization (~50 us) cost more than
// OpenBLAS's sgemv (bench_cuda_kernels (e): break-even near 4M elements on an H200 host).
#pragma once
#include <cstdint>
#include <memory>

#include "memory/retrieval/vector_index.h"

namespace inferscale {

// An index on the current CUDA device, with its own stream. Thread-safe searches (one at a time
// on the device); writes need the caller's exclusive lock, as for every VectorIndex.
inline constexpr int64_t kDefaultMinDeviceElements = 4'000'000;
std::unique_ptr<VectorIndex> make_cuda_vector_index(int32_t dim, int64_t min_device_elements = kDefaultMinDeviceElements);

}  // namespace inferscale
