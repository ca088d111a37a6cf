// cutlass_blockwise_sm90.h -- host interface of the CUTLASS Hopper blockwise-scaled FP8 GEMM
// (cutlass_blockwise_sm90.cu). Plain C++ and the CUDA runtime only: neither CUTLASS nor torch, so the
// torch binding compiles with the host compiler and the .cu compiles with nvcc alone.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace fp8lab::cutlass_sm90 {

// One GEMM: D = blockwise-scaled A @ B^T. Every pointer is device memory.
struct Problem {
  const void* a = nullptr;     // (M, K) float8_e4m3fn, row-major; 16-byte aligned
  const float* sfa = nullptr;  // (K/128, sfa_ld) fp32: per-token scale of (m, kb) at kb * sfa_ld + m; 16-byte aligned
  const void* b = nullptr;     // (N, K) float8_e4m3fn, row-major (K-major); 16-byte aligned
  const float* sfb = nullptr;  // (ceil(N/128), K/128) fp32, row-major; 4-byte aligned
  void* d = nullptr;           // (M, N) bfloat16, row-major; 16-byte aligned
  int M = 0, N = 0, K = 0;     // K % 128 == 0, N % 8 == 0, M any >= 1
  int sfa_ld = 0;              // >= M and a multiple of 4 (TMA strides are multiples of 16 bytes)
};

// Why a problem is refused; the Python wrapper raises the same rules as ValueErrors first.
enum class Status : int {
  kOk = 0,
  kBadShape = 1,        // M, N or K < 1
  kBadK = 2,            // K % 128 != 0
  kBadN = 3,            // N % 8 != 0 (bf16 D rows must be 16-byte multiples for the TMA store)
  kBadSfaLd = 4,        // sfa_ld < M or sfa_ld % 4 != 0
  kMisaligned = 5,      // a, b, d, sfa not 16-byte aligned or sfb not 4-byte aligned
  kCutlassRefused = 6,  // CUTLASS's own can_implement said no
};

struct Plan;  // a CUTLASS Gemm with its arguments (TMA descriptors) built once

}  // namespace fp8lab::cutlass_sm90

fp8lab::cutlass_sm90::Status cutlass_blockwise_sm90_check(const fp8lab::cutlass_sm90::Problem& p);
size_t cutlass_blockwise_sm90_workspace_size(const fp8lab::cutlass_sm90::Problem& p);

// One call = build arguments + launch on `stream` (host cost: a few TMA descriptor encodes).
cudaError_t cutlass_blockwise_sm90(const fp8lab::cutlass_sm90::Problem& p, void* workspace, size_t workspace_bytes,
                                   cudaStream_t stream);

// Build once, launch many times: what a prepared call (and a timing loop) wants. The plan keeps the
// problem's pointers: the buffers must outlive it.
cudaError_t cutlass_blockwise_sm90_plan_create(const fp8lab::cutlass_sm90::Problem& p, void* workspace,
                                               size_t workspace_bytes, cudaStream_t stream,
                                               fp8lab::cutlass_sm90::Plan** out);
cudaError_t cutlass_blockwise_sm90_plan_run(fp8lab::cutlass_sm90::Plan* plan, cudaStream_t stream);
void cutlass_blockwise_sm90_plan_destroy(fp8lab::cutlass_sm90::Plan* plan);

// Compile-time facts of the instantiated kernel (for the report and the tests).
int cutlass_blockwise_sm90_shared_memory_bytes();
int cutlass_blockwise_sm90_threads();
int cutlass_blockwise_sm90_stages();
