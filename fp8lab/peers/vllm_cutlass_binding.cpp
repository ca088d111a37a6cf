// fp8lab's binding of vLLM's CUTLASS blockwise FP8 GEMM for Hopper (cutlass_scaled_mm_blockwise_sm90_fp8,
// what vLLM's cutlass_scaled_mm dispatches to on sm_90 for 1x128 activation and 128x128 weight scales),
// built from vLLM's released source (fp8lab/peers/vllm_cutlass.py): the one operator fp8lab's adapter
// calls, registered through torch's stable ABI as vLLM registers its ops, under a namespace of fp8lab's
// own (so a vLLM in the same process keeps its _C ops). The function is vLLM's, compiled from its
// unmodified source; the layouts vLLM's cutlass_scaled_mm entry checks are checked by the adapter.
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>

namespace vllm {
void cutlass_scaled_mm_blockwise_sm90_fp8(torch::stable::Tensor& out, torch::stable::Tensor const& a,
                                          torch::stable::Tensor const& b, torch::stable::Tensor const& a_scales,
                                          torch::stable::Tensor const& b_scales);
}

// out (M, N) bf16/fp16 row-major; a (M, K) e4m3 row-major; b (K, N) e4m3 column-major (an (N, K)
// row-major weight's transpose); a_scales (M, K/128) fp32 M-major; b_scales (K/128, N/128) fp32 K-major.
// The literal namespace: the stable macros paste their argument (TORCH_EXTENSION_NAME would not expand).
STABLE_TORCH_LIBRARY(_fp8lab_vllm_cutlass, m) {
  m.def("blockwise_sm90_fp8(Tensor! out, Tensor a, Tensor b, Tensor a_scales, Tensor b_scales) -> ()");
}

STABLE_TORCH_LIBRARY_IMPL(_fp8lab_vllm_cutlass, CUDA, m) {
  m.impl("blockwise_sm90_fp8", TORCH_BOX(&vllm::cutlass_scaled_mm_blockwise_sm90_fp8));
}
