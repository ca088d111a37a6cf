// wmma_w8a16.cu -- seed 001's tensor-core W8A16 GEMM (fp8_matmul_wmma), claims B3, B8, B9.
//
//   C[m, n] = sum over 128-wide K blocks kb of  w_scale[n / 128][kb] * sum_{k in kb} A[m, k] * W[n, k]
//
// A: bf16 activations (M, K). W: e4m3 weights (N, K) with one fp32 scale per 128 x 128 block.
// Weights stay FP8 in global memory and are converted *exactly* to bf16 on their way into shared
// memory (every e4m3 value is a bf16 value); nvcuda::wmma bf16 MMAs accumulate one 128-wide K
// block into a fresh fp32 fragment, which is then promoted into the running accumulator with
// that block's single weight scale (BK == 128 and BN divides 128, so one K tile of one CTA sees
// exactly one scale): DeepGEMM's structure, as the seed describes it.
//
// Pipeline: two shared-memory stages. The A tile of the next K block goes in with cp.async; the
// W tile of the next K block is loaded into registers (16 B per load) while the current block is
// multiplied, then converted and stored into the other stage. One __syncthreads per K block.
//
// Shared-memory pad (claim B9). A and W tiles are stored with a row stride of 128 + PAD bf16.
// wmma's 16-bit loads require the leading dimension to be a multiple of 8 elements = 16 bytes
// (CUDA C++ Programming Guide, "Warp Matrix Functions", load_matrix_sync: "ldm ... must be a
// multiple of 8 for __half element type"); on sm_80+ the load becomes ldmatrix (LDSM), which reads
// eight 16-byte rows and needs each row address 16-byte aligned. So PAD must be a multiple of 8:
// +8 gives 272 B = 17 x 16 B rows (and staggers the rows by 4 banks, so LDSM is conflict-free),
// +0 is legal but puts all 8 rows of an LDSM in the same banks, +1 gives 258 B and misaligns every
// odd row. Config<..., PAD, kForcePad = false> refuses such a PAD at compile time; kForcePad = true
// builds it anyway (with 2-byte shared stores, so that the ldm rule is the only rule it breaks)
// for the GPU experiment that shows what it computes. Never use it for anything else.
//
// nvcc compiles this file alone (no torch), e.g.
//   nvcc -cubin -arch=sm_90a -O3 -Xptxas -v fp8lab/kernels/wmma_w8a16.cu -o wmma.cubin
// Pad check mode (one kernel, 64x64 tile, bf16 out): -DFP8LAB_WMMA_PAD_CHECK=<pad> refuses a pad
// that is not a multiple of 8 with the static_assert below; add -DFP8LAB_WMMA_FORCE_PAD to build it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <mma.h>
#include <stdint.h>

#include "common/ptx.cuh"
#include "common/tile.cuh"

namespace fp8lab {
namespace wmma_w8a16 {

using namespace nvcuda;
using bf16 = __nv_bfloat16;

constexpr int BK = 128;        // K per stage == the scale block along K
constexpr int kGroupM = 8;     // tile rows launched together (swizzle) so W tiles are reused from L2

// Kernel arguments. Shapes and layouts are checked by the Python wrapper (fp8lab/kernels/seed001.py).
struct Params {
  const bf16* a;          // (M, K) bf16, row-major, 16-byte aligned
  const uint8_t* w;       // (N, K) e4m3 codes, row-major (K contiguous), 16-byte aligned
  const float* w_scale;   // (ceil(N/128), K/128) fp32, row-major
  void* c;                // (M, N) bf16 or fp32, row-major: written when there is one K split
  float* partial;         // (splits, M, N) fp32 workspace: written when there are several K splits
  int M, N, K;
  int kb_per_split;       // K blocks per split; splits = gridDim.y = ceil(K/128 / kb_per_split)
};

// STAGES_ = 0: the original kernel (two stages, W loads guarded by `more`). STAGES_ >= 2: the
// pipelined kernel (wmma_w8a16_pipelined_kernel below) with that many shared-memory stages.
// SCHED_ = 1: the interleaved kernel (wmma_w8a16_il_kernel below), STAGES_ in 3..4.
template <int BM_, int BN_, int WM_, int WN_, int PAD_, bool kForcePad_ = false, int STAGES_ = 0, int SCHED_ = 0>
struct Config {
  static constexpr int BM = BM_, BN = BN_, WM = WM_, WN = WN_, PAD = PAD_;
  static constexpr bool kForcePad = kForcePad_;
  static constexpr int SCHED = SCHED_;                   // 1: interleaved kernel
  static constexpr int PIPE = SCHED_ ? 0 : STAGES_;      // 0: original kernel (or the interleaved one)
  static constexpr int STAGES = STAGES_ == 0 ? 2 : STAGES_;
  static constexpr int LDS = BK + PAD;                   // smem row stride of A and W tiles (bf16)
  static constexpr int WARPS_M = BM / WM, WARPS_N = BN / WN;
  static constexpr int THREADS = 32 * WARPS_M * WARPS_N;
  static constexpr int FM = WM / 16, FN = WN / 16;       // 16x16 fragments per warp tile
  static constexpr int LDC = BN + 4;                     // epilogue staging stride (floats): ldm % 4 == 0
  static constexpr bool kWideSmem = PAD % 8 == 0;        // rows 16-byte aligned: cp.async / 16 B stores
  static constexpr int A_STAGE = BM * LDS, W_STAGE = BN * LDS;  // bf16 elements per stage
  static constexpr int A_CHUNKS = BM * (BK / 8) / THREADS;      // 16-byte pieces of A per thread
  static constexpr int W_CHUNKS = BN * (BK / 16) / THREADS;     // 16-byte pieces of W per thread
  static constexpr size_t SMEM_MAIN = size_t(STAGES) * (A_STAGE + W_STAGE) * sizeof(bf16);
  static constexpr size_t SMEM_EPI = size_t(BM) * LDC * sizeof(float);
  static constexpr size_t SMEM = SMEM_MAIN > SMEM_EPI ? SMEM_MAIN : SMEM_EPI;

