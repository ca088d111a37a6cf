// mma_blockwise_ext.cu -- the kernels behind the torch binding (no torch headers here, so nvcc only
// compiles CUDA). Instantiates every configuration of mma_blockwise_configs.h in the three main-loop
// variants with the correct per-warp weight-scale lookup, plus the two deliberately buggy lookups
// (claim A5) for the per_block variant only, and exposes one dispatch function.
#include "mma_blockwise.cuh"
#include "mma_blockwise_configs.h"

namespace fp8lab {
namespace {
using LaunchFn = cudaError_t (*)(const MmaParams&, cudaStream_t);

// kTable[config][variant][lookup]; nullptr = not instantiated (buggy lookups exist for per_block only).
#define FP8LAB_ROW(BM, BN, WM, WN, S)                                                                   \
  {{&launch_mma_blockwise<TileConfig<BM, BN, WM, WN, S>, kPerSlice, kPerWarp>, nullptr, nullptr},      \
   {&launch_mma_blockwise<TileConfig<BM, BN, WM, WN, S>, kPerBlock, kPerWarp>,                         \
    &launch_mma_blockwise<TileConfig<BM, BN, WM, WN, S>, kPerBlock, kPerCtaTile>,                      \
    &launch_mma_blockwise<TileConfig<BM, BN, WM, WN, S>, kPerBlock, kPerCtaFirstCol>},                 \
   {&launch_mma_blockwise<TileConfig<BM, BN, WM, WN, S>, kPerBlockInplace, kPerWarp>, nullptr, nullptr}},
const LaunchFn kTable[][3][3] = {FP8LAB_MMA_CONFIGS(FP8LAB_ROW)};
#undef FP8LAB_ROW
constexpr int kNumConfigs = sizeof(kTable) / sizeof(kTable[0]);
}  // namespace
}  // namespace fp8lab

// Returns cudaErrorInvalidValue for an unknown (config, variant, lookup) combination; the Python
// wrapper validates first, so that is a programming error, not a user one.
cudaError_t fp8lab_mma_blockwise_launch(int config, int variant, int lookup, const fp8lab::MmaParams& p,
                                        cudaStream_t stream) {
  if (config < 0 || config >= fp8lab::kNumConfigs || variant < 0 || variant > 2 || lookup < 0 || lookup > 2)
    return cudaErrorInvalidValue;
  const auto fn = fp8lab::kTable[config][variant][lookup];
  if (fn == nullptr) return cudaErrorInvalidValue;
  return fn(p, stream);
}

int fp8lab_mma_blockwise_num_configs() { return fp8lab::kNumConfigs; }
