// gemv_pattern.cuh -- the decode GEMV's weight stream with nothing else: the ceiling of its access
// pattern (issue 22: "where a target is missed, the notebook shows why from measurement ... a
// pure-stream ceiling of the same access pattern").
//
// A pattern kernel launches the grid a gemv_w16 kernel launches (split-K: CTA tiles along N x K
// splits x M blocks; stream-K: the persistent CTAs walking (tile, K step) units) and has every warp
// issue exactly the loads that kernel's warp issues: the same 16-byte weight words and scale words
// (seek_frag / load_frag / Strides of gemv_w16.cuh, not a copy of them), with the same load
// instruction, in the same order, through the same three-step register ring. Instead of dequant,
// mma and epilogue it XORs every word it loaded into one register and stores it only if it equals
// a key the caller chose (never, in practice): the loads stay live, nothing else is done. No
// activations, no barrier, no split-K reduction.
//
// Occupancy: the pattern kernel needs far fewer registers than the GEMV, so on its own an SM would
// hold more of its CTAs. The launcher pads its dynamic shared memory so that an SM holds exactly
// the CTAs per SM the caller asks for (the GEMV's own occupancy), and reports the occupancy it got.
// So "the same grid, the same warps per SM, the same loads": what the access pattern allows. A GEMV
// below its pattern loses the difference to its per-step work; a pattern below the copy rate says
// the grid and access pattern themselves cost that much.
#pragma once

#include "gemv_pattern_params.h"
#include "gemv_w16.cuh"

namespace fp8lab {
namespace wo {

// XOR of every word of a step's fragment (weights and scales) into x.
template <int F, int NT>
__device__ __forceinline__ uint32_t fold_frag(const Frag<F, NT>& f, uint32_t x) {
  using T = Tiling<F, NT>;
#pragma unroll
  for (int i = 0; i < T::kWords; ++i) x ^= f.w[i];
#pragma unroll
  for (int t = 0; t < T::kScaleWords; ++t) x ^= f.s[t];
  return x;
}

__device__ __forceinline__ void pattern_sink(const PatternParams& p, uint32_t x) {
  if (x == p.key) {
    const size_t cta = (static_cast<size_t>(blockIdx.z) * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    p.sink[cta * blockDim.x + threadIdx.x] = x;
  }
}

// gemv_body's loads (split-K grid, BULK = false): warp w of CTA (x, y) reads the steps
// [y * steps_per_split, ...) of its 16 TM rows, kRing steps ahead, refilling a buffer right after
// the step in it was consumed. Warps past the last tile load nothing, as in gemv_body.
// STEP_MAJOR (a what-if for the probes, not the GEMV's layout): the same grid and warps, each
// (super-tile, step) chunk read where a step-major packing ([step][super-tile][...] instead of
// [super-tile][step][...]) would put it, so at a given step a CTA's warps read adjacent chunks. The
// buffer is read once all the same; only the order of the addresses differs (and so the XOR).
template <int F, int NT, bool STEP_MAJOR = false>
__device__ __forceinline__ void pattern_body(const PatternParams& p) {
  using T = Tiling<F, NT>;
  using S = Strides<F>;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int st0 = blockIdx.y * p.steps_per_split;
  const int nsteps = min(p.steps, st0 + p.steps_per_split) - st0;
  const int tile16 = (blockIdx.x * kWarps + warp) * T::kTM;
  if (tile16 >= p.n_tiles16 || nsteps <= 0) return;   // warp-uniform
  const uint4* wnext;
  const uint32_t* snext;
  int wstep = S::kW, sstep = S::kS;   // per step; step-major: a whole step of every super-tile
  if constexpr (STEP_MAJOR) {
    // seek_frag with one step per super-tile from the first step's slab: chunk (super, st0) sits at
    // (st0 * n_super + super); then each step is n_super chunks further
    const int n_super = (p.n_tiles16 + T::kTilesPerSuper - 1) / T::kTilesPerSuper;
    const size_t slab = static_cast<size_t>(st0) * n_super;
    seek_frag<F, NT>(static_cast<const uint4*>(p.w) + slab * S::kW, p.scales + slab * S::kS, 1, tile16, 0, lane,
                     lane >> 2, wnext, snext);
    wstep = n_super * S::kW;
    sstep = n_super * S::kS;
  } else {
    seek_frag<F, NT>(static_cast<const uint4*>(p.w), p.scales, p.steps, tile16, st0, lane, lane >> 2, wnext, snext);
  }
  Frag<F, NT> f[kRing];
#pragma unroll
  for (int u = 0; u < kRing; ++u) {
    if (u < nsteps) {
      load_frag<F, NT>(f[u], wnext, snext);
      wnext += STEP_MAJOR ? wstep : S::kW;
      snext += STEP_MAJOR ? sstep : S::kS;
    }
  }
  uint32_t x = 0u;
  const int iters = (nsteps + kRing - 1) / kRing;
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int u = 0; u < kRing; ++u) {
      const int st = kRing * it + u;
      if (st < nsteps) {
        x = fold_frag<F, NT>(f[u], x);
        if (st + kRing < nsteps) {
          load_frag<F, NT>(f[u], wnext, snext);
          wnext += STEP_MAJOR ? wstep : S::kW;
          snext += STEP_MAJOR ? sstep : S::kS;
        }
      }
    }
  }
  pattern_sink(p, x);
}

// gemv_body_sk's loads (stream-K): CTA c walks units [c * units_per_cta, ...) in tile-major
// order, its load cursor kRing units ahead of the fold; at a tile boundary the cursor re-seeks.
// A warp whose rows lie past N in the last tile along N stops loading there (wlimit), as in
// gemv_body_sk.
template <int F, int NT>
__device__ __forceinline__ void pattern_body_sk(const PatternParams& p) {
  using T = Tiling<F, NT>;
  using S = Strides<F>;
  constexpr int TM = T::kTM;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int steps = p.steps;
  const int u0 = blockIdx.x * p.units_per_cta;
  const int nunits = min(p.tiles_x * steps, u0 + p.units_per_cta) - u0;
  if (nunits <= 0) return;
  int wlimit = nunits;
  if (((p.tiles_x - 1) * kWarps + warp) * TM >= p.n_tiles16) wlimit = max(0, min(nunits, (p.tiles_x - 1) * steps - u0));
  int lx = u0 / steps;
  int ls = u0 - lx * steps;
  const uint4* w0 = static_cast<const uint4*>(p.w);
  const uint4* wnext;
  const uint32_t* snext;
  auto seek = [&]() { seek_frag<F, NT>(w0, p.scales, steps, (lx * kWarps + warp) * TM, ls, lane, lane >> 2, wnext, snext); };
  seek();
  // the unit at the cursor into fr (if this warp loads it), then the cursor one unit on
  auto load_next = [&](Frag<F, NT>& fr, int i) {
    if (i < wlimit) load_frag<F, NT>(fr, wnext, snext);
    if (++ls == steps) {
      ls = 0;
      ++lx;
      seek();
    } else {
      wnext += S::kW;
      snext += S::kS;
    }
  };
  Frag<F, NT> f[kRing];
#pragma unroll
  for (int u = 0; u < kRing; ++u) {
    if (u < nunits) load_next(f[u], u);
  }
  uint32_t x = 0u;
  const int iters = (nunits + kRing - 1) / kRing;
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int u = 0; u < kRing; ++u) {
      const int i = kRing * it + u;
      if (i < nunits) {
        if (i < wlimit) x = fold_frag<F, NT>(f[u], x);
        if (i + kRing < nunits) load_next(f[u], i + kRing);
      }
    }
  }
  pattern_sink(p, x);
}

