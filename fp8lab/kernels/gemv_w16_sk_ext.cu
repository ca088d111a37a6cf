// gemv_w16_sk_ext.cu -- the stream-K kernels (gemv_*_sk, gemv_w16.cuh) behind the torch binding:
// a translation unit of its own so the extension's build compiles it beside gemv_w16_ext.cu in
// parallel. Every format x activation type x n8-tile count (NT = 1, 2, 4, 8).
#include "gemv_w16.cuh"

// fmt: 0 fp8, 1 int8, 2 nvfp4, 3 int4; ctas: persistent CTAs per M block (>= 1). p.tiles_x and
// p.units_per_cta are filled in by the launch. cudaErrorInvalidValue for an unknown format.
cudaError_t fp8lab_gemv_w16_launch_sk(int fmt, bool bf16, const fp8lab::wo::WoParams& p, int ctas,
                                      cudaStream_t stream) {
  using namespace fp8lab::wo;
  return launch_for_rows(fmt, bf16, p.M, [&](auto f, auto b, auto nt) {
    return launch_gemv_sk<decltype(f)::value, decltype(b)::value, decltype(nt)::value>(p, ctas, stream);
  });
}
