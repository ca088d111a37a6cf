// cutlass_blockwise_sm90_ext.cpp -- thin torch binding of the CUTLASS Hopper blockwise FP8 GEMM
// (cutlass_blockwise_sm90.cu). The Python wrapper (cutlass_blockwise_sm90.py) validates everything and
// raises ValueError naming the constraint; the TORCH_CHECKs here only guard against calling the
// extension directly. No CUTLASS header is included here: the host compiler never sees CUTLASS.
//
// The kernels linked in: cutlass_blockwise_sm90_kernels.inc, written by the Python build next to one
// wrapper TU per kernel, is an X-macro list FP8LAB_CUTLASS_KERNEL_LIST(X) with X(name) per kernel.
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/extension.h>

#include <string>
#include <vector>

#include "cutlass_blockwise_sm90.h"
#include "cutlass_blockwise_sm90_kernels.inc"

#define FP8LAB_DECLARE_OPS(name) const fp8lab::cutlass_sm90::KernelOps* fp8lab_cutlass_sm90_ops_##name();
FP8LAB_CUTLASS_KERNEL_LIST(FP8LAB_DECLARE_OPS)
#undef FP8LAB_DECLARE_OPS

namespace {
namespace cs = fp8lab::cutlass_sm90;

const std::vector<const cs::KernelOps*>& all_kernels() {
#define FP8LAB_OPS_PTR(name) fp8lab_cutlass_sm90_ops_##name(),
  static const std::vector<const cs::KernelOps*> k{FP8LAB_CUTLASS_KERNEL_LIST(FP8LAB_OPS_PTR)};
#undef FP8LAB_OPS_PTR
  return k;
}

const cs::KernelOps& kernel(const std::string& name) {
  for (const cs::KernelOps* k : all_kernels())
    if (name == k->name) return *k;
  std::string known;
  for (const cs::KernelOps* k : all_kernels()) known += std::string(known.empty() ? "" : ", ") + k->name;
  throw pybind11::value_error("cutlass_blockwise_sm90: no kernel named '" + name + "' in this build; known: " + known);
}

std::vector<std::string> kernel_names() {
  std::vector<std::string> out;
  for (const cs::KernelOps* k : all_kernels()) out.emplace_back(k->name);
  return out;
}

const char* status_text(cs::Status s) {
  switch (s) {
    case cs::Status::kOk: return "ok";
    case cs::Status::kBadShape: return "M, N and K must be >= 1";
    case cs::Status::kBadK: return "K must be a multiple of 128";
    case cs::Status::kBadN: return "N must be a multiple of 8 (16-byte bf16 rows for the TMA store)";
    case cs::Status::kBadSfaLd: return "sfa_ld must be >= M and a multiple of 4";
    case cs::Status::kMisaligned: return "a, b, out, sfa must be 16-byte aligned and sfb 4-byte aligned";
    case cs::Status::kCutlassRefused: return "CUTLASS can_implement refused the problem";
    case cs::Status::kBadScheduler: return "raster must be 0, 1 or 2 and swizzle 1, 2, 4 or 8";
  }
  return "unknown status";
}

// a: (M, K) float8_e4m3fn contiguous; sfa: (K/128, sfa_ld) float32 contiguous (M-major per-token scales,
// padded); b: (N, K) float8_e4m3fn contiguous; sfb: (ceil(N/128), K/128) float32 contiguous;
// out: (M, N) bfloat16 contiguous.
// raster: 0 heuristic, 1 along M, 2 along N; swizzle: 1, 2, 4 or 8.
cs::Problem make_problem(const cs::KernelOps& k, int64_t raster, int64_t swizzle, const torch::Tensor& a,
                         const torch::Tensor& sfa, const torch::Tensor& b, const torch::Tensor& sfb,
                         const torch::Tensor& out) {
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
  TORCH_CHECK(b.size(1) == K && K % 128 == 0, "b must be (N, K) with a's K, a multiple of 128");
  TORCH_CHECK(out.size(0) == M && out.size(1) == N, "out must be (M, N)");
  TORCH_CHECK(sfa.size(0) == K / 128 && sfa.size(1) >= M, "sfa must be (K/128, sfa_ld >= M)");
  TORCH_CHECK(sfb.size(0) == (N + 127) / 128 && sfb.size(1) == K / 128, "sfb must be (ceil(N/128), K/128)");
  cs::Problem p;
  p.a = a.data_ptr();
  p.sfa = sfa.data_ptr<float>();
  p.b = b.data_ptr();
  p.sfb = sfb.data_ptr<float>();
  p.d = out.data_ptr();
  p.M = static_cast<int>(M);
  p.N = static_cast<int>(N);
  p.K = static_cast<int>(K);
  p.sfa_ld = static_cast<int>(sfa.size(1));
  p.raster = static_cast<int>(raster);
  p.swizzle = static_cast<int>(swizzle);
  const cs::Status s = k.check(p);
  TORCH_CHECK(s == cs::Status::kOk, "cutlass_blockwise_sm90: ", status_text(s));
  return p;
}

void* workspace_ptr(const torch::Tensor& ws, size_t need) {
  TORCH_CHECK(ws.is_cuda() && ws.is_contiguous() && static_cast<size_t>(ws.nbytes()) >= need,
              "workspace must be a contiguous CUDA tensor of at least ", need, " bytes");
  return need ? ws.data_ptr() : nullptr;
}

// One call: build the CUTLASS arguments and launch on the current stream. Returns out.
torch::Tensor run(const std::string& name, int64_t raster, int64_t swizzle, torch::Tensor a, torch::Tensor sfa,
                  torch::Tensor b, torch::Tensor sfb, torch::Tensor out, torch::Tensor workspace) {
  const c10::cuda::CUDAGuard guard(a.device());
  const cs::KernelOps& k = kernel(name);
  const cs::Problem p = make_problem(k, raster, swizzle, a, sfa, b, sfb, out);
  const size_t need = k.workspace_size(p);
  const cudaError_t err = k.run(p, workspace_ptr(workspace, need), need, c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == cudaSuccess, "cutlass_blockwise_sm90 launch failed: ", cudaGetErrorString(err));
  return out;
}

int64_t workspace_size(const std::string& name, int64_t raster, int64_t swizzle, int64_t M, int64_t N, int64_t K,
                       int64_t sfa_ld) {
  cs::Problem p;
  p.raster = static_cast<int>(raster);
  p.swizzle = static_cast<int>(swizzle);
  p.M = static_cast<int>(M);
  p.N = static_cast<int>(N);
  p.K = static_cast<int>(K);
  p.sfa_ld = static_cast<int>(sfa_ld);
  return static_cast<int64_t>(kernel(name).workspace_size(p));
}

// Arguments built once (TMA descriptors hold the pointers), so run() is a single kernel launch. Holds
// references to every tensor it points into, so none is freed while the plan lives.
class Plan {
 public:
  Plan(const std::string& name, int64_t raster, int64_t swizzle, torch::Tensor a, torch::Tensor sfa, torch::Tensor b,
       torch::Tensor sfb, torch::Tensor out, torch::Tensor workspace)
      : k_(&kernel(name)), a_(a), sfa_(sfa), b_(b), sfb_(sfb), out_(out), workspace_(workspace) {
    const c10::cuda::CUDAGuard guard(a.device());
    const cs::Problem p = make_problem(*k_, raster, swizzle, a, sfa, b, sfb, out);
    const size_t need = k_->workspace_size(p);
    const cudaError_t err = k_->plan_create(p, workspace_ptr(workspace, need), need,
                                            c10::cuda::getCurrentCUDAStream().stream(), &plan_);
    TORCH_CHECK(err == cudaSuccess, "cutlass_blockwise_sm90 plan failed: ", cudaGetErrorString(err));
  }
  ~Plan() { k_->plan_destroy(plan_); }
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;