  static_assert(kForcePad || PAD % 8 == 0,
                "wmma::load_matrix_sync needs a leading dimension that is a multiple of 8 bf16 "
                "(16 bytes); the tile row is 128 + PAD bf16, so PAD must be a multiple of 8 "
                "(+8: 272 B = 17 x 16 B is valid; +1: 258 B is not)");
  static_assert(PAD >= 0, "PAD must be >= 0");
  static_assert(BM % WM == 0 && BN % WN == 0, "the warp tile must divide the CTA tile");
  static_assert(WM % 16 == 0 && WN % 16 == 0, "warp tiles are made of 16x16 wmma fragments");
  static_assert(BK % BN == 0, "BN must divide 128 so that one CTA tile sees one weight scale per K block");
  static_assert(STAGES_ == 0 || (STAGES_ >= 2 && STAGES_ <= 4), "the pipelined kernel has 2 to 4 stages");
  static_assert(SCHED_ == 0 || SCHED_ == 1, "SCHED is 0 (original / pipelined) or 1 (interleaved)");
  static_assert(SCHED_ == 0 || (STAGES_ >= 3 && STAGES_ <= 4),
                "the interleaved kernel prefetches the next block's fragments before the barrier: 3 or 4 stages");
  static_assert(SCHED_ == 0 || (WARPS_M * WARPS_N) % 2 == 0,
                "the interleaved W store mapping needs an even warp count (chunk i + 1 = chunk i + 32 * THREADS/32 rows)");
  static_assert(SCHED_ == 0 || W_CHUNKS <= BK / 16, "the interleaved kernel stores one W chunk per k-step at most");
  static_assert(STAGES_ == 0 || (PAD % 8 == 0 && !kForcePad_),
                "the pipelined kernel fills A with cp.async: 16-byte aligned rows (PAD % 8 == 0) only");
  static_assert((BM * (BK / 8)) % THREADS == 0 && (BN * (BK / 16)) % THREADS == 0,
                "tile loads must split evenly over the threads");
};

__host__ __device__ constexpr int cdiv(int a, int b) { return (a + b - 1) / b; }

// 2 e4m3 codes -> 2 bf16, exact: e4m3 -> f16 (hardware cvt on sm_89+) -> f32 -> bf16 (RN of a
// value bf16 holds exactly). Byte 0 (the lower address) lands in the low half.
__device__ __forceinline__ uint32_t e4m3x2_to_bf16x2(uint32_t two_codes) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two_codes), __NV_E4M3);
  const float2 f = __half22float2(__half2(h));
  const __nv_bfloat162 b = __float22bfloat162_rn(f);
  return *reinterpret_cast<const uint32_t*>(&b);
}

// 16 e4m3 codes (one uint4, byte 0 first) -> 8 bf16x2 words in the same order, exactly.
__device__ __forceinline__ void e4m3x16_to_bf16x16(const uint4& w, uint32_t (&b)[8]) {
  const uint32_t q[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    b[2 * j] = e4m3x2_to_bf16x2(q[j] & 0xFFFFu);
    b[2 * j + 1] = e4m3x2_to_bf16x2(q[j] >> 16);
  }
}

// cp.async (rows past M zero-filled: cp_async_16_zfill), commit / wait and smem_u32: common/ptx.cuh.

// wmma fragment loads from shared memory. wmma::load_matrix_sync takes a generic pointer and nvcc
// keeps the generic load (LD.E, 4 per fragment); the same PTX instruction with the .shared state
// space lets ptxas use ldmatrix (one LDSM.x4 per fragment). Same instruction, same fragment layout:
// the four registers are the fragment's storage, in the order wmma::load_matrix_sync fills them.
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;
static_assert(sizeof(FragA) == 16 && sizeof(FragB) == 16, "a bf16 16x16x16 operand fragment is 4 registers");

