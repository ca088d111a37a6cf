// mma_blockwise.cu -- standalone translation unit for register / spill / SASS inspection.
//
// nvcc compiles this file alone, no torch, no GPU:
//   nvcc -cubin -arch=sm_89 -O3 -Xptxas -v -I fp8lab/kernels \
//        -DFP8LAB_BM=64 -DFP8LAB_BN=128 -DFP8LAB_WM=64 -DFP8LAB_WN=64 -DFP8LAB_STAGES=3 \
//        -DFP8LAB_VARIANT=0 -DFP8LAB_SCALE_LOOKUP=0 fp8lab/kernels/mma_blockwise.cu -o k.cubin
// FP8LAB_VARIANT: 0 per_slice, 1 per_block, 2 per_block_inplace (see mma_blockwise.cuh).
// FP8LAB_SCALE_LOOKUP: 0 per_warp (correct), 1 per_cta (bug: tile index), 2 per_cta_first_col (bug).
// Exactly one kernel is instantiated per compile, so ptxas -v reports one function and the compile
// grid (fp8lab/experiments/compile_grid.py) parallelises over kernels. Without -D flags it instantiates the
// seed's configuration (64x128x128 tile, 64x64 warp tile, 3 stages) in all three variants.
#include "mma_blockwise.cuh"

#ifndef FP8LAB_SCALE_LOOKUP
#define FP8LAB_SCALE_LOOKUP 0
#endif

#if defined(FP8LAB_BM) || defined(FP8LAB_BN) || defined(FP8LAB_WM) || defined(FP8LAB_WN) || \
    defined(FP8LAB_STAGES) || defined(FP8LAB_VARIANT)
#if !(defined(FP8LAB_BM) && defined(FP8LAB_BN) && defined(FP8LAB_WM) && defined(FP8LAB_WN) && \
      defined(FP8LAB_STAGES) && defined(FP8LAB_VARIANT))
#error "define all of FP8LAB_BM, FP8LAB_BN, FP8LAB_WM, FP8LAB_WN, FP8LAB_STAGES, FP8LAB_VARIANT (or none)"
#endif
template __global__ void fp8lab::mma_blockwise_kernel<
    fp8lab::TileConfig<FP8LAB_BM, FP8LAB_BN, FP8LAB_WM, FP8LAB_WN, FP8LAB_STAGES>, FP8LAB_VARIANT,
    FP8LAB_SCALE_LOOKUP>(const fp8lab::MmaParams);
#else
using SeedConfig = fp8lab::TileConfig<64, 128, 64, 64, 3>;
template __global__ void fp8lab::mma_blockwise_kernel<SeedConfig, fp8lab::kPerSlice, FP8LAB_SCALE_LOOKUP>(
    const fp8lab::MmaParams);
template __global__ void fp8lab::mma_blockwise_kernel<SeedConfig, fp8lab::kPerBlock, FP8LAB_SCALE_LOOKUP>(
    const fp8lab::MmaParams);
template __global__ void fp8lab::mma_blockwise_kernel<SeedConfig, fp8lab::kPerBlockInplace,
                                                      FP8LAB_SCALE_LOOKUP>(const fp8lab::MmaParams);
#endif
