// seed001_ext.cpp -- thin torch binding of seed 001's kernels: scalar_tiled, wmma_w8a16, the three
// 1x128 activation quantisers and the weight dequantiser. The .cu files hold the kernels and their
// launchers (no torch headers there, so each compiles alone with nvcc); the Python wrappers in
// fp8lab/kernels/seed001.py and quant_act.py validate everything and raise ValueError; the
// TORCH_CHECKs here only guard against calling the extension directly.
#include <cuda_runtime.h>

#include "common/torch_ext.h"

cudaError_t fp8lab_scalar_tiled_launch(const void* a, const void* w, const float* w_scale, void* c, int M, int N,
                                       int K, int tile, int out_fp32, cudaStream_t stream);
cudaError_t fp8lab_wmma_w8a16_launch(int config, int out_fp32, const void* a, const void* w, const float* w_scale,
                                     void* c, float* partial, int M, int N, int K, int kb_per_split,
                                     cudaStream_t stream);
int fp8lab_wmma_w8a16_num_configs();
cudaError_t fp8lab_quant_act_launch(int variant, int scale_mul_recip, const void* x, void* q, float* s,
                                    long long M, int K, long long ss_m, long long ss_k, cudaStream_t stream);
cudaError_t fp8lab_dequant_w8_bf16_launch(const void* q, const float* scale, void* out, long long N, int K,
                                          int sms, cudaStream_t stream);

