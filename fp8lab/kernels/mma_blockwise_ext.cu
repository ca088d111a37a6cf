// mma_blockwise_ext.cu -- the dispatch behind the torch binding (no torch headers here, so nvcc only
// compiles CUDA). The kernels are instantiated in five tables, one translation unit each
// (mma_blockwise_*_ext.cu, declared in mma_blockwise_ext_tables.h): every configuration of
// mma_blockwise_configs.h in the three main-loop variants with the correct per-warp weight-scale
// lookup, plus the two deliberately buggy lookups (claim A5) for the per_block variant only.
#include "mma_blockwise_ext_tables.h"

namespace fp8lab {
namespace {
// kTables[variant][lookup]; nullptr = not instantiated (buggy lookups exist for per_block only).
const MmaLaunchFn* const kTables[3][3] = {
    {kMmaPerSlice, nullptr, nullptr},
    {kMmaPerBlock, kMmaPerBlockCtaTile, kMmaPerBlockCtaFirstCol},
    {kMmaPerBlockInplace, nullptr, nullptr},
};
}  // namespace
}  // namespace fp8lab

// Returns cudaErrorInvalidValue for an unknown (config, variant, lookup) combination; the Python
// wrapper validates first, so that is a programming error, not a user one.
cudaError_t fp8lab_mma_blockwise_launch(int config, int variant, int lookup, const fp8lab::MmaParams& p,
                                        cudaStream_t stream) {
  if (config < 0 || config >= fp8lab::kMmaNumConfigs || variant < 0 || variant > 2 || lookup < 0 || lookup > 2)
    return cudaErrorInvalidValue;
  const fp8lab::MmaLaunchFn* table = fp8lab::kTables[variant][lookup];
  if (table == nullptr) return cudaErrorInvalidValue;
  return table[config](p, stream);
}

int fp8lab_mma_blockwise_num_configs() { return fp8lab::kMmaNumConfigs; }
