// gemv_w16_ext.cpp -- thin torch binding of the weight-only decode kernels (gemv_w16.cuh).
// The Python wrapper (fp8lab/kernels/weight_only.py) validates everything and raises ValueError;
// the TORCH_CHECKs here only guard against calling the extension directly.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/extension.h>

#include <cstdint>

#include <cuda_runtime.h>

#include "gemv_w16_params.h"

cudaError_t fp8lab_gemv_w16_launch(int fmt, bool bf16, const fp8lab::wo::WoParams& p, int splits,
                                   cudaStream_t stream);
int fp8lab_gemv_w16_occupancy(int fmt, bool bf16, int nt);
cudaError_t fp8lab_gemv_w16_launch_sk(int fmt, bool bf16, const fp8lab::wo::WoParams& p, int ctas,
                                      cudaStream_t stream);
cudaError_t fp8lab_gemv_w16_probe(int fmt, bool bf16, const uint32_t* words, uint32_t* out, int n,
                                  cudaStream_t stream);

namespace {

// act: [M, K] fp16/bf16 contiguous; w: packed weights int32 (16-byte aligned); scales: packed
// scales int32; out: [M, N] same dtype as act; ws: [>= M*N] float32 zeros; counters: [>= ctas] int32
// zeros. splits > 0: the split-K grid (gemv_body); splits < 0: the stream-K grid (gemv_body_sk) of
// -splits persistent CTAs per M block (steps_per_split unused). Returns out.
torch::Tensor gemv(torch::Tensor act, torch::Tensor w, torch::Tensor scales, torch::Tensor out, torch::Tensor ws,
                   torch::Tensor counters, int64_t fmt, double out_factor, int64_t N, int64_t n_tiles16,
                   int64_t splits, int64_t steps_per_split) {
  TORCH_CHECK(act.is_cuda() && w.is_cuda() && scales.is_cuda() && out.is_cuda() && ws.is_cuda() && counters.is_cuda(),
              "all tensors must be on a CUDA device");
  TORCH_CHECK(act.scalar_type() == at::ScalarType::BFloat16 || act.scalar_type() == at::ScalarType::Half,
              "act must be bfloat16 or float16");
  TORCH_CHECK(out.scalar_type() == act.scalar_type(), "out must have act's dtype");
  TORCH_CHECK(w.scalar_type() == at::ScalarType::Int && scales.scalar_type() == at::ScalarType::Int,
              "packed weights and scales must be int32");
  TORCH_CHECK(ws.scalar_type() == at::ScalarType::Float && counters.scalar_type() == at::ScalarType::Int,
              "workspace must be float32, counters int32");
  TORCH_CHECK(act.dim() == 2 && act.is_contiguous() && out.is_contiguous(), "act and out must be 2-D contiguous");
  const int64_t M = act.size(0), K = act.size(1);
  TORCH_CHECK(K % 128 == 0, "K must be a multiple of 128");
  TORCH_CHECK(out.numel() == M * N, "out must be [M, N]");
  TORCH_CHECK(M >= 1 && M < (1LL << 31) && N < (1LL << 31) && K < (1LL << 31), "sizes must fit in int32");
  TORCH_CHECK(reinterpret_cast<uintptr_t>(w.data_ptr()) % 16 == 0 && reinterpret_cast<uintptr_t>(act.data_ptr()) % 16 == 0,
              "w and act must be 16-byte aligned");

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
  const bool bf16 = act.scalar_type() == at::ScalarType::BFloat16;
  // splits < 0: the stream-K schedule with -splits persistent CTAs per M block
  const cudaError_t err =
      splits < 0 ? fp8lab_gemv_w16_launch_sk(static_cast<int>(fmt), bf16, p, static_cast<int>(-splits),
                                             at::cuda::getCurrentCUDAStream().stream())
                 : fp8lab_gemv_w16_launch(static_cast<int>(fmt), bf16, p, static_cast<int>(splits),
                                          at::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == cudaSuccess, "gemv_w16 launch failed: ", cudaGetErrorString(err));
  return out;
}

int64_t occupancy(int64_t fmt, bool bf16, int64_t nt) {
  return fp8lab_gemv_w16_occupancy(static_cast<int>(fmt), bf16, static_cast<int>(nt));
}

// words: [n] int32 on the GPU -> [n, 2 or 4] int32 (16-bit pairs).
torch::Tensor probe(torch::Tensor words, int64_t fmt, bool bf16) {
  TORCH_CHECK(words.is_cuda() && words.scalar_type() == at::ScalarType::Int && words.dim() == 1 && words.is_contiguous(),
              "words must be a 1-D contiguous int32 CUDA tensor");
  const int64_t n = words.size(0);
  const int64_t h = (fmt == 0 || fmt == 1) ? 2 : 4;
  auto out = torch::empty({n, h}, words.options());
  const c10::cuda::CUDAGuard guard(words.device());
  const cudaError_t err = fp8lab_gemv_w16_probe(static_cast<int>(fmt), bf16,
                                                reinterpret_cast<const uint32_t*>(words.data_ptr()),
                                                reinterpret_cast<uint32_t*>(out.data_ptr()), static_cast<int>(n),
                                                at::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == cudaSuccess, "dequant probe launch failed: ", cudaGetErrorString(err));
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("gemv", &gemv, "weight-only (A16) GEMM for decode, Marlin-style dequant in registers");
  m.def("occupancy", &occupancy, "CTAs per SM of one (format, bf16, NT) kernel");
  m.def("probe", &probe, "run the in-register dequant alone on packed words");
}
