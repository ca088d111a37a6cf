// gemv_w16_xalu_ext.cpp -- thin torch binding of the EXTRA_ALU fp8 decode kernels
// (gemv_w16_xalu_ext.cu). fp8lab/kernels/weight_only.py validates and raises ValueError; the
// TORCH_CHECKs only guard against direct calls.
#include <cstdint>

#include <cuda_runtime.h>

#include "gemv_w16_bind.h"

cudaError_t fp8lab_gemv_w16_xalu_launch(int extra_alu, const fp8lab::wo::WoParams& p, int splits, uint32_t salt,
                                        cudaStream_t stream);

namespace {

// act: [M <= 8, K] bf16 contiguous; w: packed fp8 weights int32; scales: packed scales int32;
// out: [M, N] bf16; ws: [>= M*N] float32 zeros; counters: [>= ctas] int32 zeros. Returns out.
torch::Tensor gemv_xalu(torch::Tensor act, torch::Tensor w, torch::Tensor scales, torch::Tensor out, torch::Tensor ws,
                        torch::Tensor counters, double out_factor, int64_t N, int64_t n_tiles16, int64_t splits, int64_t steps_per_split,
                        int64_t extra_alu, int64_t salt) {
  TORCH_CHECK(act.scalar_type() == at::ScalarType::BFloat16, "act and out must be bfloat16");
  const int64_t M = fp8lab::wo::check_tensors(act, w, scales, out, ws, counters, N);
  TORCH_CHECK(M <= 8, "the EXTRA_ALU kernels take M <= 8");
  const c10::cuda::CUDAGuard guard(act.device());
  const fp8lab::wo::WoParams p = fp8lab::wo::params(act, w, scales, out, ws, counters, out_factor, N, n_tiles16,
                                                    steps_per_split);
  return fp8lab::ext::launched(fp8lab_gemv_w16_xalu_launch(static_cast<int>(extra_alu), p, static_cast<int>(splits),
                                                           static_cast<uint32_t>(salt), fp8lab::ext::stream()),
                               "gemv_w16 xalu launch", out);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("gemv_xalu", &gemv_xalu, "fp8 weight-only decode GEMV with EXTRA_ALU dependent integer ops per element");
}
