// gemv_w8a8_ext.cu -- the W8A8 blockwise decode kernels (gemv_w16.cuh, format kFp8A8): e4m3
// activations with 1 x 128 fp32 scales, e4m3 weights with 128 x 128 fp32 scales, bf16 out, NT = 1,
// 2, 4, 8. A separate extension, so the weight-only one (gemv_w16_ext) builds as before.
#include "gemv_w16.cuh"

cudaError_t fp8lab_gemv_w8a8_launch(const fp8lab::wo::WoParams& p, int splits, cudaStream_t stream) {
  using namespace fp8lab::wo;
  return by_nt(nt_for_rows(p.M), cudaErrorInvalidValue, [&](auto nt) {
    return launch_gemv<kFp8A8, true, decltype(nt)::value>(p, splits, stream);
  });
}

// CTAs of 256 threads that fit on one SM at tile count nt; -1 for an unknown nt.
int fp8lab_gemv_w8a8_occupancy(int nt) {
  using namespace fp8lab::wo;
  return by_nt(nt, -1, [&](auto t) { return occupancy_gemv<kFp8A8, true, decltype(t)::value>(); });
}
