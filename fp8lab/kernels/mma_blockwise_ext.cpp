// mma_blockwise_ext.cpp -- thin torch binding of the blockwise FP8 mma kernels.
// The Python wrapper (fp8lab/kernels/mma_blockwise.py) validates everything and raises ValueError;
// the TORCH_CHECKs here only guard against calling the extension directly.
#include "common/torch_ext.h"

#include "mma_blockwise_params.h"

namespace {

// a: [M, K] float8_e4m3fn contiguous; a_scale: [M, K/128] float32 (any strides);
// b: [N, K] float8_e4m3fn contiguous; b_scale: [ceil(N/128), K/128] float32 (any strides);
// out: [M, N] bfloat16 contiguous. Returns out.
torch::Tensor mma_blockwise(torch::Tensor a, torch::Tensor a_scale, torch::Tensor b, torch::Tensor b_scale,
                            torch::Tensor out, int64_t config, int64_t variant, int64_t lookup, int64_t swizzle) {
  TORCH_CHECK(a.is_cuda() && b.is_cuda() && a_scale.is_cuda() && b_scale.is_cuda() && out.is_cuda(),
              "all tensors must be on a CUDA device");
  TORCH_CHECK(a.scalar_type() == at::ScalarType::Float8_e4m3fn && b.scalar_type() == at::ScalarType::Float8_e4m3fn,
              "a and b must be float8_e4m3fn");
  TORCH_CHECK(a_scale.scalar_type() == at::ScalarType::Float && b_scale.scalar_type() == at::ScalarType::Float, "scales must be float32");
  TORCH_CHECK(out.scalar_type() == at::ScalarType::BFloat16, "out must be bfloat16");
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.is_contiguous() && b.is_contiguous() && out.is_contiguous(),
              "a, b, out must be 2-D and contiguous");
  const int64_t M = a.size(0), K = a.size(1), N = b.size(0);
  TORCH_CHECK(b.size(1) == K && K % 128 == 0, "K mismatch or K % 128 != 0");
  TORCH_CHECK(out.size(0) == M && out.size(1) == N, "out must be [M, N]");
  TORCH_CHECK(a_scale.dim() == 2 && a_scale.size(0) == M && a_scale.size(1) == K / 128, "a_scale must be [M, K/128]");
  TORCH_CHECK(b_scale.dim() == 2 && b_scale.size(0) == (N + 127) / 128 && b_scale.size(1) == K / 128,
              "b_scale must be [ceil(N/128), K/128]");
  TORCH_CHECK(M < (1LL << 31) && N < (1LL << 31) && K < (1LL << 31), "sizes must fit in int32");

  const c10::cuda::CUDAGuard guard(a.device());
  fp8lab::MmaParams p{};
  p.a = reinterpret_cast<const uint8_t*>(a.data_ptr());
  p.a_scale = a_scale.data_ptr<float>();
  p.as_sm = a_scale.stride(0);
  p.as_sk = a_scale.stride(1);
  p.b = reinterpret_cast<const uint8_t*>(b.data_ptr());
  p.b_scale = b_scale.data_ptr<float>();
  p.bs_sn = b_scale.stride(0);
  p.bs_sk = b_scale.stride(1);
  p.c = reinterpret_cast<__nv_bfloat16*>(out.data_ptr());
  p.M = static_cast<int>(M);
  p.N = static_cast<int>(N);
  p.K = static_cast<int>(K);
  p.swizzle = static_cast<int>(swizzle);
  return fp8lab::ext::launched(fp8lab_mma_blockwise_launch(static_cast<int>(config), static_cast<int>(variant),
                                                      static_cast<int>(lookup), p,
                                                      fp8lab::ext::stream()),
                               "mma_blockwise launch", out);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("mma_blockwise", &mma_blockwise, "blockwise-scaled FP8 GEMM (mma.sync m16n8k32 e4m3)");
  m.def("num_configs", &fp8lab_mma_blockwise_num_configs, "configurations compiled into this extension");
}