__device__ __forceinline__ void ldsm_a(FragA& f, uint32_t addr, unsigned ldm) {
  uint32_t* r = reinterpret_cast<uint32_t*>(&f.x[0]);
  asm volatile("wmma.load.a.sync.aligned.row.m16n16k16.shared.bf16 {%0, %1, %2, %3}, [%4], %5;\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr), "r"(ldm));
}
__device__ __forceinline__ void ldsm_b(FragB& f, uint32_t addr, unsigned ldm) {
  uint32_t* r = reinterpret_cast<uint32_t*>(&f.x[0]);
  asm volatile("wmma.load.b.sync.aligned.col.m16n16k16.shared.bf16 {%0, %1, %2, %3}, [%4], %5;\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr), "r"(ldm));
}
// The same loads from a generic pointer into shared memory.
__device__ __forceinline__ void load_a(FragA& f, const bf16* p, unsigned ldm) { ldsm_a(f, ptx::smem_u32(p), ldm); }
__device__ __forceinline__ void load_b(FragB& f, const bf16* p, unsigned ldm) { ldsm_b(f, ptx::smem_u32(p), ldm); }

// fp32 -> OutT in the epilogues (from_float), the grouped launch order (grouped_tile): common/tile.cuh.

// The pieces every kernel variant below shares.

// This CTA's output tile (m0, n0) and K-block range. Grouped launch order: kGroupM tile rows share
// each column of W tiles while it is in L2. blockIdx.y is the K split.
struct CtaTile {
  int m0, n0;                // first row / column of the output tile
  int kb_begin, kb_end;      // K blocks [kb_begin, kb_end) of this split
  const float* w_scale_row;  // the tile's row of weight scales, one per K block
};
template <class Cfg>
__device__ __forceinline__ CtaTile cta_tile(const Params& p) {
  const TileCoord tile = grouped_tile(blockIdx.x, cdiv(p.M, Cfg::BM), cdiv(p.N, Cfg::BN), kGroupM);
  CtaTile t;
  t.m0 = tile.m * Cfg::BM;
  t.n0 = tile.n * Cfg::BN;
  const int KB = p.K / BK;
  t.kb_begin = blockIdx.y * p.kb_per_split;
  t.kb_end = min(KB, t.kb_begin + p.kb_per_split);
  t.w_scale_row = p.w_scale + static_cast<size_t>(t.n0 / 128) * KB;
  return t;
}

template <class Cfg>
__device__ __forceinline__ void zero_frags(FragC (&f)[Cfg::FM][Cfg::FN]) {
#pragma unroll
  for (int i = 0; i < Cfg::FM; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::FN; ++j) wmma::fill_fragment(f[i][j], 0.f);
}

// acc += scale * blk: one 128-wide K block's fp32 sums promoted with the block's one weight scale.
// One scalar for the whole fragment, so the (unspecified) element order of a wmma fragment does
// not matter.
template <class Cfg>
__device__ __forceinline__ void promote(FragC (&acc)[Cfg::FM][Cfg::FN], const FragC (&blk)[Cfg::FM][Cfg::FN],
                                        float scale) {
#pragma unroll
  for (int i = 0; i < Cfg::FM; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::FN; ++j)
#pragma unroll
      for (int e = 0; e < blk[i][j].num_elements; ++e)
        acc[i][j].x[e] = fmaf(scale, blk[i][j].x[e], acc[i][j].x[e]);
}

// Epilogue: fragments -> fp32 staging tile in shared memory (smem_raw; the caller has passed a
// barrier after the last read of the operand tiles) -> row-major global stores, guarded for ragged M
// and N: OutT into c, or fp32 into this split's slice of partial when the grid has K splits.
// p by value, as the kernels hold it: through a reference ptxas cannot tell that the stores to c /
// partial leave p.M and p.N alone, and schedules the guard differently (scripts/sass_identical.py).
template <class Cfg, typename OutT>
__device__ __forceinline__ void store_tile(const Params p, const FragC (&acc)[Cfg::FM][Cfg::FN],
                                           unsigned char* smem_raw, int m0, int n0, int wm, int wn) {
  float* Cs = reinterpret_cast<float*>(smem_raw);
#pragma unroll
  for (int i = 0; i < Cfg::FM; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::FN; ++j)
      wmma::store_matrix_sync(Cs + (wm * Cfg::WM + i * 16) * Cfg::LDC + wn * Cfg::WN + j * 16, acc[i][j],
                              Cfg::LDC, wmma::mem_row_major);
  __syncthreads();
  const bool split = gridDim.y > 1;
  for (int idx = threadIdx.x; idx < Cfg::BM * Cfg::BN; idx += Cfg::THREADS) {
    const int r = idx / Cfg::BN, cc = idx % Cfg::BN;
    const int gm = m0 + r, gn = n0 + cc;
    if (gm >= p.M || gn >= p.N) continue;
    const float v = Cs[r * Cfg::LDC + cc];
    const size_t o = static_cast<size_t>(gm) * p.N + gn;
    if (split) {
      p.partial[static_cast<size_t>(blockIdx.y) * p.M * p.N + o] = v;
    } else {
      static_cast<OutT*>(p.c)[o] = from_float<OutT>(v);
    }
  }
}

// 16-byte chunk `chunk` (8 bf16) of the BM x 128 A tile of K block kb: its element offset in the
// stage (row-major, LDS), its source, and whether its row is inside M. Rows past M read row 0 (a
// valid address) and are zero-filled.
struct AChunk {
  int smem_offset;
  const bf16* src;
  bool in;
};
template <class Cfg>
__device__ __forceinline__ AChunk a_chunk(const Params& p, int m0, int kb, int chunk) {
  const int row = chunk / (BK / 8), col = (chunk % (BK / 8)) * 8;
  const int gm = m0 + row;
  return {row * Cfg::LDS + col, p.a + static_cast<size_t>(gm < p.M ? gm : 0) * p.K + kb * BK + col, gm < p.M};
}

// One thread's share of the tile traffic of one K block.
template <class Cfg>
struct TileLoader {
  uint4 wreg[Cfg::W_CHUNKS];                       // 16 e4m3 each, in flight during the MMAs
  uint4 areg[Cfg::kWideSmem ? 1 : Cfg::A_CHUNKS];  // only the forced-pad build stages A in registers

  // Start the loads of K block kb (A into stage `stage` via cp.async, W into registers).
  __device__ __forceinline__ void issue(const Params& p, bf16* As, int m0, int n0, int kb) {
    const int tid = threadIdx.x;
#pragma unroll
    for (int i = 0; i < Cfg::A_CHUNKS; ++i) {
      const AChunk c = a_chunk<Cfg>(p, m0, kb, tid + i * Cfg::THREADS);
      if constexpr (Cfg::kWideSmem) {
        ptx::cp_async_16_zfill(ptx::smem_u32(As + c.smem_offset), c.src, c.in);
      } else {
        areg[i] = c.in ? *reinterpret_cast<const uint4*>(c.src) : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int i = 0; i < Cfg::W_CHUNKS; ++i) {
      const int chunk = tid + i * Cfg::THREADS;
      const int row = chunk / (BK / 16), col = (chunk % (BK / 16)) * 16;
      const int gn = n0 + row;
      wreg[i] = gn < p.N ? __ldg(reinterpret_cast<const uint4*>(p.w + static_cast<size_t>(gn) * p.K + kb * BK + col))
                         : make_uint4(0, 0, 0, 0);
    }
  }

  // Finish K block kb's loads into stage (As, Ws): convert W to bf16 and store it; wait for A.
  __device__ __forceinline__ void finish(bf16* As, bf16* Ws) {
    store_w(Ws);
    finish_a(As);
  }

  // Convert the W registers to bf16 (exactly) and store them into the W tile Ws.
  __device__ __forceinline__ void store_w(bf16* Ws) {
    const int tid = threadIdx.x;
#pragma unroll
    for (int i = 0; i < Cfg::W_CHUNKS; ++i) {
      const int chunk = tid + i * Cfg::THREADS;
      const int row = chunk / (BK / 16), col = (chunk % (BK / 16)) * 16;
      uint32_t b[8];
      e4m3x16_to_bf16x16(wreg[i], b);
      bf16* dst = Ws + row * Cfg::LDS + col;
      if constexpr (Cfg::kWideSmem) {
        reinterpret_cast<uint4*>(dst)[0] = make_uint4(b[0], b[1], b[2], b[3]);
        reinterpret_cast<uint4*>(dst)[1] = make_uint4(b[4], b[5], b[6], b[7]);
      } else {
        unsigned short* d16 = reinterpret_cast<unsigned short*>(dst);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          d16[2 * j] = static_cast<unsigned short>(b[j] & 0xFFFFu);
          d16[2 * j + 1] = static_cast<unsigned short>(b[j] >> 16);
        }
      }
    }
  }

  // A of the block: wait for the cp.async copies, or store the staged registers (forced pad).
  __device__ __forceinline__ void finish_a(bf16* As) {
    const int tid = threadIdx.x;
    if constexpr (Cfg::kWideSmem) {
      ptx::cp_async_commit();
      ptx::cp_async_wait<0>();
    } else {
#pragma unroll
      for (int i = 0; i < Cfg::A_CHUNKS; ++i) {
        const int chunk = tid + i * Cfg::THREADS;
        const int row = chunk / (BK / 8), col = (chunk % (BK / 8)) * 8;
        unsigned short* d16 = reinterpret_cast<unsigned short*>(As + row * Cfg::LDS + col);
        const uint32_t v[4] = {areg[i].x, areg[i].y, areg[i].z, areg[i].w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          d16[2 * j] = static_cast<unsigned short>(v[j] & 0xFFFFu);
          d16[2 * j + 1] = static_cast<unsigned short>(v[j] >> 16);
        }
      }
    }
  }
};

template <class Cfg, typename OutT>
__global__ void __launch_bounds__(Cfg::THREADS)
wmma_w8a16_kernel(const Params p) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  bf16* const As0 = reinterpret_cast<bf16*>(smem_raw);     // [2][BM][LDS]
  bf16* const Ws0 = As0 + 2 * Cfg::A_STAGE;                // [2][BN][LDS]

  const CtaTile t = cta_tile<Cfg>(p);
  const int m0 = t.m0, n0 = t.n0, kb_begin = t.kb_begin, kb_end = t.kb_end;
  const float* w_scale_row = t.w_scale_row;

  const int warp = threadIdx.x / 32;
  const int wm = warp / Cfg::WARPS_N, wn = warp % Cfg::WARPS_N;

  FragC acc[Cfg::FM][Cfg::FN];
  zero_frags<Cfg>(acc);

  TileLoader<Cfg> ld;
  ld.issue(p, As0, m0, n0, kb_begin);
  ld.finish(As0, Ws0);
  float scale = w_scale_row[kb_begin];
  __syncthreads();

  for (int kb = kb_begin; kb < kb_end; ++kb) {  // fp8lab:excerpt wmma_main_loop
    const int cur = (kb - kb_begin) & 1;
    const bool more = kb + 1 < kb_end;
    float next_scale = 0.f;
    if (more) {
      ld.issue(p, As0 + (cur ^ 1) * Cfg::A_STAGE, m0, n0, kb + 1);
      next_scale = w_scale_row[kb + 1];
    }
    const bf16* As = As0 + cur * Cfg::A_STAGE + (wm * Cfg::WM) * Cfg::LDS;
    const bf16* Ws = Ws0 + cur * Cfg::W_STAGE + (wn * Cfg::WN) * Cfg::LDS;

    // One 128-wide K block into a fresh fp32 fragment ...
    FragC blk[Cfg::FM][Cfg::FN];
    zero_frags<Cfg>(blk);
#pragma unroll
    for (int ks = 0; ks < BK / 16; ++ks) {
      FragA fa[Cfg::FM];
      FragB fb[Cfg::FN];
#pragma unroll
      for (int i = 0; i < Cfg::FM; ++i) load_a(fa[i], As + i * 16 * Cfg::LDS + ks * 16, Cfg::LDS);
#pragma unroll
      for (int j = 0; j < Cfg::FN; ++j) load_b(fb[j], Ws + j * 16 * Cfg::LDS + ks * 16, Cfg::LDS);
#pragma unroll
      for (int i = 0; i < Cfg::FM; ++i)
#pragma unroll
        for (int j = 0; j < Cfg::FN; ++j) wmma::mma_sync(blk[i][j], fa[i], fb[j], blk[i][j]);
    }
    // ... promoted once with the block's one weight scale.
    promote<Cfg>(acc, blk, scale);

    if (more) ld.finish(As0 + (cur ^ 1) * Cfg::A_STAGE, Ws0 + (cur ^ 1) * Cfg::W_STAGE);
    __syncthreads();
    scale = next_scale;
  }  // fp8lab:excerpt-end wmma_main_loop

  // Epilogue: the loop ended on a barrier, so the operand tiles are dead and store_tile may reuse them.
  store_tile<Cfg, OutT>(p, acc, smem_raw, m0, n0, wm, wn);
}

// Pipelined variant (Config::PIPE >= 2; issue 6, B3). Same arithmetic as wmma_w8a16_kernel (one
// fresh fp32 fragment per 128-wide K block, promoted with fmaf(scale, blk, acc)), so the results
// are bit-identical to it; only the schedule differs:
//  - STAGES shared-memory stages: the A tile of block kb + STAGES - 1 goes out with cp.async while
//    block kb is multiplied, so A has STAGES - 1 blocks of MMAs to arrive (the original: one).
//  - the W tile of block kb + STAGES - 1 is loaded into registers at the top of the iteration and
//    converted + stored into its (dead) stage at the bottom; its consumer is STAGES - 1 barriers
//    away, so with STAGES >= 3 the barrier no longer waits on stores the next block needs at once.
//  - the loop body has no `if (more)`: past the last block the loads are clamped to a valid block
//    and land in a stage nobody reads again, so ptxas sees one straight-line body and can
//    interleave the F2FP conversions and shared stores with the HMMAs.
//  - explicit fragment double buffering: the fragments of k-step ks + 1 are loaded before the
//    MMAs of k-step ks are issued.
// cp.async bookkeeping: one commit group per block (possibly empty-in-effect but always committed),
// so "wait until <= STAGES - 2 groups are pending" at the bottom of iteration i means the group of
// block i + 1 has landed.
template <class Cfg, typename OutT>
__global__ void __launch_bounds__(Cfg::THREADS)
wmma_w8a16_pipelined_kernel(const Params p) {
  static_assert(Cfg::PIPE >= 2 && Cfg::kWideSmem, "pipelined configs only");
  constexpr int S = Cfg::STAGES;
  constexpr int KS = BK / 16;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  bf16* const As0 = reinterpret_cast<bf16*>(smem_raw);     // [S][BM][LDS]
  bf16* const Ws0 = As0 + S * Cfg::A_STAGE;                // [S][BN][LDS]

  const CtaTile t = cta_tile<Cfg>(p);
  const int m0 = t.m0, n0 = t.n0, kb_begin = t.kb_begin, kb_end = t.kb_end;
  const float* w_scale_row = t.w_scale_row;

  const int warp = threadIdx.x / 32;
  const int wm = warp / Cfg::WARPS_N, wn = warp % Cfg::WARPS_N;

  FragC acc[Cfg::FM][Cfg::FN];
  zero_frags<Cfg>(acc);

  TileLoader<Cfg> ld;
  // Prologue: blocks kb_begin .. kb_begin + S - 2 into stages 0 .. S - 2 (clamped past the end).
#pragma unroll
  for (int st = 0; st < S - 1; ++st) {
    const int kb = min(kb_begin + st, kb_end - 1);
    ld.issue(p, As0 + st * Cfg::A_STAGE, m0, n0, kb);
    ptx::cp_async_commit();
    ld.store_w(Ws0 + st * Cfg::W_STAGE);
  }
  ptx::cp_async_wait<S - 2>();
  __syncthreads();

  int cur = 0;           // stage of block kb
  int pre = S - 1;       // stage of block kb + S - 1 (the one freed by the last barrier)
  for (int kb = kb_begin; kb < kb_end; ++kb) {
    ld.issue(p, As0 + pre * Cfg::A_STAGE, m0, n0, min(kb + S - 1, kb_end - 1));
    ptx::cp_async_commit();
    const float scale = __ldg(w_scale_row + kb);
    const bf16* As = As0 + cur * Cfg::A_STAGE + (wm * Cfg::WM) * Cfg::LDS;
    const bf16* Ws = Ws0 + cur * Cfg::W_STAGE + (wn * Cfg::WN) * Cfg::LDS;

    FragC blk[Cfg::FM][Cfg::FN];
    zero_frags<Cfg>(blk);
    FragA fa[2][Cfg::FM];
    FragB fb[2][Cfg::FN];
#pragma unroll
    for (int i = 0; i < Cfg::FM; ++i) load_a(fa[0][i], As + i * 16 * Cfg::LDS, Cfg::LDS);
#pragma unroll
    for (int j = 0; j < Cfg::FN; ++j) load_b(fb[0][j], Ws + j * 16 * Cfg::LDS, Cfg::LDS);
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
      const int b = ks & 1;
      if (ks + 1 < KS) {
#pragma unroll
        for (int i = 0; i < Cfg::FM; ++i) load_a(fa[b ^ 1][i], As + i * 16 * Cfg::LDS + (ks + 1) * 16, Cfg::LDS);
#pragma unroll
        for (int j = 0; j < Cfg::FN; ++j) load_b(fb[b ^ 1][j], Ws + j * 16 * Cfg::LDS + (ks + 1) * 16, Cfg::LDS);
      }
#pragma unroll
      for (int i = 0; i < Cfg::FM; ++i)
#pragma unroll
        for (int j = 0; j < Cfg::FN; ++j) wmma::mma_sync(blk[i][j], fa[b][i], fb[b][j], blk[i][j]);
    }
    promote<Cfg>(acc, blk, scale);

    ld.store_w(Ws0 + pre * Cfg::W_STAGE);
    ptx::cp_async_wait<S - 2>();
    __syncthreads();
    cur = cur + 1 == S ? 0 : cur + 1;
    pre = pre + 1 == S ? 0 : pre + 1;
  }
  // The clamped loads of the last S - 1 iterations may still be in flight into smem the epilogue
  // is about to overwrite.
  ptx::cp_async_wait<0>();
  __syncthreads();

  store_tile<Cfg, OutT>(p, acc, smem_raw, m0, n0, wm, wn);
}

