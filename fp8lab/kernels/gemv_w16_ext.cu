// gemv_w16_ext.cu -- the kernels behind the torch binding (no torch headers here, so nvcc only
// compiles CUDA): every format x activation type x n8-tile count (NT = 1, 2, 4, 8), the dequant
// probes, and one dispatch function each.
#include "gemv_w16.cuh"

namespace fp8lab {
namespace wo {
namespace {

template <int F, bool BF16>
cudaError_t probe(const uint32_t* words, uint32_t* out, int n, cudaStream_t s) {
  dequant_probe<F, BF16, true><<<(n + 255) / 256, 256, 0, s>>>(words, out, n);
  return cudaGetLastError();
}

}  // namespace
}  // namespace wo
}  // namespace fp8lab

// fmt: 0 fp8, 1 int8, 2 nvfp4, 3 int4; bf16: activations (and mma operands) bf16, else fp16.
// Returns cudaErrorInvalidValue for an unknown format (the Python wrapper validates first).
cudaError_t fp8lab_gemv_w16_launch(int fmt, bool bf16, const fp8lab::wo::WoParams& p, int splits,
                                   cudaStream_t stream) {
  using namespace fp8lab::wo;
  return launch_for_rows(fmt, bf16, p.M, [&](auto f, auto b, auto nt) {
    return launch_gemv<decltype(f)::value, decltype(b)::value, decltype(nt)::value>(p, splits, stream);
  });
}

// CTAs of 256 threads that fit on one SM for (fmt, bf16, nt); -1 for an unknown combination.
int fp8lab_gemv_w16_occupancy(int fmt, bool bf16, int nt) {
  using namespace fp8lab::wo;
  return by_format(fmt, bf16, -1, [&](auto f, auto b) {
    return by_nt(nt, -1, [&](auto t) {
      return occupancy_gemv<decltype(f)::value, decltype(b)::value, decltype(t)::value>();
    });
  });
}

// words: [n] uint32; out: [n * (2 or 4)] uint32.
cudaError_t fp8lab_gemv_w16_probe(int fmt, bool bf16, const uint32_t* words, uint32_t* out, int n,
                                  cudaStream_t stream) {
  return fp8lab::wo::by_format(fmt, bf16, cudaErrorInvalidValue, [&](auto f, auto b) {
    return fp8lab::wo::probe<decltype(f)::value, decltype(b)::value>(words, out, n, stream);
  });
}
