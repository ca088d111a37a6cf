// gemv_rows_ext.cpp -- thin torch binding of the row-major decode GEMV (gemv_rows.cuh).
// fp8lab/kernels/gemv_rows.py validates and raises ValueError; the TORCH_CHECKs only guard against
// direct calls.
#include <cstdint>

#include <cuda_runtime.h>

#include "common/torch_ext.h"
#include "gemv_rows_params.h"

cudaError_t fp8lab_gemv_rows_launch(int form, int fmt, bool bf16, bool loads_only, const fp8lab::rows::RowsParams& p,
                                    cudaStream_t stream, int* occ);
cudaError_t fp8lab_gemv_rows_occupancy(int form, int fmt, bool bf16, int N, int M, int K, bool loads_only,
                                       int* ctas_per_sm);

namespace {

fp8lab::rows::RowsParams params(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& s, int64_t N,
                                int64_t K, int64_t fmt) {
  TORCH_CHECK(x.is_cuda() && w.is_cuda() && s.is_cuda(), "x, w and s must be CUDA tensors");
  TORCH_CHECK(x.scalar_type() == at::ScalarType::BFloat16 || x.scalar_type() == at::ScalarType::Half,
              "x must be bf16 or fp16");
  TORCH_CHECK(w.scalar_type() == at::ScalarType::Int && s.scalar_type() == at::ScalarType::Int, "w and s must be int32");
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous() && x.size(1) == K, "x must be a contiguous (M, K) matrix");
  TORCH_CHECK(K % 128 == 0 && K >= 128 && N >= 1, "K must be a positive multiple of 128, N positive");
  const int64_t w_bytes = fmt == 3 || fmt == 2 ? N * K / 2 : N * K;   // int4, nvfp4: two codes per byte
  const int64_t s_bytes = fmt == 2 ? N * (K / 16) : 2 * N * (K / 128);  // nvfp4: one e4m3 per 16, else 16-bit per 128
  TORCH_CHECK(w.numel() * 4 >= w_bytes && s.numel() * 4 >= s_bytes, "w or s too small for (N, K)");
  TORCH_CHECK(reinterpret_cast<uintptr_t>(w.data_ptr()) % 16 == 0 && reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0,
              "w and x must be 16-byte aligned");
  fp8lab::rows::RowsParams p{};
  p.w = reinterpret_cast<const uint8_t*>(w.data_ptr());
  p.s = reinterpret_cast<const uint16_t*>(s.data_ptr());
  p.x = x.data_ptr();
  p.N = static_cast<int>(N);
  p.K = static_cast<int>(K);
  p.M = static_cast<int>(x.size(0));
  p.out_factor = 1.f;
  return p;
}

// out = x @ W^T (W: the (N, K) row-major codes in w, group scales in s), in x's dtype.
// form: 0 the CUDA-core kernels, 1 the tensor-core ones (16 rows per CTA), 2 the tensor-core ones at 32.
torch::Tensor gemv(torch::Tensor x, torch::Tensor w, torch::Tensor s, torch::Tensor out, int64_t N, int64_t K,
                   int64_t fmt, double out_factor, int64_t form) {
  fp8lab::rows::RowsParams p = params(x, w, s, N, K, fmt);
  TORCH_CHECK(out.is_cuda() && out.scalar_type() == x.scalar_type() && out.is_contiguous() && out.dim() == 2 &&
                  out.size(0) == x.size(0) && out.size(1) == N,
              "out must be a contiguous (M, N) tensor of x's dtype");
  const c10::cuda::CUDAGuard guard(x.device());
  p.out = out.data_ptr();
  p.out_factor = static_cast<float>(out_factor);
  return fp8lab::ext::launched(fp8lab_gemv_rows_launch(static_cast<int>(form), static_cast<int>(fmt),
                                                       x.scalar_type() == at::ScalarType::BFloat16, false, p, fp8lab::ext::stream(), nullptr),
                               "gemv rows launch", out);
}

// The same launch's weight, scale and activation loads alone, at the GEMV's CTAs per SM (returned);
// sink: int32, one word per launched thread.
int64_t loads(torch::Tensor x, torch::Tensor w, torch::Tensor s, torch::Tensor sink, int64_t N, int64_t K, int64_t fmt,
           int64_t key, int64_t form) {
  fp8lab::rows::RowsParams p = params(x, w, s, N, K, fmt);
  TORCH_CHECK(sink.is_cuda() && sink.scalar_type() == at::ScalarType::Int, "sink must be an int32 CUDA tensor");
  const c10::cuda::CUDAGuard guard(x.device());
  p.sink = reinterpret_cast<uint32_t*>(sink.data_ptr());
  p.key = static_cast<uint32_t>(key);
  int occ = 0;
  fp8lab::ext::check(fp8lab_gemv_rows_launch(static_cast<int>(form), static_cast<int>(fmt),
                                             x.scalar_type() == at::ScalarType::BFloat16, true, p,
                                             fp8lab::ext::stream(), &occ),
                     "gemv rows loads launch");
  return occ;
}

// CTAs per SM of the kernel a launch of (form, fmt, N, M, K) runs (the tensor-core form's warps per
// CTA depend on the shape).
int64_t occupancy(int64_t fmt, bool bf16, int64_t N, int64_t M, int64_t K, bool loads_only, int64_t form) {
  int occ = 0;
  fp8lab::ext::check(fp8lab_gemv_rows_occupancy(static_cast<int>(form), static_cast<int>(fmt), bf16, static_cast<int>(N),
                                                static_cast<int>(M), static_cast<int>(K), loads_only, &occ),
                     "gemv rows occupancy");
  return occ;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("gemv", &gemv, "the row-major 8-bit / 4-bit decode GEMV (form 0 CUDA-core, 1 / 2 tensor-core, 3 CUDA-core 8 rows)");
  m.def("loads", &loads, "its weight, scale and activation loads alone, on its grid");
  m.def("occupancy", &occupancy, "CTAs per SM of one of its kernels");
}