// Interleaved variant (Config::SCHED == 1; issue 6, B3). Same arithmetic as wmma_w8a16_kernel (a
// fresh fp32 fragment per 128-wide K block, the same k-step order, promoted with fmaf(scale, blk,
// acc)), so fp32 outputs are bit-identical to the original kernel with the same warp tile. What the
// SASS of the original showed (per 128-K block, per warp of the 128x128 / 64x32 tile: 128 HMMA, 48
// LDSM.x4, 8 STS.128, 8 LDGSTS, ~180 conversion ALU ops and ~100 address ops) and what changes here:
//  - the W tile is converted and stored in pieces *between* the k-steps, one 16-code chunk per k-step
//    in the second half of the block, instead of in a phase after the MMAs in which every warp of the
//    CTA (lockstepped by the barrier) leaves the tensor pipe idle;
//  - conflict-free W stores: a quarter-warp (the 8 threads one 16-byte store phase serves) covers 2
//    rows x 4 chunks of 16 codes, so its 8 16-byte stores land in 8 different 4-bank groups with the
//    +8 pad (row stride 272 B = 17 x 16 B). The original mapping (8 consecutive 32-byte pieces of one
//    row) puts two stores in each group: 2 wavefronts per STS.128 instead of 1. Global loads stay
//    coalesced (each warp reads 8 rows x 64 contiguous bytes);
//  - STAGES >= 3 and a fragment double buffer that runs across block boundaries: the k-step 0
//    fragments of block kb + 1 are loaded during k-step 7 of block kb, *before* the barrier, so
//    the barrier no longer precedes an LDSM round trip. Legal because block kb + 1 was stored during
//    iteration kb + 2 - STAGES <= kb - 1 and published by that iteration's barrier, and the stage
//    written in iteration kb (block kb + STAGES - 1) is the stage of block kb - 1, whose last reads
//    were before the previous barrier;
//  - shared-memory addresses are 32-bit values computed once per stage (base + compile-time
//    offsets), so every LDSM takes [reg + immediate] instead of a fresh IMAD chain.
// cp.async bookkeeping: one commit group per block. At the bottom of iteration kb the groups issued
// in iterations <= kb cover blocks up to kb + STAGES - 1; block kb + 2 must have landed (its fragments
// are read from iteration kb + 1's last k-step on), so at most STAGES - 3 groups may stay pending.

