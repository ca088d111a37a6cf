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
  int raster = 0;              // tile scheduler's CTA order: 0 heuristic, 1 along M, 2 along N
  int swizzle = 1;             // tile scheduler's max swizzle: 1, 2, 4 or 8
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
  kBadScheduler = 7,    // raster not in {0, 1, 2} or swizzle not in {1, 2, 4, 8}
};

// One compiled kernel configuration (one translation unit): what the binding calls. A plan is a CUTLASS
// Gemm with its arguments (TMA descriptors) built once; it keeps the problem's pointers, so the buffers
// must outlive it. run() = build arguments + launch (host cost: a few TMA descriptor encodes).
struct KernelOps {
  const char* name;
  Status (*check)(const Problem& p);
  size_t (*workspace_size)(const Problem& p);
  cudaError_t (*run)(const Problem& p, void* workspace, size_t workspace_bytes, cudaStream_t stream);
  cudaError_t (*plan_create)(const Problem& p, void* workspace, size_t workspace_bytes, cudaStream_t stream,
                             void** plan);
  cudaError_t (*plan_run)(void* plan, cudaStream_t stream);
  void (*plan_destroy)(void* plan);
  // compile-time facts of the instantiated kernel (for the report and the tests)
  int shared_memory_bytes;  // dynamic shared memory per CTA
  int threads;              // threads per CTA
  int stages;               // main-loop pipeline stages
};

}  // namespace fp8lab::cutlass_sm90

// Each kernel TU (cutlass_blockwise_sm90.cu compiled with FP8LAB_CUTLASS_KERNEL=<name>) defines
//   const fp8lab::cutlass_sm90::KernelOps* fp8lab_cutlass_sm90_ops_<name>();
// the binding declares the ones it links from the kernel list the Python build writes.
