// gemv_w16_params.h -- the argument block of the weight-only decode kernels (gemv_w16.cuh), in a
// header with no device code so the torch binding (a .cpp) and the kernels share one definition.
#pragma once

#include <cstdint>

namespace fp8lab {
namespace wo {

// Shapes are logical; the packed arrays are padded to whole tiles (see weight_only.py).
struct WoParams {
  const void* w;            // packed weights, uint4 units: 8-bit [N16/16][S][4][32], 4-bit [N32/32][S][4][32]
  const uint32_t* scales;   // packed scales, 32-bit words: fp8/int8 [N16/16][S][8 g] (16-bit pairs);
                            // int4 [N32/32][S][8 g][2 tiles]; nvfp4 [N32/32][S][8 g][4 q][2 tiles] (e4m3 x 4)
  const void* act;          // [M, K] fp16 / bf16, row-major, 16-byte aligned
  void* out;                // [M, N] fp16 / bf16 (same type as act), row-major
  float* ws;                // [M, N] float32, all zero on entry (split-K only; zero again on exit)
  int* counters;            // [gridDim.z * gridDim.x] int32, all zero on entry (split-K only)
  float out_factor;         // multiplies every output (nvfp4: 2^7 * global scale; others 1)
  int M, N, K;              // logical sizes, K % 128 == 0
  int n_tiles16;            // 16-row tiles in the packed weight (N padded to 16 or 32, over 16)
  int steps;                // K / 128
  int steps_per_split;      // steps per blockIdx.y; gridDim.y = ceil(steps / steps_per_split)
  // Stream-K schedule only (gemv_body_sk; the split-K kernels ignore them): the (CTA tile along
  // N, K step) space of one M block is tiles_x * steps units; CTA blockIdx.x walks units
  // [blockIdx.x * units_per_cta, +units_per_cta) in tile-major order.
  int tiles_x;              // CTA tiles along N: ceil(n_tiles16 / (8 warps * TM))
  int units_per_cta;        // >= 1
  // Split-K only: 1 lets a CTA keep all its activation chunks resident in shared memory when they
  // fit (one barrier in all, gemv_body); 0 always alternates two chunk buffers (two per chunk).
  int act_resident;
  int act_smem;             // bytes of shared memory for the activation chunks (set by the launcher)
  // 1: launched as a programmatic dependent launch (sm_90+; the launchers read it). The kernels
  // always hold griddepcontrol.wait / .launch_dependents (no-ops in a plain launch): they fetch
  // the first K steps of their weights and scales, then wait for the kernel before them, then read
  // activations and touch out, ws and counters. So with pdl the weights and scales must not be
  // written by the kernel the GEMV follows.
  int pdl;
  // The W8A8 blockwise kernel only (gemv_w8a8_blockwise; the A16 kernels ignore them): act holds
  // e4m3 codes [M, K] and these their 1 x 128 scales, act_scales[m * sa_sm + kb * sa_sk] for token
  // m and K block kb (fp32, any strides: M-major or row-major).
  const float* act_scales;
  int sa_sm, sa_sk;
};

}  // namespace wo
}  // namespace fp8lab