// Chunk q (16 e4m3 codes) of a BN x 128 W tile -> (row, first code). 32 consecutive chunks (one
// warp) cover 8 rows x 64 codes; lanes 8p .. 8p + 7 (one 16-byte store phase) cover rows 2p, 2p + 1
// and codes 0..63 of one half. fp8lab/kernels/seed001.py (w_store_chunks_il) mirrors this formula
// for the bank-conflict check.
__device__ __forceinline__ int il_w_row(int q) { return 8 * ((q >> 5) >> 1) + 2 * ((q & 31) >> 3) + (q & 1); }
__device__ __forceinline__ int il_w_col(int q) { return 64 * ((q >> 5) & 1) + 16 * ((q & 7) >> 1); }

template <class Cfg, typename OutT>
__global__ void __launch_bounds__(Cfg::THREADS)
wmma_w8a16_il_kernel(const Params p) {
  static_assert(Cfg::SCHED == 1 && Cfg::kWideSmem, "interleaved configs only");
  constexpr int S = Cfg::STAGES;
  constexpr int KS = BK / 16;
  constexpr int WC = Cfg::W_CHUNKS;
  constexpr int W_FIRST_KS = KS - WC;                     // k-steps that carry one W chunk each
  constexpr uint32_t LDS_B = Cfg::LDS * 2;                // row stride, bytes
  constexpr uint32_t A_STAGE_B = Cfg::A_STAGE * 2, W_STAGE_B = Cfg::W_STAGE * 2;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  bf16* const As0 = reinterpret_cast<bf16*>(smem_raw);     // [S][BM][LDS]
  bf16* const Ws0 = As0 + S * Cfg::A_STAGE;                // [S][BN][LDS]

  const CtaTile t = cta_tile<Cfg>(p);
  const int m0 = t.m0, n0 = t.n0, kb_begin = t.kb_begin, kb_end = t.kb_end;
  const float* w_scale_row = t.w_scale_row;

  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int wm = warp / Cfg::WARPS_N, wn = warp % Cfg::WARPS_N;
  // This warp's fragment origin in stage 0 (bytes, shared window).
  const uint32_t a_frag0 = ptx::smem_u32(As0) + static_cast<uint32_t>(wm * Cfg::WM) * LDS_B;
  const uint32_t w_frag0 = ptx::smem_u32(Ws0) + static_cast<uint32_t>(wn * Cfg::WN) * LDS_B;

  // This thread's W chunks: chunk i = chunk 0 + i * THREADS / 32 warps = + 16 * i * THREADS / 256
  // rows, same column (THREADS / 32 is even), so one row/column pair per thread serves all chunks.
  const int w_row = il_w_row(tid), w_col = il_w_col(tid);
  constexpr int W_ROW_STEP = Cfg::THREADS / 32 / 2 * 8;   // rows between chunk i and i + 1
  const uint8_t* w_src = p.w + static_cast<size_t>(n0 + w_row) * p.K + w_col;
  bf16* const w_dst0 = Ws0 + w_row * Cfg::LDS + w_col;
  uint4 wreg[WC];

  auto issue_a = [&](int stage, int kb) {
    bf16* As = As0 + stage * Cfg::A_STAGE;
#pragma unroll
    for (int i = 0; i < Cfg::A_CHUNKS; ++i) {
      const AChunk c = a_chunk<Cfg>(p, m0, kb, tid + i * Cfg::THREADS);
      ptx::cp_async_16_zfill(ptx::smem_u32(As + c.smem_offset), c.src, c.in);
    }
  };
  auto load_w = [&](int kb) {
#pragma unroll
    for (int i = 0; i < WC; ++i) {
      const bool in = n0 + w_row + i * W_ROW_STEP < p.N;
      wreg[i] = in ? __ldg(reinterpret_cast<const uint4*>(w_src + static_cast<size_t>(i * W_ROW_STEP) * p.K + kb * BK))
                   : make_uint4(0, 0, 0, 0);
    }
  };
  auto store_w = [&](int i, int stage) {
    uint32_t b[8];
    e4m3x16_to_bf16x16(wreg[i], b);
    bf16* dst = w_dst0 + stage * Cfg::W_STAGE + i * W_ROW_STEP * Cfg::LDS;
    reinterpret_cast<uint4*>(dst)[0] = make_uint4(b[0], b[1], b[2], b[3]);
    reinterpret_cast<uint4*>(dst)[1] = make_uint4(b[4], b[5], b[6], b[7]);
  };

  FragC acc[Cfg::FM][Cfg::FN];
  zero_frags<Cfg>(acc);

  // Prologue: blocks kb_begin .. kb_begin + S - 2 into stages 0 .. S - 2 (clamped past the end).
#pragma unroll
  for (int st = 0; st < S - 1; ++st) {
    const int kb = min(kb_begin + st, kb_end - 1);
    issue_a(st, kb);
    ptx::cp_async_commit();
    load_w(kb);
#pragma unroll
    for (int i = 0; i < WC; ++i) store_w(i, st);
  }
  ptx::cp_async_wait<0>();
  __syncthreads();

  FragA fa[2][Cfg::FM];
  FragB fb[2][Cfg::FN];
#pragma unroll
  for (int i = 0; i < Cfg::FM; ++i) ldsm_a(fa[0][i], a_frag0 + i * 16 * LDS_B, Cfg::LDS);
#pragma unroll
  for (int j = 0; j < Cfg::FN; ++j) ldsm_b(fb[0][j], w_frag0 + j * 16 * LDS_B, Cfg::LDS);

  int cur = 0;           // stage of block kb
  int pre = S - 1;       // stage of block kb + S - 1 (block kb - 1's, free since the last barrier)
  for (int kb = kb_begin; kb < kb_end; ++kb) {
    const int nxt = cur + 1 == S ? 0 : cur + 1;
    const int kload = min(kb + S - 1, kb_end - 1);
    issue_a(pre, kload);
    ptx::cp_async_commit();
    load_w(kload);
    const float scale = __ldg(w_scale_row + kb);
    const uint32_t a_cur = a_frag0 + cur * A_STAGE_B, w_cur = w_frag0 + cur * W_STAGE_B;
    const uint32_t a_nxt = a_frag0 + nxt * A_STAGE_B, w_nxt = w_frag0 + nxt * W_STAGE_B;

    FragC blk[Cfg::FM][Cfg::FN];
    zero_frags<Cfg>(blk);
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
      const int b = ks & 1;
      // Fragments of the next k-step: this block's, or k-step 0 of block kb + 1 (KS is even, so they
      // land in buffer 0, where the next iteration starts).
      const uint32_t a_src = ks + 1 < KS ? a_cur + (ks + 1) * 32 : a_nxt;
      const uint32_t w_src_s = ks + 1 < KS ? w_cur + (ks + 1) * 32 : w_nxt;
#pragma unroll
      for (int i = 0; i < Cfg::FM; ++i) ldsm_a(fa[b ^ 1][i], a_src + i * 16 * LDS_B, Cfg::LDS);
#pragma unroll
      for (int j = 0; j < Cfg::FN; ++j) ldsm_b(fb[b ^ 1][j], w_src_s + j * 16 * LDS_B, Cfg::LDS);
#pragma unroll
      for (int i = 0; i < Cfg::FM; ++i)
#pragma unroll
        for (int j = 0; j < Cfg::FN; ++j) wmma::mma_sync(blk[i][j], fa[b][i], fb[b][j], blk[i][j]);
      if (ks >= W_FIRST_KS) store_w(ks - W_FIRST_KS, pre);
    }
    promote<Cfg>(acc, blk, scale);

    ptx::cp_async_wait<S - 3>();
    __syncthreads();
    cur = nxt;
    pre = pre + 1 == S ? 0 : pre + 1;
  }
  // Clamped loads of the last iterations may still be in flight into smem the epilogue overwrites.
  ptx::cp_async_wait<0>();
  __syncthreads();

  store_tile<Cfg, OutT>(p, acc, smem_raw, m0, n0, wm, wn);
}

