// mma_blockwise_params.h -- the kernel's argument block, in a header plain C++ can include (the
// torch binding is compiled by the host compiler, not nvcc).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace fp8lab {

struct MmaParams {
  const uint8_t* a;        // [M, K] e4m3 row-major
  const float* a_scale;    // logical [M, K/128] fp32, element (m, kb) at a_scale[m*as_sm + kb*as_sk]
  long long as_sm, as_sk;  // strides of a_scale in elements (M-major: 1, M; row-major: K/128, 1)
  const uint8_t* b;        // [N, K] e4m3 row-major (K-major)
  const float* b_scale;    // logical [ceil(N/128), K/128] fp32, element (nb, kb) at b_scale[nb*bs_sn + kb*bs_sk]
  long long bs_sn, bs_sk;  // strides of b_scale in elements
  __nv_bfloat16* c;        // [M, N] bf16 row-major
  int M, N, K;             // K % 128 == 0
  int swizzle;             // launch-order group size in tile rows; 1 = off
};

}  // namespace fp8lab

// Implemented in mma_blockwise_ext.cu. variant: 0 per_slice, 1 per_block, 2 per_block_inplace;
// lookup: 0 per_warp, 1 per_cta, 2 per_cta_first_col; config: line index in mma_blockwise_configs.h.
cudaError_t fp8lab_mma_blockwise_launch(int config, int variant, int lookup, const fp8lab::MmaParams& p,
                                        cudaStream_t stream);
int fp8lab_mma_blockwise_num_configs();
