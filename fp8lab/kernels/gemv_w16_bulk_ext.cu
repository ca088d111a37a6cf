// gemv_w16_bulk_ext.cu -- the bulk-schedule kernels (gemv_*_bulk, gemv_w16.cuh) behind the torch
// binding: a translation unit of its own so the extension's build compiles it beside the others in
// parallel. Every format x activation type x n8-tile count (NT = 1, 2, 4, 8).
#include "gemv_w16.cuh"

// fmt: 0 fp8, 1 int8, 2 nvfp4, 3 int4; splits: the split-K grid's K splits (as
// fp8lab_gemv_w16_launch). cudaErrorInvalidValue for an unknown format.
cudaError_t fp8lab_gemv_w16_launch_bulk(int fmt, bool bf16, const fp8lab::wo::WoParams& p, int splits,
                                        cudaStream_t stream) {
  using namespace fp8lab::wo;
  return launch_for_rows(fmt, bf16, p.M, [&](auto f, auto b, auto nt) {
    return launch_gemv_bulk<decltype(f)::value, decltype(b)::value, decltype(nt)::value>(p, splits, stream);
  });
}

// CTAs of 256 threads that fit on one SM for the bulk kernel of (fmt, bf16, nt); -1 if unknown.
int fp8lab_gemv_w16_occupancy_bulk(int fmt, bool bf16, int nt) {
  using namespace fp8lab::wo;
  return by_format(fmt, bf16, -1, [&](auto f, auto b) {
    return by_nt(nt, -1, [&](auto t) {
      return occupancy_gemv_bulk<decltype(f)::value, decltype(b)::value, decltype(t)::value>();
    });
  });
}
