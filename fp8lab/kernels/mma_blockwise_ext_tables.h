// mma_blockwise_ext_tables.h -- the torch extension's kernel tables, one per (variant, lookup)
// that is instantiated, each indexed by config id (the line of mma_blockwise_configs.h).
// Each table is defined in its own translation unit (mma_blockwise_*_ext.cu), so ninja compiles
// the 80 kernels as five parallel nvcc runs instead of one (the single TU took ~40 s of nvcc);
// the kernels and their template arguments are those the one table of mma_blockwise_ext.cu had,
// so their SASS is unchanged. mma_blockwise_ext.cu dispatches over these tables.
#pragma once

#include <cuda_runtime.h>

#include "mma_blockwise_configs.h"
#include "mma_blockwise_params.h"

namespace fp8lab {

using MmaLaunchFn = cudaError_t (*)(const MmaParams&, cudaStream_t);

#define FP8LAB_MMA_COUNT_ONE(BM, BN, WM, WN, S) +1
constexpr int kMmaNumConfigs = 0 FP8LAB_MMA_CONFIGS(FP8LAB_MMA_COUNT_ONE);
#undef FP8LAB_MMA_COUNT_ONE

extern const MmaLaunchFn kMmaPerSlice[kMmaNumConfigs];             // per_slice, per_warp lookup
extern const MmaLaunchFn kMmaPerBlock[kMmaNumConfigs];             // per_block, per_warp lookup
extern const MmaLaunchFn kMmaPerBlockCtaTile[kMmaNumConfigs];      // per_block, per_cta_tile (A5 bug)
extern const MmaLaunchFn kMmaPerBlockCtaFirstCol[kMmaNumConfigs];  // per_block, per_cta_first_col (A5 bug)
extern const MmaLaunchFn kMmaPerBlockInplace[kMmaNumConfigs];      // per_block_inplace, per_warp lookup

}  // namespace fp8lab
