// wgmma_blockwise.cu -- fp8lab's own Hopper blockwise-scaled FP8 GEMM (issue 22, target 2: the
// persistent, warp-specialised TMA + wgmma kernel with the per-128-K promotion hidden under the MMAs).
//
//   C[M, N] (bf16) = sum over 128-wide K blocks kb of  a_scale[m, kb] * b_scale[n / 128, kb] * sum_k a[m, k] b[n, k]
//
// Operands as cutlass_blockwise_sm90 takes them: a (M, K) e4m3 row-major, b (N, K) e4m3 row-major
// (K-major, nn.Linear.weight), sfa the per-token scales M-major, a (K/128, sfa_ld) fp32 buffer with
// sfa_ld >= M a multiple of 4 (a TMA stride is a multiple of 16 bytes), sfb (ceil(N/128), K/128) fp32
// row-major, out (M, N) bf16 row-major. K % 128 == 0, N % 8 == 0, M >= 1.
//
// One CTA per SM (persistent), 384 threads = three warpgroups:
//   * warpgroup 0, the producer (setmaxnreg 40): one thread walks the CTA's tiles and, per 128-wide
//     K block, waits for a free stage (its `empty` barrier), then issues three TMA loads into it: the
//     A tile (128 x 128 bytes), the B tile (BN x 128 bytes), both with the 128-byte swizzle wgmma
//     reads, and the tile's 128 per-token scales (512 bytes), all completing on the stage's `full`
//     barrier (expect_tx: the three boxes' bytes; rows past M or N arrive as zeros).
//   * warpgroups 1 and 2, the consumers (setmaxnreg 232): each owns 64 rows of the 128-row tile. Per K
//     block: wait for `full`, issue four wgmma.m64nBNk32 (e4m3 x e4m3 -> f32) into a fresh temporary
//     accumulator, commit. The promotion (main += temp x a_scale[row] x b_scale) of a block needs
//     its MMAs done. kOverlap = false waits for them at once (wgmma.wait_group 0: the tensor cores
//     idle while the warpgroup scales 64 values per thread), the order of CUTLASS's collective and
//     DeepGEMM. kOverlap = true keeps two temporaries and promotes block kb - 1 while block kb's MMAs
//     run (wait_group 1), so the tensor cores always have a block queued: 3 x 64 fp32 accumulators per
//     thread (main + two temporaries), within setmaxnreg's 232. After a block's scales are read (and a
//     proxy fence orders those reads before the TMA that refills the stage), one lane per warp
//     arrives on the stage's `empty` barrier (8 consumer warps: count 8).
//   * the epilogue: each consumer thread converts its 64 main accumulators to bf16 and stores them
//     as bf16 pairs straight to global memory (rows < M and columns < N only), then starts its next
//     tile; the producer is already filling the stages for it.
//
// Tiles: BM = 128 rows of M, BN columns of N (BN = 128: one weight scale per tile and K block),
// ordered in groups of `group_m` tile rows (the CTAs running at once share B tiles in L2). Stages:
// as many stages as fit the shared memory (stages_for<BN>: 6 x 32.5 KB at BN = 128, 7 x 30.5 KB at
// BN = 112). BN = 112 tiles may straddle two weight scale blocks: the columns from n8 group jb on
// take the second block's scale (one select per n8 group and promotion).
//
// No CUTLASS / CuTe: the mbarrier and TMA PTX (mbarrier init / arrive / arrive.expect_tx /
// try_wait.parity, cp.async.bulk.tensor.2d) is common/ptx.cuh's; the wgmma PTX (fence / mma_async /
// commit_group / wait_group, the shared-memory descriptors) and setmaxnreg are written here.
// The tensor maps are encoded on the host with the driver's cuTensorMapEncodeTiled, reached through
// cudaGetDriverEntryPointByVersion (no link against libcuda).
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "common/ptx.cuh"
#include "wgmma_blockwise.h"

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ != 900 || !defined(__CUDA_ARCH_FEAT_SM90_ALL))
#error "wgmma_blockwise.cu needs sm_90a (wgmma, setmaxnreg): compile with -gencode arch=compute_90a,code=sm_90a"
#endif