  torch::Tensor run() {
    const c10::cuda::CUDAGuard guard(a_.device());
    const cudaError_t err = k_->plan_run(plan_, c10::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == cudaSuccess, "cutlass_blockwise_sm90 launch failed: ", cudaGetErrorString(err));
    return out_;
  }

 private:
  const cs::KernelOps* k_;
  torch::Tensor a_, sfa_, b_, sfb_, out_, workspace_;
  void* plan_ = nullptr;
};

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("kernels", &kernel_names, "names of the kernel configurations compiled into this build");
  m.def("run", &run, "blockwise-scaled FP8 GEMM (CUTLASS sm90), arguments built per call: "
        "run(kernel, raster, swizzle, a, sfa, b, sfb, out, workspace)");
  m.def("workspace_size", &workspace_size, "bytes of device workspace: workspace_size(kernel, raster, swizzle, M, N, K, sfa_ld)");
  m.def("shared_memory_bytes", [](const std::string& n) { return kernel(n).shared_memory_bytes; },
        "dynamic shared memory per CTA");
  m.def("threads", [](const std::string& n) { return kernel(n).threads; }, "threads per CTA");
  m.def("stages", [](const std::string& n) { return kernel(n).stages; }, "main-loop pipeline stages");
  pybind11::class_<Plan>(m, "Plan")
      .def(pybind11::init<const std::string&, int64_t, int64_t, torch::Tensor, torch::Tensor, torch::Tensor,
                          torch::Tensor, torch::Tensor, torch::Tensor>())
      .def("run", &Plan::run, "launch on the current stream; returns out");
}