namespace {

void check_gemm_operands(const torch::Tensor& a, const torch::Tensor& w, const torch::Tensor& w_scale,
                         const torch::Tensor& out) {
  TORCH_CHECK(a.is_cuda() && w.is_cuda() && w_scale.is_cuda() && out.is_cuda(), "all tensors must be on CUDA");
  TORCH_CHECK(a.scalar_type() == at::ScalarType::BFloat16, "a must be bfloat16");
  TORCH_CHECK(w.scalar_type() == at::ScalarType::Float8_e4m3fn, "w must be float8_e4m3fn");
  TORCH_CHECK(w_scale.scalar_type() == at::ScalarType::Float, "w_scale must be float32");
  TORCH_CHECK(out.scalar_type() == at::ScalarType::BFloat16 || out.scalar_type() == at::ScalarType::Float,
              "out must be bfloat16 or float32");
  TORCH_CHECK(a.is_contiguous() && w.is_contiguous() && w_scale.is_contiguous() && out.is_contiguous(),
              "a, w, w_scale, out must be contiguous");
  const int64_t M = a.size(0), K = a.size(1), N = w.size(0);
  TORCH_CHECK(w.size(1) == K && K % 128 == 0, "K mismatch or K % 128 != 0");
  TORCH_CHECK(w_scale.size(0) == (N + 127) / 128 && w_scale.size(1) == K / 128, "w_scale must be (ceil(N/128), K/128)");
  TORCH_CHECK(out.size(0) == M && out.size(1) == N, "out must be (M, N)");
  TORCH_CHECK(M < (1LL << 31) && N < (1LL << 31) && K < (1LL << 31), "sizes must fit in int32");
}

// a: (M, K) bf16; w: (N, K) e4m3; w_scale: (ceil(N/128), K/128) fp32; out: (M, N) bf16 or fp32.
torch::Tensor scalar_tiled(torch::Tensor a, torch::Tensor w, torch::Tensor w_scale, torch::Tensor out, int64_t tile) {
  check_gemm_operands(a, w, w_scale, out);
  const c10::cuda::CUDAGuard guard(a.device());
  return fp8lab::ext::launched(fp8lab_scalar_tiled_launch(
      a.data_ptr(), w.data_ptr(), w_scale.data_ptr<float>(), out.data_ptr(), static_cast<int>(a.size(0)),
      static_cast<int>(w.size(0)), static_cast<int>(a.size(1)), static_cast<int>(tile),
      out.scalar_type() == at::ScalarType::Float ? 1 : 0, fp8lab::ext::stream()),
                               "scalar_tiled launch", out);
}

// As scalar_tiled, plus partial: (splits, M, N) fp32 workspace (an empty tensor when splits == 1).
torch::Tensor wmma_w8a16(torch::Tensor a, torch::Tensor w, torch::Tensor w_scale, torch::Tensor out,
                         torch::Tensor partial, int64_t config, int64_t kb_per_split) {
  check_gemm_operands(a, w, w_scale, out);
  const int64_t M = a.size(0), K = a.size(1), N = w.size(0);
  TORCH_CHECK(kb_per_split >= 1, "kb_per_split must be >= 1");
  const int64_t splits = (K / 128 + kb_per_split - 1) / kb_per_split;
  float* ws = nullptr;
  if (splits > 1) {
    TORCH_CHECK(partial.is_cuda() && partial.scalar_type() == at::ScalarType::Float && partial.is_contiguous() &&
                    partial.numel() >= splits * M * N,
                "partial must be a contiguous fp32 CUDA tensor of at least splits * M * N elements");
    ws = partial.data_ptr<float>();
  }
  const c10::cuda::CUDAGuard guard(a.device());
  return fp8lab::ext::launched(fp8lab_wmma_w8a16_launch(
      static_cast<int>(config), out.scalar_type() == at::ScalarType::Float ? 1 : 0, a.data_ptr(), w.data_ptr(),
      w_scale.data_ptr<float>(), out.data_ptr(), ws, static_cast<int>(M), static_cast<int>(N), static_cast<int>(K),
      static_cast<int>(kb_per_split), fp8lab::ext::stream()),
                               "wmma_w8a16 launch", out);
}

// x: (M, K) bf16 contiguous; q: (M, K) e4m3 contiguous; s: (M, K/128) fp32, any strides.
void quant_act(torch::Tensor x, torch::Tensor q, torch::Tensor s, int64_t variant, int64_t scale_mul_recip) {
  TORCH_CHECK(x.is_cuda() && q.is_cuda() && s.is_cuda(), "all tensors must be on CUDA");
  TORCH_CHECK(x.scalar_type() == at::ScalarType::BFloat16 && q.scalar_type() == at::ScalarType::Float8_e4m3fn &&
                  s.scalar_type() == at::ScalarType::Float,
              "x bf16, q float8_e4m3fn, s float32");
  TORCH_CHECK(x.is_contiguous() && q.is_contiguous(), "x and q must be contiguous");
  const int64_t M = x.size(0), K = x.size(1);
  TORCH_CHECK(K % 128 == 0 && q.size(0) == M && q.size(1) == K && s.size(0) == M && s.size(1) == K / 128,
              "shapes: x (M, K), q (M, K), s (M, K/128), K % 128 == 0");
  const c10::cuda::CUDAGuard guard(x.device());
  fp8lab::ext::check(fp8lab_quant_act_launch(static_cast<int>(variant), static_cast<int>(scale_mul_recip),
                                                  x.data_ptr(), q.data_ptr(), s.data_ptr<float>(), M,
                                                  static_cast<int>(K), s.stride(0), s.stride(1),
                                                  fp8lab::ext::stream()),
                     "quant_act launch");
}

// q: (N, K) e4m3; scale: (ceil(N/128), K/128) fp32; out: (N, K) bf16; all contiguous.
torch::Tensor dequant_w8_bf16(torch::Tensor q, torch::Tensor scale, torch::Tensor out) {
  TORCH_CHECK(q.is_cuda() && scale.is_cuda() && out.is_cuda(), "all tensors must be on CUDA");
  TORCH_CHECK(q.scalar_type() == at::ScalarType::Float8_e4m3fn && scale.scalar_type() == at::ScalarType::Float &&
                  out.scalar_type() == at::ScalarType::BFloat16,
              "q float8_e4m3fn, scale float32, out bfloat16");
  TORCH_CHECK(q.is_contiguous() && scale.is_contiguous() && out.is_contiguous(), "all must be contiguous");
  const int64_t N = q.size(0), K = q.size(1);
  TORCH_CHECK(K % 128 == 0 && out.size(0) == N && out.size(1) == K && scale.size(0) == (N + 127) / 128 &&
                  scale.size(1) == K / 128,
              "shapes: q (N, K), scale (ceil(N/128), K/128), out (N, K), K % 128 == 0");
  const c10::cuda::CUDAGuard guard(q.device());
  const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  return fp8lab::ext::launched(fp8lab_dequant_w8_bf16_launch(q.data_ptr(), scale.data_ptr<float>(), out.data_ptr(), N,
                                                        static_cast<int>(K), sms,
                                                        fp8lab::ext::stream()),
                               "dequant_w8_bf16 launch", out);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("scalar_tiled", &scalar_tiled, "seed 001's scalar shared-memory FP8-weight GEMM");
  m.def("wmma_w8a16", &wmma_w8a16, "seed 001's WMMA bf16 GEMM on FP8 weights, promoted per 128-K block");
  m.def("wmma_num_configs", &fp8lab_wmma_w8a16_num_configs, "configurations compiled into this extension");
  m.def("quant_act", &quant_act, "1x128 activation quantisers (naive / warp / 16t)");
  m.def("dequant_w8_bf16", &dequant_w8_bf16, "FP8 block-scaled weights -> bf16");
}
