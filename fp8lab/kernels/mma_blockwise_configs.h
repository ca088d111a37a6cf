// mma_blockwise_configs.h -- THE list of tile configurations of the blockwise FP8 mma kernel.
// One line per configuration: X(BM, BN, WM, WN, STAGES); BK is always 128 (one scale block).
// Read by the torch extension (each table TU, mma_blockwise_*_ext.cu, instantiates every line) and
// parsed by fp8lab/kernels/mma_blockwise.py (the compile grid, the wrapper's config names), so the C++
// and Python sides cannot drift. Order matters: the index of a line is its config id.
// Every line must fit sm_89's 99 KB opt-in shared memory: STAGES * (BM + BN) * 128 bytes <= 101376.
#pragma once
#define FP8LAB_MMA_CONFIGS(X)                                                                      \
  /* decode: few rows, narrow tiles, so that enough CTAs exist at M = 1..64 */                   \
  X(16, 64, 16, 32, 4)    /*  2 warps, 40 KB */                                                  \
  X(16, 128, 16, 32, 4)   /*  4 warps, 72 KB */                                                  \
  X(16, 128, 16, 64, 4)   /*  2 warps, 72 KB */                                                  \
  X(32, 64, 32, 32, 4)    /*  2 warps, 48 KB */                                                  \
  X(32, 128, 32, 32, 4)   /*  4 warps, 80 KB */                                                  \
  X(32, 128, 32, 64, 3)   /*  2 warps, 60 KB */                                                  \
  /* middle */                                                                                   \
  X(64, 64, 32, 32, 4)    /*  4 warps, 64 KB */                                                  \
  X(64, 128, 64, 64, 3)   /*  2 warps, 72 KB: the seed's configuration (64x128x128 / 64x64x128) */ \
  X(64, 128, 32, 64, 3)   /*  4 warps, 72 KB */                                                  \
  X(64, 128, 32, 64, 4)   /*  4 warps, 96 KB */                                                  \
  X(64, 256, 64, 64, 2)   /*  4 warps, 80 KB */                                                  \
  /* prefill: big tiles for reuse */                                                             \
  X(128, 64, 64, 32, 4)   /*  4 warps, 96 KB */                                                  \
  X(128, 128, 64, 64, 3)  /*  4 warps, 96 KB */                                                  \
  X(128, 128, 64, 32, 3)  /*  8 warps, 96 KB */                                                  \
  X(128, 256, 64, 64, 2)  /*  8 warps, 96 KB */                                                  \
  X(256, 128, 64, 64, 2)  /*  8 warps, 96 KB */