template <int F, int NT, bool STEP_MAJOR = false>
__global__ void __launch_bounds__(kThreads) gemv_pattern(const PatternParams p) {
  pattern_body<F, NT, STEP_MAJOR>(p);
}
template <int F, int NT>
__global__ void __launch_bounds__(kThreads) gemv_pattern_sk(const PatternParams p) {
  pattern_body_sk<F, NT>(p);
}

// Dynamic shared memory that leaves room for exactly `ctas` CTAs per SM (at least 1): the SM's
// shared memory over ctas, less the per-CTA reservation, at most the per-CTA opt-in limit, in
// 128-byte units. 0 on a query error.
inline int pattern_pad_bytes(int ctas) {
  int dev = 0, per_sm = 0, optin = 0, reserved = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev) != cudaSuccess)
    return 0;
  int pad = per_sm / (ctas < 1 ? 1 : ctas) - reserved;
  if (pad > optin) pad = optin;
  return pad < 0 ? 0 : pad / 128 * 128;
}

// Launch the pattern of (F, NT): splits > 0 the split-K grid (tiles_x CTAs along N, splits, gz M
// blocks; p.steps_per_split set by the caller), splits < 0 the stream-K grid of -splits persistent
// CTAs per M block (p.tiles_x / p.units_per_cta set here, as launch_gemv_sk). ctas_per_sm: the
// occupancy to pad for; *occ gets the occupancy the padded kernel has (the caller checks it).
// step_major: the split-K what-if of pattern_body (splits > 0 only).
template <int F, int NT>
cudaError_t launch_pattern(PatternParams p, int splits, int gz, int ctas_per_sm, bool step_major, int* occ,
                           cudaStream_t stream) {
  using T = Tiling<F, NT>;
  if (splits == 0 || gz < 1 || ctas_per_sm < 1 || (step_major && splits < 0)) return cudaErrorInvalidValue;
  void (*kernel)(const PatternParams) = splits < 0 ? &gemv_pattern_sk<F, NT>
                                        : step_major ? &gemv_pattern<F, NT, true> : &gemv_pattern<F, NT>;
  const int pad = pattern_pad_bytes(ctas_per_sm);
  // the attribute and the occupancy query once per (kernel, pad): the first call at a new
  // occupancy is a warm-up outside any CUDA-graph capture, the captured ones only launch
  static int last_pad[3] = {-1, -1, -1}, last_occ[3] = {0, 0, 0};
  const int which = splits < 0 ? 1 : (step_major ? 2 : 0);
  if (pad != last_pad[which]) {
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, pad);
    if (e != cudaSuccess) return e;
    // all of the unified L1 / shared memory as shared (the loads do not allocate in L1): the SM then
    // holds exactly the CTAs the padding leaves room for
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
    if (e != cudaSuccess) return e;
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&last_occ[which], kernel, kThreads, pad);
    if (e != cudaSuccess) return e;
    last_pad[which] = pad;
  }
  *occ = last_occ[which];
  const int tiles_per_cta = kWarps * T::kTM;
  const int tiles_x = (p.n_tiles16 + tiles_per_cta - 1) / tiles_per_cta;
  dim3 grid;
  if (splits > 0) {
    grid = dim3(tiles_x, splits, gz);
  } else {
    p.tiles_x = tiles_x;
    const long long units = static_cast<long long>(tiles_x) * p.steps;
    const long long upc = (units - splits - 1) / -splits;   // ceil(units / ctas)
    p.units_per_cta = static_cast<int>(upc);
    grid = dim3(static_cast<unsigned>((units + upc - 1) / upc), 1, gz);
  }
  kernel<<<grid, kThreads, pad, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace wo
}  // namespace fp8lab
