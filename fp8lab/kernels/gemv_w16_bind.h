// gemv_w16_bind.h -- what the two torch bindings of the weight-only kernels share (gemv_w16_ext.cpp,
// gemv_w16_xalu_ext.cpp): the checks of the tensors they take and the WoParams built from them.
// Host code only. The Python wrapper (weight_only.py) validates everything first and raises
// ValueError; these checks only guard against calling an extension directly.
#pragma once

#include <cstdint>

#include "common/torch_ext.h"
#include "gemv_w16_params.h"

namespace fp8lab {
namespace wo {

// act: [M, K] contiguous (fp16 / bf16, checked by the caller); w, scales: packed int32; out: [M, N]
// contiguous; ws: float32 workspace; counters: int32. Returns M.
inline int64_t check_tensors(const torch::Tensor& act, const torch::Tensor& w, const torch::Tensor& scales,
                             const torch::Tensor& out, const torch::Tensor& ws, const torch::Tensor& counters,
                             int64_t N) {
  TORCH_CHECK(act.is_cuda() && w.is_cuda() && scales.is_cuda() && out.is_cuda() && ws.is_cuda() && counters.is_cuda(),
              "all tensors must be on a CUDA device");
  TORCH_CHECK(out.scalar_type() == act.scalar_type(), "out must have act's dtype");
  TORCH_CHECK(w.scalar_type() == at::ScalarType::Int && scales.scalar_type() == at::ScalarType::Int,
              "packed weights and scales must be int32");
  TORCH_CHECK(ws.scalar_type() == at::ScalarType::Float && counters.scalar_type() == at::ScalarType::Int,
              "workspace must be float32, counters int32");
  TORCH_CHECK(act.dim() == 2 && act.is_contiguous() && out.is_contiguous(), "act and out must be 2-D contiguous");
  const int64_t M = act.size(0), K = act.size(1);
  TORCH_CHECK(K % 128 == 0, "K must be a multiple of 128");
  TORCH_CHECK(out.numel() == M * N, "out must be [M, N]");
  TORCH_CHECK(M >= 1 && M < (1LL << 31) && N < (1LL << 31) && K < (1LL << 31), "sizes must fit in int32");
  return M;
}

inline WoParams params(const torch::Tensor& act, const torch::Tensor& w, const torch::Tensor& scales,
                       const torch::Tensor& out, const torch::Tensor& ws, const torch::Tensor& counters,
                       double out_factor, int64_t N, int64_t n_tiles16, int64_t steps_per_split,
                       bool act_resident = true, bool pdl = false) {
  WoParams p{};
  p.w = w.data_ptr();
  p.scales = reinterpret_cast<const uint32_t*>(scales.data_ptr());
  p.act = act.data_ptr();
  p.out = out.data_ptr();
  p.ws = ws.data_ptr<float>();
  p.counters = counters.data_ptr<int>();
  p.out_factor = static_cast<float>(out_factor);
  p.M = static_cast<int>(act.size(0));
  p.N = static_cast<int>(N);
  p.K = static_cast<int>(act.size(1));
  p.n_tiles16 = static_cast<int>(n_tiles16);
  p.steps = static_cast<int>(act.size(1) / 128);
  p.steps_per_split = static_cast<int>(steps_per_split);
  p.act_resident = act_resident ? 1 : 0;
  p.pdl = pdl ? 1 : 0;
  return p;
}

}  // namespace wo
}  // namespace fp8lab
