// Skinny linear layers on tensor cores: M <= kSkinnyMaxRows rows of x (a question after injected
// facts, a decode step of up to 32 sequences), where a GEMM is a stream of the weights and its
// time is their bytes over the HBM rate.
//   y[m, n] (+)= sum_k x[m, k] w[n, k]                      x: [M, K] bf16; w: [N, K] bf16; y: [M, N] f32 | bf16
//   gated:  out[m, i] = silu(x[m] . w[i]) * (x[m] . w[I + i])   w: [2 I, K]; out: [M, I] bf16
//
// mma.m16n8k16 with the weights as A (16 output features x 16 k) and x as B (16 k x 8 rows of x),
// so C is [features, rows of x] and a warp's 16 features take M <= 8 * MT rows in MT n-tiles.
// CTA = 4 warps x 16 features = a tile of 64 features (gated: 32 gate features in warps 0-1 and
// their 32 up features in warps 2-3, so SiLU * up happens in the epilogue) over one K range:
//   sW [kStages][64 features][kBK]   bf16, XOR-swizzled by 16-byte chunk (chunk ^ row % 8)
//   sX [kStages][8 MT rows][kBK]     rows past M zero-filled
// a kStages-deep cp.async pipeline of kBK = 64 k a stage, one barrier a stage; the weight stages of
// the prologue are issued before pdl_wait (weights are never written by a kernel, launch.cuh).
//
// Split-K (grid.y = S > 1, so that the launch fills every SM in one wave): each CTA writes its f32
// partial tile into the workspace in fragment order; the last of a tile's S CTAs (an atomic
// counter) sums the S partials in split order and runs the epilogue, then zeroes the counter for
// the next launch. The sum order depends on N and K only: a row of y is the same bits whatever M
// and whichever CTA finished first (batched == alone holds exactly).
//
// CPU twin: the f32 GEMM (and SiLU * up) the parity tests compute in double (tests/cuda).
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/mma_utils.cuh"

namespace inferscale::cuda {
namespace {

constexpr int kThreads = 128;  // 4 warps
constexpr int kFeat = 64;      // features a CTA (gated: 32 gate + 32 up)
constexpr int kBK = 64;        // k a stage: 8 chunks of 16 bytes a row
constexpr int kStages = 4;     // stage i computed while i + 1 .. i + 3 are in flight
constexpr int kAcc = 16;       // floats of a thread's partial in the workspace (MT <= 4 n-tiles x 4)

static_assert(kSkinnyPartialBytes == static_cast<size_t>(kSkinnyMaxPartials) * kAcc * kThreads * sizeof(float),
              "cuda_ops.h sizes the workspace for this kernel's partials");

template <int MT>
constexpr size_t skinny_smem_bytes() {
  return static_cast<size_t>(kStages) * (kFeat + 8 * MT) * kBK * sizeof(bf16) + 16;  // + the last-CTA flag
}

// Element offset of (row, 16-byte chunk) in a swizzled [rows][kBK] bf16 tile.
__device__ __forceinline__ int swz(int row, int chunk) { return row * kBK + ((chunk ^ (row & 7)) << 3); }

struct SkinnyArgs {
  const bf16* x;
  const bf16* w;
  void* y;
  float* partials;   // [tiles * S][kAcc][kThreads] f32 (S > 1)
  int* counters;     // [tiles], zero between launches (S > 1)
  int64_t M, N, K;   // gated: N = I (out columns), w has 2 I rows
  int32_t splits;
  bool y_f32, accumulate, gated;
};

template <int MT>
__global__ void __launch_bounds__(kThreads, 4) skinny_gemm_kernel(SkinnyArgs a) {
  constexpr int XR = 8 * MT;  // rows of x in a stage
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* sW = reinterpret_cast<bf16*>(smem_raw);
  bf16* sX = sW + kStages * kFeat * kBK;
  int* s_last = reinterpret_cast<int*>(sX + kStages * XR * kBK);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int64_t tile = blockIdx.x;
  const int split = blockIdx.y;
  const int64_t ksteps = a.K / kBK;
  const int64_t step_begin = ksteps * split / a.splits, step_end = ksteps * (split + 1) / a.splits;
  const int n_steps = static_cast<int>(step_end - step_begin);

  // This thread's weight chunks: rows r = (tid + kThreads p) / 8 of the tile, 16-byte column ch.
  constexpr int kWChunks = kFeat * kBK / 8 / kThreads;  // 4
  const int ch = tid % 8, r0 = tid / 8;                 // rows r0 + 16 p
  const bf16* w_src[kWChunks];
  bool w_ok[kWChunks];
#pragma unroll
  for (int p = 0; p < kWChunks; ++p) {
    const int r = r0 + 16 * p;
    int64_t row;
    if (a.gated) {  // tile t: gate rows 32 t .. 32 t + 31, then up rows I + 32 t ..
      const int64_t f = tile * (kFeat / 2) + (r % (kFeat / 2));
      w_ok[p] = f < a.N;
      row = r < kFeat / 2 ? f : a.N + f;
    } else {
      row = tile * kFeat + r;
      w_ok[p] = row < a.N;
    }
    w_src[p] = w_ok[p] ? a.w + row * a.K + step_begin * kBK + ch * 8 : a.w;
  }
  const int w_off = swz(r0, ch);  // + 16 p rows: the swizzle repeats every 8 rows
  auto load_w = [&](int s) {
    bf16* dst = sW + (s % kStages) * kFeat * kBK + w_off;
#pragma unroll
    for (int p = 0; p < kWChunks; ++p)
      cp_async_16(dst + 16 * p * kBK, w_ok[p] ? w_src[p] + static_cast<int64_t>(s) * kBK : a.w, w_ok[p]);
  };
  // x chunks: XR rows x 8 chunks, MT / 2 a thread (rows r0 + 16 p).
  auto load_x = [&](int s) {
    bf16* dst = sX + (s % kStages) * XR * kBK + w_off;
#pragma unroll
    for (int p = 0; p < XR / 16; ++p) {
      const int r = r0 + 16 * p;
      const bool ok = r < a.M;
      cp_async_16(dst + 16 * p * kBK, ok ? a.x + r * a.K + (step_begin + s) * kBK + ch * 8 : a.x, ok);
    }
  };

  // Prologue: weights of stages 0 .. kStages - 2 before the wait, then x. Group 0 holds them all
  // and x of stage 0; group c, x of stage c, so wait<kStages - 2> means "stage i has landed".
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s)
    if (s < n_steps) load_w(s);
  pdl_wait();
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < n_steps) load_x(s);
    cp_async_commit();
  }

  float acc[MT][4];
