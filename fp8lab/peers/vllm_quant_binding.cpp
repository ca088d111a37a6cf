// fp8lab's binding of vLLM's per-token-group FP8 activation quantiser (per_token_group_quant_fp8 in
// vLLM's csrc/quantization/w8a8/fp8/per_token_group_quant.cu, what vLLM's per_token_group_quant_fp8
// runs on CUDA as torch.ops._C.per_token_group_fp8_quant), built from vLLM's released source
// (fp8lab/peers/vllm_quant.py): the one operator fp8lab's adapter calls, registered through torch's
// stable ABI as vLLM registers it, with vLLM's schema, under a namespace of fp8lab's own (so a vLLM
// in the same process keeps its _C ops). The function is vLLM's, compiled from its unmodified source.
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>

#include <cstdint>

void per_token_group_quant_fp8(const torch::stable::Tensor& input, torch::stable::Tensor& output_q,
                               torch::stable::Tensor& output_s, int64_t group_size, double eps, double fp8_min,
                               double fp8_max, bool scale_ue8m0, bool dummy_is_scale_transposed,
                               bool dummy_is_tma_aligned);

// the literal name: the stable macros paste their namespace argument (TORCH_EXTENSION_NAME would not expand)
STABLE_TORCH_LIBRARY(_fp8lab_vllm_quant, m) {
  m.def(
      "per_token_group_fp8_quant(Tensor input, Tensor! output_q, Tensor! output_s, int group_size, float eps, "
      "float fp8_min, float fp8_max, bool scale_ue8m0, bool dummy_is_scale_transposed, bool dummy_is_tma_aligned"
      ") -> ()");
}

STABLE_TORCH_LIBRARY_IMPL(_fp8lab_vllm_quant, CUDA, m) {
  m.impl("per_token_group_fp8_quant", TORCH_BOX(&per_token_group_quant_fp8));
}