namespace fp8lab {
namespace wgbw {

constexpr int BM = 128, BK = 128, kThreads = 384;
constexpr int kProducerRegs = 40, kConsumerRegs = 232;
constexpr int kConsumerWarps = 8;
// try_waits before a stuck pipeline traps (ptx::mbar_wait_or_trap): seconds, far above any real wait
constexpr uint32_t kSpinLimit = 1u << 24;

template <int BN, int STAGES>
struct alignas(1024) Smem {
  uint8_t a[STAGES][BM * BK];   // 1024-byte aligned tiles: the 128-byte swizzle repeats every 8 rows
  uint8_t b[STAGES][BN * BK];
  float sa[STAGES][BM];
  uint64_t full[STAGES];
  uint64_t empty[STAGES];
};

// ------------------------------------------------------------------------------------------- PTX
// mbarrier and TMA helpers: common/ptx.cuh; the wgmma ones (this kernel's alone) below.
using ptx::smem_u32;

// wgmma shared-memory matrix descriptor of a K-major tile with the 128-byte swizzle: start address
// (bits 0-13, in 16-byte units), stride between 8-row core-matrix groups 1024 bytes (bits 32-45),
// layout 128B (bits 62-63 = 1); the leading offset is unused for swizzled K-major tiles.
__device__ __forceinline__ uint64_t smem_desc(const void* p) {
  const uint64_t addr = (smem_u32(p) & 0x3FFFFu) >> 4;
  return addr | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Tells the compiler the accumulators change here: no read of them moves above an earlier wait, no
// write below a later MMA (the wgmma writes them asynchronously, behind the compiler's back).
template <int R>
__device__ __forceinline__ void fence_acc(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// d (+)= A (64 x 32, e4m3, smem) x B (128 x 32, e4m3, smem)^T; accumulate = false overwrites d.
__device__ __forceinline__ void wgmma_m64n128k32(float (&d)[64], uint64_t da, uint64_t db, bool accumulate) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, %64, %65, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(da), "l"(db), "r"(static_cast<uint32_t>(accumulate)));
}

// d (+)= A (64 x 32, e4m3, smem) x B (112 x 32, e4m3, smem)^T; accumulate = false overwrites d.
__device__ __forceinline__ void wgmma_m64n112k32(float (&d)[56], uint64_t da, uint64_t db, bool accumulate) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %58, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n112k32.f32.e4m3.e4m3 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55"
      "}, %56, %57, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55])
      : "l"(da), "l"(db), "r"(static_cast<uint32_t>(accumulate)));
}

// The tile's four k32 MMAs of one K block go through this: BN = 128 or 112 (m64nBNk32).
template <int BN>
__device__ __forceinline__ void wgmma_k32(float (&d)[BN / 2], uint64_t da, uint64_t db, bool accumulate) {
  if constexpr (BN == 128) {
    wgmma_m64n128k32(d, da, db, accumulate);
  } else {
    static_assert(BN == 112, "tile widths: 128, 112");
    wgmma_m64n112k32(d, da, db, accumulate);
  }
}

template <int R>
__device__ __forceinline__ void regs_dealloc() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R));
}
template <int R>
__device__ __forceinline__ void regs_alloc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R));
}

// Tile t of the CTA's walk -> (tile row, tile column): groups of group_m tile rows, column-major
// inside a group, so the CTAs that run at once read few B tiles.
__device__ __forceinline__ void tile_coords(int t, int tiles_m, int tiles_n, int group_m, int& tm, int& tn) {
  const int per_group = group_m * tiles_n;
  const int g = t / per_group, first = g * group_m;
  const int rows = min(tiles_m - first, group_m);
  const int r = t - g * per_group;
  tm = first + r % rows;
  tn = r / rows;
}

