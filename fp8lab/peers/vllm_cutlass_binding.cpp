// fp8lab's binding of vLLM's CUTLASS blockwise FP8 GEMM for Hopper (cutlass_scaled_mm_blockwise_sm90_fp8),
// built from kernels-community's vllm-quantization sources (fp8lab/peers/vllm_cutlass.py): the one
// operator fp8lab's adapter calls, under a namespace of fp8lab's own (TORCH_EXTENSION_NAME, so a vLLM
// in the same process keeps its _C ops). The function is vLLM's, compiled from its unmodified source;
// the checks are the ones vLLM's cutlass_scaled_mm entry makes before it dispatches to it.
#include <torch/all.h>
#include <torch/library.h>

namespace vllm {
void cutlass_scaled_mm_blockwise_sm90_fp8(torch::Tensor& out, torch::Tensor const& a, torch::Tensor const& b,
                                          torch::Tensor const& a_scales, torch::Tensor const& b_scales);
}

// out (M, N) bf16/fp16 row-major; a (M, K) e4m3 row-major; b (K, N) e4m3 column-major (a (N, K)
// row-major weight's transpose); a_scales (M, K/128) fp32 M-major; b_scales (K/128, N/128) fp32 K-major
static void blockwise_sm90_fp8(torch::Tensor& out, torch::Tensor const& a, torch::Tensor const& b,
                               torch::Tensor const& a_scales, torch::Tensor const& b_scales) {
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && out.dim() == 2, "a, b and out must be 2-D");
  TORCH_CHECK(out.size(0) == a.size(0) && a.size(1) == b.size(0) && b.size(1) == out.size(1),
              "shapes do not multiply");
  TORCH_CHECK(a.stride(1) == 1 && out.stride(1) == 1, "a and out must be row-major");
  TORCH_CHECK(b.stride(0) == 1, "b must be column-major");
  TORCH_CHECK(a.scalar_type() == torch::kFloat8_e4m3fn && b.scalar_type() == torch::kFloat8_e4m3fn,
              "a and b must be float8_e4m3fn");
  TORCH_CHECK(a_scales.scalar_type() == torch::kFloat32 && b_scales.scalar_type() == torch::kFloat32,
              "scales must be float32");
  vllm::cutlass_scaled_mm_blockwise_sm90_fp8(out, a, b, a_scales, b_scales);
}

TORCH_LIBRARY(TORCH_EXTENSION_NAME, m) {
  m.def("blockwise_sm90_fp8(Tensor! out, Tensor a, Tensor b, Tensor a_scales, Tensor b_scales) -> ()");
}

TORCH_LIBRARY_IMPL(TORCH_EXTENSION_NAME, CUDA, m) { m.impl("blockwise_sm90_fp8", &blockwise_sm90_fp8); }