// Sum of the K splits in a fixed order (deterministic), then the output conversion.
// partial: (splits, M*N) fp32; c: (M*N) OutT.
template <typename OutT>
__global__ void splitk_reduce_kernel(const float* __restrict__ partial, OutT* __restrict__ c, int splits,
                                     size_t mn) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < mn; i += size_t(gridDim.x) * blockDim.x) {
    float s = 0.f;
    for (int z = 0; z < splits; ++z) s += partial[z * mn + i];
    c[i] = from_float<OutT>(s);
  }
}

template <class Cfg, typename OutT>
cudaError_t launch(const Params& p, cudaStream_t stream) {
  const int KB = p.K / BK;
  if (p.kb_per_split < 1) return cudaErrorInvalidValue;
  const int splits = cdiv(KB, p.kb_per_split);
  if (splits > 1 && p.partial == nullptr) return cudaErrorInvalidValue;
  if (splits > 65535) return cudaErrorInvalidConfiguration;
  auto kernel = [] {
    if constexpr (Cfg::SCHED == 1) return wmma_w8a16_il_kernel<Cfg, OutT>;
    else if constexpr (Cfg::PIPE > 0) return wmma_w8a16_pipelined_kernel<Cfg, OutT>;
    else return wmma_w8a16_kernel<Cfg, OutT>;
  }();
  if (Cfg::SMEM > 48 * 1024) {
    // Set once per device: the attribute is per function and device, and setting it is not free.
    static bool done[64] = {};
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return e;
    if (dev >= 64 || !done[dev]) {
      e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(Cfg::SMEM));
      if (e != cudaSuccess) return e;
      if (dev < 64) done[dev] = true;
    }
  }
  const long long tiles = static_cast<long long>(cdiv(p.M, Cfg::BM)) * cdiv(p.N, Cfg::BN);
  if (tiles > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
  kernel<<<dim3(static_cast<unsigned>(tiles), splits), Cfg::THREADS, Cfg::SMEM, stream>>>(p);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess || splits == 1) return e;
  const size_t mn = static_cast<size_t>(p.M) * p.N;
  const int blocks = static_cast<int>(mn / 256 + 1 < 4096 ? mn / 256 + 1 : 4096);
  splitk_reduce_kernel<OutT><<<blocks, 256, 0, stream>>>(p.partial, static_cast<OutT*>(p.c), splits, mn);
  return cudaGetLastError();
}

}  // namespace wmma_w8a16
}  // namespace fp8lab

