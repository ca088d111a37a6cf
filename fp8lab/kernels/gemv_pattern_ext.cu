// gemv_pattern_ext.cu -- the pattern kernels (gemv_pattern.cuh) behind their torch binding: each
// weight format of gemv_w16.cuh (and the W8A8 kernel's kFp8A8) x n8-tile count (NT = 1, 2, 4, 8),
// split-K and stream-K. No torch headers here, so nvcc only compiles CUDA.
#include "gemv_pattern.cuh"

// fmt: 0 fp8, 1 int8, 2 nvfp4, 3 int4, 4 the W8A8 kernel's e4m3 weights; nt: the GEMV's n8-tile
// count (it sets the tiles per warp of the 4-bit formats). splits, gz, ctas_per_sm, occ: as
// launch_pattern (step_major: the split-K what-if). cudaErrorInvalidValue for an unknown format or nt.
cudaError_t fp8lab_gemv_pattern_launch(int fmt, int nt, const fp8lab::wo::PatternParams& p, int splits, int gz,
                                       int ctas_per_sm, bool step_major, int* occ, cudaStream_t stream) {
  using namespace fp8lab::wo;
  auto go = [&](auto f) {
    return by_nt(nt, cudaErrorInvalidValue, [&](auto t) {
      return launch_pattern<decltype(f)::value, decltype(t)::value>(p, splits, gz, ctas_per_sm, step_major, occ,
                                                                    stream);
    });
  };
  switch (fmt) {
    case kFp8: return go(std::integral_constant<int, kFp8>{});
    case kInt8: return go(std::integral_constant<int, kInt8>{});
    case kNvfp4: return go(std::integral_constant<int, kNvfp4>{});
    case kInt4: return go(std::integral_constant<int, kInt4>{});
    case kFp8A8: return go(std::integral_constant<int, kFp8A8>{});
    default: return cudaErrorInvalidValue;
  }
}
