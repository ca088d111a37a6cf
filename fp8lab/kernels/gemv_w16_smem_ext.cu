// gemv_w16_smem_ext.cu -- the shared-memory-ring kernels (gemv_*_smem split-K, gemv_*_sk_smem
// stream-K; gemv_w16.cuh, issue 7) behind the torch binding: every format x activation type for
// the decode tiles NT = 1, 2 (M <= 16 per 64-token block; the wider tiles need the activation
// staging registers of 24-48 per thread and spill in the stream-K form) and ST in SMEM_STAGES.
#include "gemv_w16.cuh"

namespace fp8lab {
namespace wo {
namespace {

template <int F, bool BF16, int ST>
cudaError_t dispatch_smem(const WoParams& p, int splits, cudaStream_t s) {
  const int mb = p.M < kMBlock ? p.M : kMBlock;
  if (splits > 0) {
    if (mb <= 8) return launch_gemv_smem<F, BF16, 1, ST>(p, splits, s);
    if (mb <= 16) return launch_gemv_smem<F, BF16, 2, ST>(p, splits, s);
  } else {
    if (mb <= 8) return launch_gemv_sk_smem<F, BF16, 1, ST>(p, -splits, s);
    if (mb <= 16) return launch_gemv_sk_smem<F, BF16, 2, ST>(p, -splits, s);
  }
  return cudaErrorInvalidValue;
}

template <int F, bool BF16>
cudaError_t dispatch_st(const WoParams& p, int splits, int stages, cudaStream_t s) {
  switch (stages) {
    case 4: return dispatch_smem<F, BF16, 4>(p, splits, s);
    case 5: return dispatch_smem<F, BF16, 5>(p, splits, s);
    case 6: return dispatch_smem<F, BF16, 6>(p, splits, s);
    case 8: return dispatch_smem<F, BF16, 8>(p, splits, s);
    default: return cudaErrorInvalidValue;
  }
}

template <int F, bool BF16, int ST>
int occ_nt(int nt, bool sk) {
  if (nt == 1) return sk ? occupancy_gemv_smem<F, BF16, 1, ST, true>() : occupancy_gemv_smem<F, BF16, 1, ST, false>();
  if (nt == 2) return sk ? occupancy_gemv_smem<F, BF16, 2, ST, true>() : occupancy_gemv_smem<F, BF16, 2, ST, false>();
  return -1;
}

template <int F, bool BF16>
int occ_st(int nt, int stages, bool sk) {
  switch (stages) {
    case 4: return occ_nt<F, BF16, 4>(nt, sk);
    case 5: return occ_nt<F, BF16, 5>(nt, sk);
    case 6: return occ_nt<F, BF16, 6>(nt, sk);
    case 8: return occ_nt<F, BF16, 8>(nt, sk);
    default: return -1;
  }
}

}  // namespace
}  // namespace wo
}  // namespace fp8lab

using fp8lab::wo::kFp8;
using fp8lab::wo::kInt4;
using fp8lab::wo::kInt8;
using fp8lab::wo::kNvfp4;

// splits > 0: split-K grid; splits < 0: stream-K with -splits CTAs per M block. stages: 4, 5, 6, 8.
// cudaErrorInvalidValue for an unknown format / stage count or M block > 16 (the wrapper validates).
cudaError_t fp8lab_gemv_w16_launch_smem(int fmt, bool bf16, const fp8lab::wo::WoParams& p, int splits, int stages,
                                        cudaStream_t stream) {
  using namespace fp8lab::wo;
  switch (fmt * 2 + (bf16 ? 1 : 0)) {
    case 0: return dispatch_st<kFp8, false>(p, splits, stages, stream);
    case 1: return dispatch_st<kFp8, true>(p, splits, stages, stream);
    case 2: return dispatch_st<kInt8, false>(p, splits, stages, stream);
    case 3: return dispatch_st<kInt8, true>(p, splits, stages, stream);
    case 4: return dispatch_st<kNvfp4, false>(p, splits, stages, stream);
    case 5: return dispatch_st<kNvfp4, true>(p, splits, stages, stream);
    case 6: return dispatch_st<kInt4, false>(p, splits, stages, stream);
    case 7: return dispatch_st<kInt4, true>(p, splits, stages, stream);
    default: return cudaErrorInvalidValue;
  }
}

// CTAs per SM; -1 for an unknown combination or a failed query.
int fp8lab_gemv_w16_occupancy_smem(int fmt, bool bf16, int nt, int stages, bool sk) {
  using namespace fp8lab::wo;
  switch (fmt * 2 + (bf16 ? 1 : 0)) {
    case 0: return occ_st<kFp8, false>(nt, stages, sk);
    case 1: return occ_st<kFp8, true>(nt, stages, sk);
    case 2: return occ_st<kInt8, false>(nt, stages, sk);
    case 3: return occ_st<kInt8, true>(nt, stages, sk);
    case 4: return occ_st<kNvfp4, false>(nt, stages, sk);
    case 5: return occ_st<kNvfp4, true>(nt, stages, sk);
    case 6: return occ_st<kInt4, false>(nt, stages, sk);
    case 7: return occ_st<kInt4, true>(nt, stages, sk);
    default: return -1;
  }
}
