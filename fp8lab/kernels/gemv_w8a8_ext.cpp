// gemv_w8a8_ext.cpp -- thin torch binding of the W8A8 blockwise decode kernels (gemv_w8a8_ext.cu,
// format kFp8A8 of gemv_w16.cuh). fp8lab/kernels/gemv_w8a8.py validates and raises ValueError;
// the TORCH_CHECKs only guard against direct calls.
#include <cstdint>

#include <cuda_runtime.h>

#include "gemv_w16_bind.h"

cudaError_t fp8lab_gemv_w8a8_launch(const fp8lab::wo::WoParams& p, int splits, cudaStream_t stream);
int fp8lab_gemv_w8a8_occupancy(int nt);

namespace {

// act: [M, K] e4m3 contiguous; act_scales: [M, K / 128] float32 (any strides); w: packed e4m3
// weights int32; scales: [n_tiles16, K / 128] float32 viewed as int32; out: [M, N] bf16;
// ws: [>= M*N] float32 zeros; counters: int32 zeros. Returns out.
torch::Tensor gemv(torch::Tensor act, torch::Tensor act_scales, torch::Tensor w, torch::Tensor scales,
                   torch::Tensor out, torch::Tensor ws, torch::Tensor counters, int64_t N, int64_t n_tiles16,
                   int64_t splits, int64_t steps_per_split, bool act_resident, bool pdl) {
  TORCH_CHECK(act.scalar_type() == at::ScalarType::Float8_e4m3fn, "act must be float8_e4m3fn");
  TORCH_CHECK(out.scalar_type() == at::ScalarType::BFloat16, "out must be bfloat16");
  TORCH_CHECK(act_scales.is_cuda() && act_scales.scalar_type() == at::ScalarType::Float && act_scales.dim() == 2 &&
                  act_scales.size(0) == act.size(0) && act_scales.size(1) == act.size(1) / 128,
              "act_scales must be a float32 [M, K / 128] CUDA tensor");
  TORCH_CHECK(act.is_cuda() && w.is_cuda() && scales.is_cuda() && out.is_cuda() && ws.is_cuda() && counters.is_cuda(),
              "all tensors must be on a CUDA device");
  TORCH_CHECK(w.scalar_type() == at::ScalarType::Int && scales.scalar_type() == at::ScalarType::Int,
              "packed weights and scales must be int32");
  TORCH_CHECK(act.dim() == 2 && act.is_contiguous() && out.is_contiguous(), "act and out must be 2-D contiguous");
  TORCH_CHECK(act.size(1) % 128 == 0, "K must be a multiple of 128");
  TORCH_CHECK(out.numel() == act.size(0) * N, "out must be [M, N]");
  TORCH_CHECK(reinterpret_cast<uintptr_t>(w.data_ptr()) % 16 == 0 && reinterpret_cast<uintptr_t>(act.data_ptr()) % 16 == 0,
              "w and act must be 16-byte aligned");
  TORCH_CHECK(splits >= 1, "splits must be >= 1");
  const c10::cuda::CUDAGuard guard(act.device());
  fp8lab::wo::WoParams p{};
  p.w = w.data_ptr();
  p.scales = reinterpret_cast<const uint32_t*>(scales.data_ptr());
  p.act = act.data_ptr();
  p.out = out.data_ptr();
  p.ws = ws.data_ptr<float>();
  p.counters = counters.data_ptr<int>();
  p.out_factor = 1.f;
  p.M = static_cast<int>(act.size(0));
  p.N = static_cast<int>(N);
  p.K = static_cast<int>(act.size(1));
  p.n_tiles16 = static_cast<int>(n_tiles16);
  p.steps = static_cast<int>(act.size(1) / 128);
  p.steps_per_split = static_cast<int>(steps_per_split);
  p.act_resident = act_resident ? 1 : 0;
  p.pdl = pdl ? 1 : 0;
  p.act_scales = act_scales.data_ptr<float>();
  p.sa_sm = static_cast<int>(act_scales.stride(0));
  p.sa_sk = static_cast<int>(act_scales.stride(1));
  return fp8lab::ext::launched(fp8lab_gemv_w8a8_launch(p, static_cast<int>(splits), fp8lab::ext::stream()),
                               "gemv_w8a8 launch", out);
}

int64_t occupancy(int64_t nt) { return fp8lab_gemv_w8a8_occupancy(static_cast<int>(nt)); }

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("gemv", &gemv, "W8A8 blockwise FP8 GEMM for decode (e4m3 x e4m3 through fp16 mma.sync, fp32 block promotion)");
  m.def("occupancy", &occupancy, "CTAs per SM of the NT kernel");
}
