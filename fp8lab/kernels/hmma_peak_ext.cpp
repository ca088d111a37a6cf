// hmma_peak_ext.cpp -- torch binding of hmma_peak.cu (the mma.sync BF16 ceiling). The Python wrapper
// (fp8lab/kernels/hmma_peak.py) validates; these checks only guard direct calls.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/extension.h>

cudaError_t fp8lab_hmma_peak_launch(const void* a, const void* b, float* out, int blocks, int n_iters,
                                    cudaStream_t stream);

namespace {
void launch(const torch::Tensor& a, const torch::Tensor& b, torch::Tensor& out, int64_t blocks, int64_t n_iters) {
  TORCH_CHECK(a.is_cuda() && b.is_cuda() && out.is_cuda(), "tensors must be on CUDA");
  TORCH_CHECK(a.scalar_type() == at::ScalarType::BFloat16 && b.scalar_type() == at::ScalarType::BFloat16,
              "a and b must be bfloat16");
  TORCH_CHECK(out.scalar_type() == at::ScalarType::Float, "out must be float32");
  TORCH_CHECK(a.numel() == 256 && b.numel() == 256 && a.is_contiguous() && b.is_contiguous(), "a, b: 16x16");
  TORCH_CHECK(out.is_contiguous() && out.numel() == blocks * 8 * 4 * 256, "out: (blocks * 32, 16, 16)");
  const at::cuda::CUDAGuard guard(a.device());
  cudaError_t e = fp8lab_hmma_peak_launch(a.data_ptr(), b.data_ptr(), out.data_ptr<float>(),
                                          static_cast<int>(blocks), static_cast<int>(n_iters),
                                          at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(e == cudaSuccess, "hmma_peak launch failed: ", cudaGetErrorString(e));
}
}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("launch", &launch, "mma.sync BF16 peak kernel"); }