// ----------------------------------------------------------------------------------------- kernel
template <int BN, int STAGES, bool kOverlap>
__global__ void __launch_bounds__(kThreads, 1)
    wgmma_blockwise_kernel(const __grid_constant__ CUtensorMap tma_a, const __grid_constant__ CUtensorMap tma_b,
                           const __grid_constant__ CUtensorMap tma_sa, const float* __restrict__ sfb,
                           __nv_bfloat16* __restrict__ out, int M, int N, int K, int group_m) {
  static_assert(BN == 128 || BN == 112, "tile widths: 128 (one weight scale per tile and K block), 112");
  constexpr int R = BN / 2;   // accumulators per thread (m64nBN over a warpgroup)
  constexpr int NJ = BN / 8;  // n8 column groups per thread
  extern __shared__ uint8_t smem_raw[];
  using S = Smem<BN, STAGES>;
  S& s = *reinterpret_cast<S*>(smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023));

  const int wg = threadIdx.x / 128, lane = threadIdx.x & 31, warp_wg = (threadIdx.x / 32) & 3;
  const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN, kblocks = K / BK;
  const int tiles = tiles_m * tiles_n;

  if (threadIdx.x == 0) {
#pragma unroll
    for (int i = 0; i < STAGES; ++i) {
      ptx::mbar_init(smem_u32(&s.full[i]), 1);
      ptx::mbar_init(smem_u32(&s.empty[i]), kConsumerWarps);
    }
    ptx::mbar_init_fence();
  }
  __syncthreads();

  if (wg == 0) {  // ------------------------------------------------------------------ producer
    regs_dealloc<kProducerRegs>();
    if (threadIdx.x == 0) {
      ptx::tma_prefetch_map(&tma_a);
      ptx::tma_prefetch_map(&tma_b);
      ptx::tma_prefetch_map(&tma_sa);
      constexpr uint32_t kBytes = BM * BK + BN * BK + BM * sizeof(float);
      uint32_t it = 0;
      for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        int tm, tn;
        tile_coords(t, tiles_m, tiles_n, group_m, tm, tn);
#pragma unroll 1
        for (int kb = 0; kb < kblocks; ++kb, ++it) {
          const int st = it % STAGES;
          ptx::mbar_wait_or_trap(smem_u32(&s.empty[st]), ((it / STAGES) & 1) ^ 1, kSpinLimit);
          const uint32_t full = smem_u32(&s.full[st]);
          ptx::mbar_arrive_expect_tx(full, kBytes);
          ptx::tma_load_2d(smem_u32(s.a[st]), &tma_a, full, kb * BK, tm * BM);
          ptx::tma_load_2d(smem_u32(s.b[st]), &tma_b, full, kb * BK, tn * BN);
          ptx::tma_load_2d(smem_u32(s.sa[st]), &tma_sa, full, tm * BM, kb);
        }
      }
    }
    return;
  }

  // ------------------------------------------------------------------------------ consumers
  regs_alloc<kConsumerRegs>();
  const int cw = wg - 1;                                  // 64-row half of the tile
  const int row_in_tile = cw * 64 + warp_wg * 16 + (lane >> 2);   // rows of d[4j], d[4j+1]; +8: d[4j+2], d[4j+3]
  const int col_in_tile = 2 * (lane & 3);                 // + 8 j
  uint32_t it = 0;
  for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
    int tm, tn;
    tile_coords(t, tiles_m, tiles_n, group_m, tm, tn);
    // The weight scale blocks the tile's columns lie in: block nb0 from column 0, nb0 + 1 from n8
    // group jb on (BN = 128: jb = NJ, one block; BN = 112 crosses a 128-column boundary at a
    // multiple of 16 columns, or not at all).
    const int n0 = tn * BN, nb0 = n0 / 128;
    const int jb = BN == 128 ? NJ : min(NJ, (128 - n0 % 128) / 8);
    const int nblocks = (N + 127) / 128;
    const float* sb_row = sfb + static_cast<size_t>(nb0) * kblocks;
    const float* sb_row1 = sfb + static_cast<size_t>(jb < NJ && nb0 + 1 < nblocks ? nb0 + 1 : nb0) * kblocks;
    float acc[R], t0[R], t1[R];
