// common/torch_ext.h -- what every torch binding of fp8lab's kernels does around a launch: the
// current stream, and a TORCH_CHECK of the launcher's cudaError_t that names the kernel. Host code
// only (the bindings' .cpp files include it; no kernel does). Every build cache that hashes kernel
// sources lists this file (kernels/_build.py COMMON_HEADERS).
#pragma once

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime.h>
#include <torch/extension.h>

namespace fp8lab {
namespace ext {

// The current CUDA stream of the current device: every launch of a binding goes there.
inline cudaStream_t stream() { return at::cuda::getCurrentCUDAStream().stream(); }

// Raises (TORCH_CHECK) when a launcher returned an error: "<what> failed: <CUDA's message>".
inline void check(cudaError_t err, const char* what) {
  TORCH_CHECK(err == cudaSuccess, what, " failed: ", cudaGetErrorString(err));
}

// check(), then hand back the output tensor: a binding's last line.
inline torch::Tensor launched(cudaError_t err, const char* what, torch::Tensor out) {
  check(err, what);
  return out;
}

}  // namespace ext
}  // namespace fp8lab
