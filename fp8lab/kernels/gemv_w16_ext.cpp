// gemv_w16_ext.cpp -- thin torch binding of the weight-only decode kernels (gemv_w16.cuh).
// The Python wrapper (fp8lab/kernels/weight_only.py) validates everything and raises ValueError;
// the TORCH_CHECKs here only guard against calling the extension directly.
#include <cstdint>

#include <cuda_runtime.h>

#include "gemv_w16_bind.h"

cudaError_t fp8lab_gemv_w16_launch(int fmt, bool bf16, const fp8lab::wo::WoParams& p, int splits,
                                   cudaStream_t stream);
int fp8lab_gemv_w16_occupancy(int fmt, bool bf16, int nt);
cudaError_t fp8lab_gemv_w16_launch_sk(int fmt, bool bf16, const fp8lab::wo::WoParams& p, int ctas,
                                      cudaStream_t stream);
cudaError_t fp8lab_gemv_w16_launch_bulk(int fmt, bool bf16, const fp8lab::wo::WoParams& p, int splits,
                                        cudaStream_t stream);
int fp8lab_gemv_w16_occupancy_bulk(int fmt, bool bf16, int nt);
cudaError_t fp8lab_gemv_w16_probe(int fmt, bool bf16, const uint32_t* words, uint32_t* out, int n,
                                  cudaStream_t stream);

namespace {

// act: [M, K] fp16/bf16 contiguous; w: packed weights int32 (16-byte aligned); scales: packed
// scales int32; out: [M, N] same dtype as act; ws: [>= M*N] float32 zeros; counters: [>= ctas] int32
// zeros. splits > 0: the split-K grid (gemv_body); splits < 0: the stream-K grid (gemv_body_sk) of
// -splits persistent CTAs per M block (steps_per_split unused). pdl: a programmatic dependent
// launch (sm_90+, the wrapper checks; WoParams::pdl says what it may overlap). Returns out.
torch::Tensor gemv(torch::Tensor act, torch::Tensor w, torch::Tensor scales, torch::Tensor out, torch::Tensor ws,
                   torch::Tensor counters, int64_t fmt, double out_factor, int64_t N, int64_t n_tiles16,
                   int64_t splits, int64_t steps_per_split, bool act_resident, bool pdl) {
  TORCH_CHECK(act.scalar_type() == at::ScalarType::BFloat16 || act.scalar_type() == at::ScalarType::Half,
              "act must be bfloat16 or float16");
  fp8lab::wo::check_tensors(act, w, scales, out, ws, counters, N);
  TORCH_CHECK(reinterpret_cast<uintptr_t>(w.data_ptr()) % 16 == 0 && reinterpret_cast<uintptr_t>(act.data_ptr()) % 16 == 0,
              "w and act must be 16-byte aligned");
  const c10::cuda::CUDAGuard guard(act.device());
  const fp8lab::wo::WoParams p = fp8lab::wo::params(act, w, scales, out, ws, counters, out_factor, N, n_tiles16,
                                                    steps_per_split, act_resident, pdl);
  const bool bf16 = act.scalar_type() == at::ScalarType::BFloat16;
  // splits < 0: the stream-K schedule with -splits persistent CTAs per M block
  const cudaError_t err =
      splits < 0 ? fp8lab_gemv_w16_launch_sk(static_cast<int>(fmt), bf16, p, static_cast<int>(-splits), fp8lab::ext::stream())
                 : fp8lab_gemv_w16_launch(static_cast<int>(fmt), bf16, p, static_cast<int>(splits), fp8lab::ext::stream());
  return fp8lab::ext::launched(err, "gemv_w16 launch", out);
}

// The bulk schedule (gemv_*_bulk): the split-K grid of gemv, weights and scales through each warp's
// shared-memory ring (cp.async.bulk). scales must be 16-byte aligned. Arguments as gemv (splits > 0).
torch::Tensor gemv_bulk(torch::Tensor act, torch::Tensor w, torch::Tensor scales, torch::Tensor out,
                        torch::Tensor ws, torch::Tensor counters, int64_t fmt, double out_factor, int64_t N,
                        int64_t n_tiles16, int64_t splits, int64_t steps_per_split, bool act_resident, bool pdl) {
  TORCH_CHECK(act.scalar_type() == at::ScalarType::BFloat16 || act.scalar_type() == at::ScalarType::Half,
              "act must be bfloat16 or float16");
  fp8lab::wo::check_tensors(act, w, scales, out, ws, counters, N);
  TORCH_CHECK(reinterpret_cast<uintptr_t>(w.data_ptr()) % 16 == 0 && reinterpret_cast<uintptr_t>(act.data_ptr()) % 16 == 0 &&
                  reinterpret_cast<uintptr_t>(scales.data_ptr()) % 16 == 0,
              "w, scales and act must be 16-byte aligned");
  TORCH_CHECK(splits >= 1, "splits must be >= 1");
  const c10::cuda::CUDAGuard guard(act.device());
  const fp8lab::wo::WoParams p = fp8lab::wo::params(act, w, scales, out, ws, counters, out_factor, N, n_tiles16,
                                                    steps_per_split, act_resident, pdl);
  const bool bf16 = act.scalar_type() == at::ScalarType::BFloat16;
  return fp8lab::ext::launched(fp8lab_gemv_w16_launch_bulk(static_cast<int>(fmt), bf16, p, static_cast<int>(splits),
                                                           fp8lab::ext::stream()),
                               "gemv_w16 bulk launch", out);
}

int64_t occupancy(int64_t fmt, bool bf16, int64_t nt) {
  return fp8lab_gemv_w16_occupancy(static_cast<int>(fmt), bf16, static_cast<int>(nt));
}

int64_t occupancy_bulk(int64_t fmt, bool bf16, int64_t nt) {
  return fp8lab_gemv_w16_occupancy_bulk(static_cast<int>(fmt), bf16, static_cast<int>(nt));
}

// words: [n] int32 on the GPU -> [n, 2 or 4] int32 (16-bit pairs).
torch::Tensor probe(torch::Tensor words, int64_t fmt, bool bf16) {
  TORCH_CHECK(words.is_cuda() && words.scalar_type() == at::ScalarType::Int && words.dim() == 1 && words.is_contiguous(),
              "words must be a 1-D contiguous int32 CUDA tensor");
  const int64_t n = words.size(0);
  const int64_t h = (fmt == 0 || fmt == 1) ? 2 : 4;
  auto out = torch::empty({n, h}, words.options());
  const c10::cuda::CUDAGuard guard(words.device());
  return fp8lab::ext::launched(fp8lab_gemv_w16_probe(static_cast<int>(fmt), bf16,
                                                    reinterpret_cast<const uint32_t*>(words.data_ptr()),
                                                    reinterpret_cast<uint32_t*>(out.data_ptr()), static_cast<int>(n),
                                                    fp8lab::ext::stream()),
                               "dequant probe launch", out);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("gemv", &gemv, "weight-only (A16) GEMM for decode, Marlin-style dequant in registers");
  m.def("gemv_bulk", &gemv_bulk, "the same GEMM, weights through a shared-memory ring filled by cp.async.bulk");
  m.def("occupancy", &occupancy, "CTAs per SM of one (format, bf16, NT) kernel");
  m.def("occupancy_bulk", &occupancy_bulk, "CTAs per SM of one (format, bf16, NT) bulk kernel");
  m.def("probe", &probe, "run the in-register dequant alone on packed words");
}