#pragma unroll
    for (int i = 0; i < R; ++i) acc[i] = 0.f;

    // the MMAs of K block kb (stage of walk index i) into tmp; returns the block's weight scales
    // (for columns before jb, from jb on)
    auto issue = [&](float (&tmp)[R], uint32_t i, int kb) -> float2 {
      const int st = i % STAGES;
      const float2 sbv = make_float2(__ldg(sb_row + kb), BN == 128 ? 0.f : __ldg(sb_row1 + kb));
      ptx::mbar_wait_or_trap(smem_u32(&s.full[st]), (i / STAGES) & 1, kSpinLimit);
      wgmma_fence();
      fence_acc(tmp);
      const uint8_t* a = s.a[st] + cw * 64 * BK;
#pragma unroll
      for (int k = 0; k < BK / 32; ++k) wgmma_k32<BN>(tmp, smem_desc(a + 32 * k), smem_desc(s.b[st] + 32 * k), k > 0);
      wgmma_commit();
      fence_acc(tmp);
      return sbv;
    };
    // main += tmp x a_scale x b_scale for the block at walk index i (its MMAs complete), then free its stage
    auto promote = [&](float (&tmp)[R], uint32_t i, float2 sbv) {
      const int st = i % STAGES;
      fence_acc(tmp);
      const float sa_lo = s.sa[st][row_in_tile], sa_hi = s.sa[st][row_in_tile + 8];
      const float lo0 = sa_lo * sbv.x, hi0 = sa_hi * sbv.x;
      const float lo1 = BN == 128 ? lo0 : sa_lo * sbv.y, hi1 = BN == 128 ? hi0 : sa_hi * sbv.y;
      ptx::fence_proxy_async_smem();   // these generic reads of the stage before the next TMA write to it
      __syncwarp();
      if (lane == 0) ptx::mbar_arrive(smem_u32(&s.empty[st]));
#pragma unroll
      for (int j = 0; j < NJ; ++j) {
        const bool first = BN == 128 || j < jb;
        const float lo = first ? lo0 : lo1, hi = first ? hi0 : hi1;
        acc[4 * j + 0] = fmaf(tmp[4 * j + 0], lo, acc[4 * j + 0]);
        acc[4 * j + 1] = fmaf(tmp[4 * j + 1], lo, acc[4 * j + 1]);
        acc[4 * j + 2] = fmaf(tmp[4 * j + 2], hi, acc[4 * j + 2]);
        acc[4 * j + 3] = fmaf(tmp[4 * j + 3], hi, acc[4 * j + 3]);
      }
    };

    if constexpr (kOverlap) {
      float2 s0 = issue(t0, it, 0), s1 = make_float2(0.f, 0.f);
      int kb = 1;
      for (; kb + 1 < kblocks; kb += 2) {
        s1 = issue(t1, it + kb, kb);
        wgmma_wait<1>();
        promote(t0, it + kb - 1, s0);
        s0 = issue(t0, it + kb + 1, kb + 1);
        wgmma_wait<1>();
        promote(t1, it + kb, s1);
      }
      if (kb < kblocks) {   // an even number of blocks: the last one goes to t1
        s1 = issue(t1, it + kb, kb);
        wgmma_wait<1>();
        promote(t0, it + kb - 1, s0);
        wgmma_wait<0>();
        promote(t1, it + kb, s1);
      } else {
        wgmma_wait<0>();
        promote(t0, it + kb - 1, s0);
      }
    } else {
      for (int kb = 0; kb < kblocks; ++kb) {
        const float2 s0 = issue(t0, it + kb, kb);
        wgmma_wait<0>();
        promote(t0, it + kb, s0);
      }
    }
    it += kblocks;

    // epilogue: bf16 pairs straight to global memory
    const int row = tm * BM + row_in_tile;
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      const int col = tn * BN + 8 * j + col_in_tile;
      if (col < N) {
        if (row < M)
          *reinterpret_cast<__nv_bfloat162*>(out + static_cast<size_t>(row) * N + col) =
              __floats2bfloat162_rn(acc[4 * j + 0], acc[4 * j + 1]);
        if (row + 8 < M)
          *reinterpret_cast<__nv_bfloat162*>(out + static_cast<size_t>(row + 8) * N + col) =
              __floats2bfloat162_rn(acc[4 * j + 2], acc[4 * j + 3]);
      }
    }
  }
}

// ------------------------------------------------------------------------------------------- host
template <int BN, int STAGES>
constexpr int smem_bytes() {
  return static_cast<int>(sizeof(Smem<BN, STAGES>)) + 1024;   // + the alignment slack
}

namespace {

thread_local cudaError_t g_last_error = cudaSuccess;

PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  if (!fn) {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
      fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }
  return fn;
}