// THE list of configurations, X(BM, BN, WM, WN, PAD, FORCE_PAD, STAGES, SCHED); the index of a line is
// its id. SCHED 0: STAGES 0 is the original two-stage kernel, >= 2 the pipelined kernel with that many
// stages; SCHED 1: the interleaved kernel with STAGES (3 or 4) stages.
// fp8lab/kernels/seed001.py parses this list, so Python and C++ cannot drift.
#define FP8LAB_WMMA_CONFIGS(X)                                                                        \
  X(16, 64, 16, 16, 8, 0, 0, 0)   /* 0 decode: M <= 16; split-K fills the SMs   4 warps,  44 KB smem */ \
  X(32, 64, 32, 16, 8, 0, 0, 0)   /* 1 small:  M <= 32                          4 warps,  52 KB */      \
  X(64, 128, 32, 32, 8, 0, 0, 0)  /* 2 medium: M <= 128                         8 warps, 104 KB */      \
  X(128, 128, 64, 32, 8, 0, 0, 0) /* 3 large:  prefill                          8 warps, 139 KB */      \
  X(128, 128, 64, 32, 0, 0, 0, 0) /* 4 large without the pad: bank-conflicted LDSM control       */     \
  X(64, 64, 32, 32, 1, 1, 0, 0)   /* 5 +1 pad forced past the static_assert: B9 experiment only  */     \
  X(128, 64, 64, 32, 8, 0, 0, 0)  /* 6 large_n64: 4 warps of 64x32, two CTAs per SM               */     \
  X(128, 128, 64, 32, 8, 0, 3, 0) /* 7 large_s3: pipelined, 3 stages            8 warps, 209 KB */      \
  X(128, 128, 64, 32, 8, 0, 2, 0) /* 8 large_s2: pipelined, 2 stages            8 warps, 139 KB */      \
  X(128, 64, 64, 32, 8, 0, 2, 0)  /* 9 large_n64_s2: pipelined, 2 stages, 4 warps, 104 KB, 2 CTAs/SM */ \
  X(128, 128, 64, 32, 8, 0, 3, 1) /* 10 large_il: interleaved, 3 stages         8 warps, 209 KB */      \
  X(128, 128, 32, 32, 8, 0, 3, 1) /* 11 large_il_w32: interleaved, 16 warps of 32x32, 209 KB */

