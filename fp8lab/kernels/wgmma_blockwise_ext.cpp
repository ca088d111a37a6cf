// wgmma_blockwise_ext.cpp -- thin torch binding of wgmma_blockwise.cu. The Python wrapper
// (wgmma_blockwise.py) validates everything and raises ValueError naming the rule; the TORCH_CHECKs
// here only guard against calling the extension directly.
#include "common/torch_ext.h"

#include "wgmma_blockwise.h"

namespace {
namespace wg = fp8lab::wgbw;

const char* status_text(wg::Status s) {
  switch (s) {
    case wg::Status::kOk: return "ok";
    case wg::Status::kBadShape: return "M, N and K must be >= 1";
    case wg::Status::kBadK: return "K must be a multiple of 128";
    case wg::Status::kBadN: return "N must be a multiple of 8";
    case wg::Status::kBadSfaLd: return "sfa_ld must be >= M and a multiple of 4";
    case wg::Status::kBadGroup: return "group_m must be >= 1";
    case wg::Status::kMisaligned: return "a, b and sfa must be 16-byte aligned, out and sfb 4-byte aligned";
    case wg::Status::kNoDriverEntryPoint: return "the driver's cuTensorMapEncodeTiled is not reachable";
    case wg::Status::kTensorMapRefused: return "the driver refused a tensor map";
    case wg::Status::kLaunchFailed: return "the launch failed";
    case wg::Status::kBadVariant: return "variant must be 0 (wait) or 1 (overlap)";
    case wg::Status::kBadTileN: return "tile_n must be 128 or 112";
  }
  return "unknown status";
}

// a: (M, K) float8_e4m3fn; sfa: (K/128, sfa_ld) float32 (M-major per-token scales); b: (N, K)
// float8_e4m3fn; sfb: (ceil(N/128), K/128) float32; out: (M, N) bfloat16; all contiguous. Returns out.
torch::Tensor run(torch::Tensor a, torch::Tensor sfa, torch::Tensor b, torch::Tensor sfb, torch::Tensor out,
                  int64_t variant, int64_t group_m, int64_t sms, int64_t tile_n) {
  const c10::cuda::CUDAGuard guard(a.device());
  for (const torch::Tensor* t : {&a, &sfa, &b, &sfb, &out}) {
    TORCH_CHECK(t->is_cuda() && t->device() == a.device(), "all tensors must be on a's CUDA device");
    TORCH_CHECK(t->dim() == 2 && t->is_contiguous(), "all tensors must be 2-D and contiguous");
  }
  TORCH_CHECK(a.scalar_type() == at::ScalarType::Float8_e4m3fn && b.scalar_type() == at::ScalarType::Float8_e4m3fn,
              "a and b must be float8_e4m3fn");
  TORCH_CHECK(sfa.scalar_type() == at::ScalarType::Float && sfb.scalar_type() == at::ScalarType::Float,
              "sfa and sfb must be float32");
  TORCH_CHECK(out.scalar_type() == at::ScalarType::BFloat16, "out must be bfloat16");
  const int64_t M = a.size(0), K = a.size(1), N = b.size(0);
  TORCH_CHECK(M < (1LL << 31) && N < (1LL << 31) && K < (1LL << 31), "sizes must fit in int32");
  TORCH_CHECK(b.size(1) == K, "b must be (N, K) with a's K");
  TORCH_CHECK(out.size(0) == M && out.size(1) == N, "out must be (M, N)");
  TORCH_CHECK(sfa.size(0) == K / 128, "sfa must be (K/128, sfa_ld)");
  TORCH_CHECK(sfb.size(0) == (N + 127) / 128 && sfb.size(1) == K / 128, "sfb must be (ceil(N/128), K/128)");
  TORCH_CHECK(sms >= 1, "sms must be >= 1");
  wg::Problem p;
  p.a = a.data_ptr();
  p.sfa = sfa.data_ptr<float>();
  p.b = b.data_ptr();
  p.sfb = sfb.data_ptr<float>();
  p.out = out.data_ptr();
  p.M = static_cast<int>(M);
  p.N = static_cast<int>(N);
  p.K = static_cast<int>(K);
  p.sfa_ld = static_cast<int>(sfa.size(1));
  p.group_m = static_cast<int>(group_m);
  p.tile_n = static_cast<int>(tile_n);
  const wg::Status s = wg::launch(p, static_cast<wg::Variant>(variant), static_cast<int>(sms), fp8lab::ext::stream());
  TORCH_CHECK(s == wg::Status::kOk, "wgmma_blockwise: ", status_text(s),
              s == wg::Status::kLaunchFailed ? ": " : "",
              s == wg::Status::kLaunchFailed ? cudaGetErrorString(wg::last_launch_error()) : "");
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("run", &run, "fp8lab's Hopper blockwise-scaled FP8 GEMM: run(a, sfa, b, sfb, out, variant, group_m, sms, tile_n)");
  m.def("shared_memory_bytes", &wg::shared_memory_bytes, "dynamic shared memory per CTA at a tile width");
  m.def("stages", [](int64_t tile_n) { return tile_n == 112 ? wg::stages_for<112>() : wg::stages_for<128>(); },
        "shared-memory pipeline stages at a tile width");
}