#pragma unroll
  for (int nt = 0; nt < MT; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;

  for (int i = 0; i < n_steps; ++i) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // stage i visible to all; every warp is done with stage i - 1
    if (i + kStages - 1 < n_steps) {
      load_w(i + kStages - 1);
      load_x(i + kStages - 1);
    }
    cp_async_commit();
    const bf16* w = sW + (i % kStages) * kFeat * kBK;
    const bf16* x = sX + (i % kStages) * XR * kBK;
#pragma unroll
    for (int ks = 0; ks < kBK / 16; ++ks) {
      uint32_t af[4];
      ldmatrix_x4(af, w + swz(warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, ks * 2 + (lane >> 4)));
#pragma unroll
      for (int np = 0; np < MT / 2; ++np) {
        uint32_t b[4];  // b[0], b[1]: n-tile 2 np; b[2], b[3]: n-tile 2 np + 1
        ldmatrix_x4(b, x + swz(np * 16 + (lane & 7) + (lane >> 4) * 8, ks * 2 + ((lane >> 3) & 1)));
        mma_bf16_16816(acc[2 * np], af, b[0], b[1]);
        mma_bf16_16816(acc[2 * np + 1], af, b[2], b[3]);
      }
    }
  }
  cp_async_wait<0>();
  pdl_launch_dependents();  // the weight stream is done; the next kernel may be scheduled

  if (a.splits > 1) {
    float* part = a.partials + (tile * a.splits + split) * kAcc * kThreads + tid;
#pragma unroll
    for (int nt = 0; nt < MT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) __stcg(part + (nt * 4 + e) * kThreads, acc[nt][e]);
    __threadfence();  // this CTA's partial is visible before its count
    __syncthreads();
    if (tid == 0) *s_last = atomicAdd(a.counters + tile, 1) == a.splits - 1;
    __syncthreads();
    if (*s_last == 0) return;  // the whole CTA
    __threadfence();           // the other splits' partials, counted before ours, are visible
    const float* base = a.partials + tile * a.splits * kAcc * kThreads + tid;
#pragma unroll
    for (int nt = 0; nt < MT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float sum = 0.0f;
        for (int s = 0; s < a.splits; ++s) sum += __ldcg(base + (s * kAcc + nt * 4 + e) * kThreads);
        acc[nt][e] = sum;
      }
    if (tid == 0) a.counters[tile] = 0;
  }

  // Epilogue. acc[nt][e]: feature row warp * 16 + g + 8 (e / 2) of the tile, x row nt * 8 + 2 t + e % 2.
  const int g = lane >> 2, t4 = lane & 3;
  if (a.gated) {
    float* sU = reinterpret_cast<float*>(smem_raw);  // [2 warps][MT * 4][32 lanes] the up values
    __syncthreads();  // every warp is done with the pipeline's shared memory
    if (warp >= 2) {
#pragma unroll
      for (int i = 0; i < MT * 4; ++i) sU[((warp - 2) * MT * 4 + i) * 32 + lane] = acc[i / 4][i % 4];
    }
    __syncthreads();
    if (warp >= 2) return;
    bf16* out = static_cast<bf16*>(a.y);
#pragma unroll
    for (int nt = 0; nt < MT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t m = nt * 8 + 2 * t4 + (e & 1);
        const int64_t f = tile * (kFeat / 2) + warp * 16 + g + 8 * (e >> 1);
        if (m >= a.M || f >= a.N) continue;
        const float gv = acc[nt][e], uv = sU[(warp * MT * 4 + nt * 4 + e) * 32 + lane];
        out[m * a.N + f] = __float2bfloat16_rn(gv / (1.0f + __expf(-gv)) * uv);
      }
    return;
  }
