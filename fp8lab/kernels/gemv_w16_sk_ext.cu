// gemv_w16_sk_ext.cu -- the stream-K kernels (gemv_*_sk, gemv_w16.cuh) behind the torch binding:
// a translation unit of its own so the extension's build compiles it beside gemv_w16_ext.cu in
// parallel. Every format x activation type x n8-tile count (NT = 1, 2, 4, 8).
#include "gemv_w16.cuh"

namespace fp8lab {
namespace wo {
namespace {

template <int F, bool BF16>
cudaError_t dispatch_nt_sk(const WoParams& p, int ctas, cudaStream_t s) {
  const int mb = p.M < kMBlock ? p.M : kMBlock;
  if (mb <= 8) return launch_gemv_sk<F, BF16, 1>(p, ctas, s);
  if (mb <= 16) return launch_gemv_sk<F, BF16, 2>(p, ctas, s);
  if (mb <= 32) return launch_gemv_sk<F, BF16, 4>(p, ctas, s);
  return launch_gemv_sk<F, BF16, 8>(p, ctas, s);
}

}  // namespace
}  // namespace wo
}  // namespace fp8lab

// fmt: 0 fp8, 1 int8, 2 nvfp4, 3 int4; ctas: persistent CTAs per M block (>= 1). p.tiles_x and
// p.units_per_cta are filled in by the launch. cudaErrorInvalidValue for an unknown format.
cudaError_t fp8lab_gemv_w16_launch_sk(int fmt, bool bf16, const fp8lab::wo::WoParams& p, int ctas,
                                      cudaStream_t stream) {
  return fp8lab::wo::by_format(fmt, bf16, cudaErrorInvalidValue, [&](auto f, auto b) {
    return fp8lab::wo::dispatch_nt_sk<decltype(f)::value, decltype(b)::value>(p, ctas, stream);
  });
}
