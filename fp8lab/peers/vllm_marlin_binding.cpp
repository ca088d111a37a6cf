// fp8lab's binding of vLLM's Marlin GEMMs (gptq_marlin), built from kernels-community's
// vllm-quantization sources (fp8lab/peers/vllm_marlin.py): the two operators fp8lab's adapters
// call, registered under a namespace of fp8lab's own (TORCH_EXTENSION_NAME, so a vLLM in the same
// process keeps its _C ops). The functions are vLLM's, compiled from its unmodified sources; the
// schemas are theirs with plain ints (the CUDA kernels take int64_t).
#include <optional>

#include <torch/all.h>
#include <torch/library.h>

#include "core/scalar_type.hpp"

torch::Tensor gptq_marlin_gemm(
    torch::Tensor& a, std::optional<torch::Tensor> c_or_none,
    torch::Tensor& b_q_weight, torch::Tensor& b_scales,
    std::optional<torch::Tensor> const& global_scale_or_none,
    std::optional<torch::Tensor> const& b_zeros_or_none,
    std::optional<torch::Tensor> const& g_idx_or_none,
    std::optional<torch::Tensor> const& perm_or_none, torch::Tensor& workspace,
    vllm::ScalarTypeId const& b_q_type_id, int64_t size_m, int64_t size_n,
    int64_t size_k, bool is_k_full, bool use_atomic_add, bool use_fp32_reduce,
    bool is_zp_float);

torch::Tensor gptq_marlin_repack(torch::Tensor& b_q_weight, torch::Tensor& perm,
                                 int64_t size_k, int64_t size_n,
                                 int64_t num_bits);

TORCH_LIBRARY(TORCH_EXTENSION_NAME, m) {
  m.def(
      "gptq_marlin_gemm(Tensor a, Tensor? c_or_none, Tensor b_q_weight, "
      "Tensor b_scales, Tensor? global_scale, Tensor? b_zeros_or_none, Tensor? "
      "g_idx_or_none, Tensor? perm_or_none, Tensor workspace, int b_q_type, "
      "int size_m, int size_n, int size_k, bool is_k_full, "
      "bool use_atomic_add, bool use_fp32_reduce, bool is_zp_float) -> Tensor");
  m.def(
      "gptq_marlin_repack(Tensor b_q_weight, Tensor perm, int size_k, "
      "int size_n, int num_bits) -> Tensor");
}

TORCH_LIBRARY_IMPL(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("gptq_marlin_gemm", &gptq_marlin_gemm);
  m.impl("gptq_marlin_repack", &gptq_marlin_repack);
}
