// cutlass_blockwise_sm90_config.h -- the scale-factor configuration of the CUTLASS blockwise FP8 GEMM, in
// its own header so that a host-only probe (cutlass_blockwise_sm90_probe.cu) can print the exact CuTe
// layouts the kernel uses and the CPU tests can check fp8lab's scale conversion against them.
#pragma once

#include "cutlass/detail/blockwise_scale_layout.hpp"

namespace fp8lab::cutlass_sm90 {

// 1x128 per-token activation scales, 128x128 weight-block scales.
constexpr int kScaleGranularityM = 1;
constexpr int kScaleGranularityN = 128;
constexpr int kScaleGranularityK = 128;

// SFA M-major so a tile's 128 per-token scales are one contiguous TMA box; SFB K-major so the weight
// scales are the quantiser's (N/128, K/128) row-major output as is.
using ScaleConfig = cutlass::detail::Sm90BlockwiseScaleConfig<kScaleGranularityM, kScaleGranularityN,
                                                              kScaleGranularityK, cute::GMMA::Major::MN,
                                                              cute::GMMA::Major::K>;
using LayoutSFA = decltype(ScaleConfig::deduce_layoutSFA());
using LayoutSFB = decltype(ScaleConfig::deduce_layoutSFB());

// The SFA layout for a problem whose SFA buffer has leading dimension sfa_ld (>= M, a multiple of 4):
// M extent = sfa_ld, so the TMA descriptor's global stride is sfa_ld * 4 bytes.
inline LayoutSFA sfa_layout(int sfa_ld, int N, int K) {
  return ScaleConfig::tile_atom_to_shape_SFA(cute::make_shape(sfa_ld, N, K, 1));
}
inline LayoutSFB sfb_layout(int M, int N, int K) {
  return ScaleConfig::tile_atom_to_shape_SFB(cute::make_shape(M, N, K, 1));
}

}  // namespace fp8lab::cutlass_sm90
