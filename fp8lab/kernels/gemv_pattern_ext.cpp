// gemv_pattern_ext.cpp -- thin torch binding of the pattern kernels (gemv_pattern.cuh): the decode
// GEMV's weight and scale loads alone, on its grid and at its occupancy. fp8lab/kernels/weight_only.py
// (pattern_stream) validates and raises ValueError; the TORCH_CHECKs only guard against direct calls.
#include <cstdint>

#include <cuda_runtime.h>

#include "common/torch_ext.h"
#include "gemv_pattern_params.h"

cudaError_t fp8lab_gemv_pattern_launch(int fmt, int nt, const fp8lab::wo::PatternParams& p, int splits, int gz,
                                       int ctas_per_sm, bool step_major, int* occ, cudaStream_t stream);

namespace {

// w, scales: a packed weight's int32 arrays; sink: int32, one word per launched thread (the caller
// sizes it); splits > 0: the split-K grid (steps_per_split steps per split), < 0: stream-K with
// -splits persistent CTAs per M block; gz: M blocks; step_major: split-K only, the chunks read in a
// step-major packing's order (gemv_pattern.cuh). Returns the CTAs per SM the padded kernel has.
int64_t pattern(torch::Tensor w, torch::Tensor scales, torch::Tensor sink, int64_t fmt, int64_t nt, int64_t n_tiles16,
                int64_t steps, int64_t splits, int64_t steps_per_split, int64_t gz, int64_t ctas_per_sm, int64_t key,
                bool step_major) {
  TORCH_CHECK(w.is_cuda() && scales.is_cuda() && sink.is_cuda(), "w, scales and sink must be CUDA tensors");
  TORCH_CHECK(w.scalar_type() == at::ScalarType::Int && scales.scalar_type() == at::ScalarType::Int &&
                  sink.scalar_type() == at::ScalarType::Int,
              "w, scales and sink must be int32");
  TORCH_CHECK(reinterpret_cast<uintptr_t>(w.data_ptr()) % 16 == 0, "w must be 16-byte aligned");
  TORCH_CHECK(splits != 0 && gz >= 1 && ctas_per_sm >= 1 && steps >= 1 && n_tiles16 >= 1 && !(step_major && splits < 0),
              "bad launch geometry");
  const c10::cuda::CUDAGuard guard(w.device());
  fp8lab::wo::PatternParams p{};
  p.w = w.data_ptr();
  p.scales = reinterpret_cast<const uint32_t*>(scales.data_ptr());
  p.sink = reinterpret_cast<uint32_t*>(sink.data_ptr());
  p.key = static_cast<uint32_t>(key);
  p.n_tiles16 = static_cast<int>(n_tiles16);
  p.steps = static_cast<int>(steps);
  p.steps_per_split = static_cast<int>(steps_per_split);
  int occ = 0;
  fp8lab::ext::check(fp8lab_gemv_pattern_launch(static_cast<int>(fmt), static_cast<int>(nt), p, static_cast<int>(splits),
                                                static_cast<int>(gz), static_cast<int>(ctas_per_sm), step_major, &occ,
                                                fp8lab::ext::stream()),
                     "gemv pattern launch");
  return occ;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("pattern", &pattern, "the decode GEMV's weight and scale loads alone, on its grid and at its occupancy");
}
