// gemv_w16_xalu_ext.cpp -- thin torch binding of the EXTRA_ALU fp8 decode kernels
// (gemv_w16_xalu_ext.cu). fp8lab/kernels/weight_only.py validates and raises ValueError; the
// TORCH_CHECKs only guard against direct calls.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/extension.h>

#include <cstdint>

#include <cuda_runtime.h>

#include "gemv_w16_params.h"

cudaError_t fp8lab_gemv_w16_xalu_launch(int extra_alu, const fp8lab::wo::WoParams& p, int splits, uint32_t salt,
                                        cudaStream_t stream);

namespace {

// act: [M <= 8, K] bf16 contiguous; w: packed fp8 weights int32; scales: packed scales int32;
// out: [M, N] bf16; ws: [>= M*N] float32 zeros; counters: [>= ctas] int32 zeros. Returns out.
torch::Tensor gemv_xalu(torch::Tensor act, torch::Tensor w, torch::Tensor scales, torch::Tensor out, torch::Tensor ws,
                        torch::Tensor counters, double out_factor, int64_t N, int64_t n_tiles16, int64_t splits, int64_t steps_per_split,
                        int64_t extra_alu, int64_t salt) {
  TORCH_CHECK(act.is_cuda() && w.is_cuda() && scales.is_cuda() && out.is_cuda() && ws.is_cuda() && counters.is_cuda(),
              "all tensors must be on a CUDA device");
  TORCH_CHECK(act.scalar_type() == at::ScalarType::BFloat16 && out.scalar_type() == at::ScalarType::BFloat16,
              "act and out must be bfloat16");
  TORCH_CHECK(w.scalar_type() == at::ScalarType::Int && scales.scalar_type() == at::ScalarType::Int,
              "packed weights and scales must be int32");
  TORCH_CHECK(ws.scalar_type() == at::ScalarType::Float && counters.scalar_type() == at::ScalarType::Int,
              "workspace must be float32, counters int32");
  TORCH_CHECK(act.dim() == 2 && act.is_contiguous() && out.is_contiguous(), "act and out must be 2-D contiguous");
  const int64_t M = act.size(0), K = act.size(1);
  TORCH_CHECK(M >= 1 && M <= 8, "the EXTRA_ALU kernels take M <= 8");
  TORCH_CHECK(K % 128 == 0, "K must be a multiple of 128");
  TORCH_CHECK(out.numel() == M * N, "out must be [M, N]");
  const c10::cuda::CUDAGuard guard(act.device());
  fp8lab::wo::WoParams p{};
  p.w = w.data_ptr();
  p.scales = reinterpret_cast<const uint32_t*>(scales.data_ptr());
  p.act = act.data_ptr();
  p.out = out.data_ptr();
  p.ws = ws.data_ptr<float>();
  p.counters = counters.data_ptr<int>();
  p.out_factor = static_cast<float>(out_factor);
  p.M = static_cast<int>(M);
  p.N = static_cast<int>(N);
  p.K = static_cast<int>(K);
  p.n_tiles16 = static_cast<int>(n_tiles16);
  p.steps = static_cast<int>(K / 128);
  p.steps_per_split = static_cast<int>(steps_per_split);
  const cudaError_t err = fp8lab_gemv_w16_xalu_launch(static_cast<int>(extra_alu), p, static_cast<int>(splits),
                                                      static_cast<uint32_t>(salt),
                                                      at::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == cudaSuccess, "gemv_w16 xalu launch failed: ", cudaGetErrorString(err));
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("gemv_xalu", &gemv_xalu, "fp8 weight-only decode GEMV with EXTRA_ALU dependent integer ops per element");
}