// A 2-D tensor map: inner extent d0 (contiguous), outer d1 with row pitch `pitch` bytes, box b0 x b1.
Status encode(CUtensorMap* map, CUtensorMapDataType type, const void* base, uint64_t d0, uint64_t d1,
              uint64_t pitch, uint32_t b0, uint32_t b1, CUtensorMapSwizzle swizzle) {
  auto fn = encoder();
  if (!fn) return Status::kNoDriverEntryPoint;
  const cuuint64_t dims[2] = {d0, d1};
  const cuuint64_t strides[1] = {pitch};
  const cuuint32_t box[2] = {b0, b1};
  const cuuint32_t elem[2] = {1, 1};
  const CUresult r = fn(map, type, 2, const_cast<void*>(base), dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                        swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? Status::kOk : Status::kTensorMapRefused;
}

template <int BN, int STAGES, bool kOverlap>
Status launch_one(const Problem& p, int sms, cudaStream_t stream) {
  CUtensorMap ma, mb, msa;
  Status st;
  if ((st = encode(&ma, CU_TENSOR_MAP_DATA_TYPE_UINT8, p.a, p.K, p.M, p.K, BK, BM, CU_TENSOR_MAP_SWIZZLE_128B)) !=
      Status::kOk)
    return st;
  if ((st = encode(&mb, CU_TENSOR_MAP_DATA_TYPE_UINT8, p.b, p.K, p.N, p.K, BK, BN, CU_TENSOR_MAP_SWIZZLE_128B)) !=
      Status::kOk)
    return st;
  if ((st = encode(&msa, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, p.sfa, p.sfa_ld, p.K / BK, p.sfa_ld * sizeof(float), BM, 1,
                   CU_TENSOR_MAP_SWIZZLE_NONE)) != Status::kOk)
    return st;
  auto kernel = wgmma_blockwise_kernel<BN, STAGES, kOverlap>;
  constexpr int bytes = smem_bytes<BN, STAGES>();
  static const cudaError_t attr = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (attr != cudaSuccess) {
    g_last_error = attr;
    return Status::kLaunchFailed;
  }
  const int tiles = ((p.M + BM - 1) / BM) * ((p.N + BN - 1) / BN);
  const int grid = tiles < sms ? tiles : sms;
  kernel<<<grid, kThreads, bytes, stream>>>(ma, mb, msa, p.sfb, reinterpret_cast<__nv_bfloat16*>(p.out), p.M, p.N,
                                           p.K, p.group_m);
  g_last_error = cudaGetLastError();
  return g_last_error == cudaSuccess ? Status::kOk : Status::kLaunchFailed;
}

}  // namespace

Status check(const Problem& p) {
  if (p.M < 1 || p.N < 1 || p.K < 1) return Status::kBadShape;
  if (p.K % BK) return Status::kBadK;
  if (p.N % 8) return Status::kBadN;
  if (p.sfa_ld < p.M || p.sfa_ld % 4) return Status::kBadSfaLd;
  if (p.group_m < 1) return Status::kBadGroup;
  auto misaligned = [](const void* q, uintptr_t a) { return reinterpret_cast<uintptr_t>(q) % a != 0; };
  if (misaligned(p.a, 16) || misaligned(p.b, 16) || misaligned(p.sfa, 16) || misaligned(p.out, 4) ||
      misaligned(p.sfb, 4))
    return Status::kMisaligned;
  return Status::kOk;
}

Status launch(const Problem& p, Variant v, int sms, cudaStream_t stream) {
  const Status st = check(p);
  if (st != Status::kOk) return st;
  if (v != Variant::kWait && v != Variant::kOverlap) return Status::kBadVariant;
  const bool overlap = v == Variant::kOverlap;
  switch (p.tile_n) {
    case 128: return overlap ? launch_one<128, stages_for<128>(), true>(p, sms, stream)
                             : launch_one<128, stages_for<128>(), false>(p, sms, stream);
    case 112: return overlap ? launch_one<112, stages_for<112>(), true>(p, sms, stream)
                             : launch_one<112, stages_for<112>(), false>(p, sms, stream);
  }
  return Status::kBadTileN;
}

int shared_memory_bytes(int tile_n) {
  return tile_n == 128 ? smem_bytes<128, stages_for<128>()>() : tile_n == 112 ? smem_bytes<112, stages_for<112>()>() : -1;
}

cudaError_t last_launch_error() { return g_last_error; }

}  // namespace wgbw
}  // namespace fp8lab
