// cuda::l2_prefetch (cuda_ops.h): bulk L2 prefetches of 32 KB pieces, one per thread, from a few
// small blocks so that they fit beside whatever the stream it overlaps is running; or one
// prefetch.global.L2 per 128-byte line.
#include <algorithm>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"

namespace inferscale::cuda {
namespace {

constexpr int64_t kPiece = 32 << 10;  // bytes a bulk prefetch instruction asks for
constexpr int kThreads = 32;
constexpr int kMaxBlocks = 32;

template <bool EvictLast>
__global__ void __launch_bounds__(kThreads) l2_prefetch_bulk_kernel(const char* p, int64_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint64_t policy = 0;
  if constexpr (EvictLast) asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads * kPiece;
  for (int64_t off = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * kPiece; off < bytes; off += stride) {
    const uint32_t n = static_cast<uint32_t>(bytes - off < kPiece ? bytes - off : kPiece);
    if constexpr (EvictLast) {
      asm volatile("cp.async.bulk.prefetch.L2.global.L2::cache_hint [%0], %1, %2;" ::"l"(p + off), "r"(n), "l"(policy)
                   : "memory");
    } else {
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + off), "r"(n) : "memory");
    }
  }
#endif
}

__global__ void __launch_bounds__(256) l2_prefetch_lines_kernel(const char* p, int64_t bytes) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * 128;
  for (int64_t off = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 128; off < bytes; off += stride)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p + off) : "memory");
}

}  // namespace

void l2_prefetch(const void* p, int64_t bytes, cudaStream_t stream, L2PrefetchMethod method) {
  // The bulk instruction takes 16-byte aligned addresses and sizes: what lies outside is skipped.
  const uintptr_t a = reinterpret_cast<uintptr_t>(p), start = (a + 15) & ~uintptr_t{15};
  bytes = (bytes - static_cast<int64_t>(start - a)) & ~int64_t{15};
  if (bytes <= 0) return;
  const char* q = reinterpret_cast<const char*>(start);
  if (method == L2PrefetchMethod::kLines) {
    l2_prefetch_lines_kernel<<<kMaxBlocks, 256, 0, stream>>>(q, bytes);
    CUDA_CHECK_LAUNCH("l2_prefetch_lines_kernel");
    return;
  }
  const int64_t pieces = (bytes + kPiece - 1) / kPiece;
  const int blocks = static_cast<int>(std::min<int64_t>(kMaxBlocks, (pieces + kThreads - 1) / kThreads));
  if (method == L2PrefetchMethod::kBulkEvictLast) {
    l2_prefetch_bulk_kernel<true><<<blocks, kThreads, 0, stream>>>(q, bytes);
  } else {
    l2_prefetch_bulk_kernel<false><<<blocks, kThreads, 0, stream>>>(q, bytes);
  }
  CUDA_CHECK_LAUNCH("l2_prefetch_bulk_kernel");
}

}  // namespace inferscale::cuda
