// common/pdl.cuh -- programmatic dependent launch (sm_90+): the device side and the launch, shared by
// quant_act.cu and gemv_w16.cuh (issue 22).
//
// A kernel launched with the programmatic-stream-serialization attribute may start while the kernel
// before it in the stream still runs. pdl_wait (griddepcontrol.wait) blocks until that kernel has
// completed and its memory is visible; pdl_release (griddepcontrol.launch_dependents) lets the next
// such kernel start launching once every CTA of this grid has released or exited. Launched without
// the attribute, both are no-ops; before sm_90 they compile to nothing.
//
// Include it as "common/pdl.cuh" from a file in fp8lab/kernels/ (see common/ptx.cuh); every build
// cache that hashes kernel sources lists it (kernels/_build.py COMMON_HEADERS).
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace fp8lab {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_release() {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Wait for the kernel before, then let the next one launch at once.
__device__ __forceinline__ void pdl_wait_then_release() {
  pdl_wait();
  pdl_release();
}

// kernel<<<grid, block, smem, stream>>>(args...) with the programmatic-stream-serialization
// attribute (sm_90+; the callers' Python wrappers check the device).
template <typename... Params, typename... Args>
inline cudaError_t launch_with_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                                   cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attr;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace fp8lab