#ifdef FP8LAB_WMMA_PAD_CHECK
#ifdef FP8LAB_WMMA_FORCE_PAD
#define FP8LAB_WMMA_FORCE 1
#else
#define FP8LAB_WMMA_FORCE 0
#endif
// Pad check mode: exactly one kernel, so a bad pad's static_assert is the only diagnostic.
template __global__ void fp8lab::wmma_w8a16::wmma_w8a16_kernel<
    fp8lab::wmma_w8a16::Config<64, 64, 32, 32, FP8LAB_WMMA_PAD_CHECK, FP8LAB_WMMA_FORCE>, __nv_bfloat16>(
    const fp8lab::wmma_w8a16::Params);
#else
namespace {
using LaunchFn = cudaError_t (*)(const fp8lab::wmma_w8a16::Params&, cudaStream_t);
#define FP8LAB_WMMA_ROW(BM, BN, WM, WN, PAD, FORCE, STAGES, SCHED)                                     \
  {&fp8lab::wmma_w8a16::launch<fp8lab::wmma_w8a16::Config<BM, BN, WM, WN, PAD, FORCE, STAGES, SCHED>,   \
                               __nv_bfloat16>,                                                         \
   &fp8lab::wmma_w8a16::launch<fp8lab::wmma_w8a16::Config<BM, BN, WM, WN, PAD, FORCE, STAGES, SCHED>, float>},
const LaunchFn kWmmaTable[][2] = {FP8LAB_WMMA_CONFIGS(FP8LAB_WMMA_ROW)};
#undef FP8LAB_WMMA_ROW
constexpr int kWmmaConfigs = sizeof(kWmmaTable) / sizeof(kWmmaTable[0]);
}  // namespace

// The binding's entry point: a (M, K) bf16, w (N, K) e4m3, w_scale (ceil(N/128), K/128) fp32,
// c (M, N) bf16 (out_fp32 = 0) or fp32 (out_fp32 = 1); partial (splits, M, N) fp32 or null.
cudaError_t fp8lab_wmma_w8a16_launch(int config, int out_fp32, const void* a, const void* w, const float* w_scale,
                                     void* c, float* partial, int M, int N, int K, int kb_per_split,
                                     cudaStream_t stream) {
  if (config < 0 || config >= kWmmaConfigs || out_fp32 < 0 || out_fp32 > 1) return cudaErrorInvalidValue;
  fp8lab::wmma_w8a16::Params p{};
  p.a = static_cast<const __nv_bfloat16*>(a);
  p.w = static_cast<const uint8_t*>(w);
  p.w_scale = w_scale;
  p.c = c;
  p.partial = partial;
  p.M = M;
  p.N = N;
  p.K = K;
  p.kb_per_split = kb_per_split;
  return kWmmaTable[config][out_fp32](p, stream);
}

int fp8lab_wmma_w8a16_num_configs() { return kWmmaConfigs; }
#endif