#pragma unroll
  for (int nt = 0; nt < MT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t m = nt * 8 + 2 * t4 + (e & 1);
      const int64_t n = tile * kFeat + warp * 16 + g + 8 * (e >> 1);
      if (m >= a.M || n >= a.N) continue;
      if (a.y_f32) {
        float* dst = static_cast<float*>(a.y) + m * a.N + n;
        *dst = a.accumulate ? *dst + acc[nt][e] : acc[nt][e];
      } else {
        static_cast<bf16*>(a.y)[m * a.N + n] = __float2bfloat16_rn(acc[nt][e]);
      }
    }
}

// CTAs of one kernel an SM, and SMs (once a process: the device does not change under it).
template <int MT>
int64_t resident_ctas() {
  static const int64_t n = [] {
    int device = 0, sms = 0, per_sm = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    CUDA_CHECK(cudaFuncSetAttribute(skinny_gemm_kernel<MT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(skinny_smem_bytes<MT>())));
    CUDA_CHECK(cudaFuncSetAttribute(skinny_gemm_kernel<MT>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                    cudaSharedmemCarveoutMaxShared));  // 4 CTAs an SM need ~196 KB at MT = 4
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, skinny_gemm_kernel<MT>, kThreads,
                                                             skinny_smem_bytes<MT>()));
    return static_cast<int64_t>(sms) * std::max(per_sm, 1);
  }();
  return n;
}

int64_t skinny_tiles(int64_t N, bool gated) { return gated ? (N + kFeat / 2 - 1) / (kFeat / 2) : (N + kFeat - 1) / kFeat; }

}  // namespace

bool skinny_gemm_supports(int64_t M, int64_t K, const void* x, const void* w) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return M >= 1 && M <= kSkinnyMaxRows && K >= kBK && K % kBK == 0 && aligned(x) && aligned(w);
}

// The split count that fills the resident CTAs best (tiles x S over whole waves), at most
// kSkinnyMaxSplits, at least two k-stages a split, and within the workspace; the smaller on ties.
int32_t skinny_splits(int64_t M, int64_t N, int64_t K, bool gated) {
  const int64_t cap = M <= 16 ? resident_ctas<2>() : resident_ctas<4>();
  const int64_t tiles = skinny_tiles(N, gated), ksteps = K / kBK;
  int32_t best = 1;
  double best_fill = 0.0;
  for (int32_t s = 1; s <= kSkinnyMaxSplits && s <= ksteps / 2; ++s) {
    if (s > 1 && tiles * s > kSkinnyMaxPartials) break;
    const int64_t ctas = tiles * s, waves = (ctas + cap - 1) / cap;
    const double fill = static_cast<double>(ctas) / static_cast<double>(waves * cap);
    if (fill > best_fill + 1e-9) {
      best_fill = fill;
      best = s;
    }
  }
  return best;
}

void skinny_gemm(const bf16* x, const bf16* w, void* y, bool y_f32, bool accumulate, bool gated, int64_t M, int64_t N,
                 int64_t K, const SkinnyWorkspace& ws, int32_t splits, cudaStream_t stream) {
  KERNEL_REQUIRE(skinny_gemm_supports(M, K, x, w), "skinny_gemm: M in [1, kSkinnyMaxRows], K a multiple of 64, 16-byte aligned operands");
  KERNEL_REQUIRE(y_f32 || !accumulate, "skinny_gemm: accumulate into f32 outputs only");
  KERNEL_REQUIRE(!gated || (!y_f32 && !accumulate), "skinny_gemm: the gated form writes bf16");
  if (N == 0) return;
  if (splits <= 0) splits = skinny_splits(M, N, K, gated);
  const int64_t tiles = skinny_tiles(N, gated);
  KERNEL_REQUIRE(splits >= 1 && splits <= kSkinnyMaxSplits && splits <= K / kBK, "skinny_gemm: splits out of range");
  KERNEL_REQUIRE(splits == 1 || (tiles * splits <= kSkinnyMaxPartials && ws.partials != nullptr && ws.counters != nullptr),
                 "skinny_gemm: split-K needs the workspace (tiles x splits <= kSkinnyMaxPartials)");
  KERNEL_REQUIRE(tiles <= 0x7fffffff, "skinny_gemm: too many columns");
  SkinnyArgs a{x, w, y, ws.partials, ws.counters, M, N, K, splits, y_f32, accumulate, gated};
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(splits));
  if (M <= 16) {
    resident_ctas<2>();  // sets the shared-memory attribute once
    launch(skinny_gemm_kernel<2>, grid, dim3(kThreads), skinny_smem_bytes<2>(), stream, a);
  } else {
    resident_ctas<4>();
    launch(skinny_gemm_kernel<4>, grid, dim3(kThreads), skinny_smem_bytes<4>(), stream, a);
  }
}

}  // namespace inferscale::cuda
