// cutlass_blockwise_sm90.cu -- the `cutlass_blockwise_sm90` arm: CUTLASS 3.x's Hopper blockwise-scaled
// FP8 GEMM (TMA + warp-specialised cooperative wgmma main loop with per-128-K promotion), configured for
// DeepSeek-style W8A8 scaling: 1x128 per-token activation scales and 128x128 weight-block scales.
//
//   D[M, N] (bf16) = sum over 128-wide K blocks kb of  SFA[m, kb] * SFB[n / 128, kb] * sum_k A[m, k] * B[n, k]
//
// No torch headers: nvcc compiles this file alone (for register / SASS inspection with no GPU):
//   nvcc -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -I<cutlass include> -c cutlass_blockwise_sm90.cu
// fp8lab/kernels/cutlass_blockwise_sm90.py finds <cutlass include> (the nvidia-cutlass wheel's headers).
//
// Operand layouts the collective is instantiated for (the Python wrapper documents and converts them):
//   A    (M, K)            float_e4m3, row-major (K innermost)                    TMA
//   SFA  (sfa_ld, K/128)   fp32, M-major: element (m, kb) at kb * sfa_ld + m        TMA (128 scales per tile)
//        sfa_ld >= M and a multiple of 4, because a TMA global stride must be a multiple of 16 bytes;
//        rows m in [M, sfa_ld) are padding that only ever meets zero-filled (out-of-bounds) rows of A.
//   B    (N, K)            float_e4m3, row-major = K-major (nn.Linear.weight)     TMA
//   SFB  (ceil(N/128), K/128) fp32, row-major (K-major): element (nb, kb) at nb * (K/128) + kb
//        one scale per 128-wide N tile, so the producer warp's cp.async path loads it, not TMA
//   D    (M, N)            bfloat16, row-major                                   TMA store (N % 8 == 0)
//
// Why these choices:
// - ScaleGranularity (M, N, K) = (1, 128, 128): per-token activations, square weight blocks. With
//   K granularity 128 = the K tile and the wgmma K of 32, the "promotion interval" is 4 wgmmas: every
//   k-tile's partial sums go into a fresh fp32 accumulator that is scaled and added to the main one,
//   the accuracy fix DeepSeek-V3 describes for Hopper's ~14-bit FP8 accumulation.
// - Tile 128x128x128, cluster 1x1x1: the cooperative schedule splits the 128 rows over two consumer
//   warpgroups (64 rows each); a 1x1x1 cluster never rounds the grid up, so small-M decode shapes do
//   not launch idle CTAs (the wheel's example 67 uses 1x2x1 for large squares). One configuration only:
//   a CUTLASS 3.x instantiation costs minutes of nvcc, and the extension must build in ~2 min.
// - Epilogue: the default linear combination D = 1 * acc with a void C (no source tensor is read).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <new>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/dispatch_policy.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/kernel_hardware_info.h"
#include "cutlass/numeric_types.h"

#include "cutlass_blockwise_sm90.h"
#include "cutlass_blockwise_sm90_config.h"

// Every device pass must be sm_90a: on plain sm_90 (or any other arch) CUTLASS compiles this kernel to a
// stub that only prints an error at run time, and wgmma / setmaxnreg do not exist there.
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "cutlass_blockwise_sm90.cu must be compiled for sm_90a only (-gencode=arch=compute_90a,code=sm_90a)"
#endif

namespace fp8lab::cutlass_sm90 {
namespace {
using namespace cute;

using ElementA = cutlass::float_e4m3_t;
using ElementB = cutlass::float_e4m3_t;
using ElementD = cutlass::bfloat16_t;
using ElementC = void;  // no source operand: D = acc
using ElementAccumulator = float;
using ElementCompute = float;
using LayoutA = cutlass::layout::RowMajor;     // (M, K), K innermost
using LayoutB = cutlass::layout::ColumnMajor;  // CUTLASS's B is (K, N); column-major = our (N, K) row-major
using LayoutD = cutlass::layout::RowMajor;
using LayoutC = LayoutD;
// 16 bytes: the TMA minimum on the contiguous dimension, in elements.
constexpr int kAlignA = 128 / cutlass::sizeof_bits<ElementA>::value;  // 16 e4m3
constexpr int kAlignB = 128 / cutlass::sizeof_bits<ElementB>::value;  // 16 e4m3
constexpr int kAlignD = 128 / cutlass::sizeof_bits<ElementD>::value;  // 8 bf16
constexpr int kAlignC = kAlignD;

using TileShape = Shape<_128, _128, _128>;
using ClusterShape = Shape<_1, _1, _1>;

using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8BlockScaledAccum;
using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
using FusionOp = cutlass::epilogue::fusion::LinearCombination<ElementD, ElementCompute, ElementC, ElementCompute>;

using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, ElementAccumulator, ElementCompute, ElementC, LayoutC,
    kAlignC, ElementD, LayoutD, kAlignD, EpilogueSchedule, FusionOp>::CollectiveOp;

using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, cute::tuple<LayoutA, LayoutSFA>, kAlignA,
    ElementB, cute::tuple<LayoutB, LayoutSFB>, kAlignB, ElementAccumulator, TileShape, ClusterShape,
    // as many pipeline stages as fit beside the epilogue's shared memory
    cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
        sizeof(typename CollectiveEpilogue::SharedStorage))>,
    KernelSchedule>::CollectiveOp;

using GemmKernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>,  // (M, N, K, L)
                                                        CollectiveMainloop, CollectiveEpilogue>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;

using StrideA = typename GemmKernel::StrideA;
using StrideB = typename GemmKernel::StrideB;
using StrideC = typename GemmKernel::StrideC;
using StrideD = typename GemmKernel::StrideD;

static_assert(CollectiveMainloop::ScaleGranularityM == kScaleGranularityM &&
                  CollectiveMainloop::ScaleGranularityN == kScaleGranularityN &&
                  CollectiveMainloop::ScaleGranularityK == kScaleGranularityK,
              "the collective must see the scale granularity the Python wrapper converts for");
static_assert(CollectiveMainloop::IsTmaLoadSFA && !CollectiveMainloop::IsTmaLoadSFB,
              "SFA is expected on the TMA path (hence sfa_ld % 4 == 0) and SFB on cp.async");

// Arguments for one problem. Strides are written by hand (what cutlass/util/packed_stride.hpp does) so
// that the build needs only the wheel's include/ directory, not tools/util/include.
typename Gemm::Arguments make_arguments(const Problem& p, const cutlass::KernelHardwareInfo& hw) {
  const int64_t M = p.M, N = p.N, K = p.K;
  StrideA stride_a{};
  get<0>(stride_a) = K;  // row m of A starts K bytes after row m - 1
  get<2>(stride_a) = M * K;
  StrideB stride_b{};
  get<0>(stride_b) = K;  // B is indexed (n, k): row n of our (N, K) weight
  get<2>(stride_b) = N * K;
  StrideD stride_d{};
  get<0>(stride_d) = N;
  get<2>(stride_d) = M * N;
  StrideC stride_c = stride_d;

  // SFA's M extent is the padded leading dimension, so its TMA descriptor's global stride is
  // sfa_ld * 4 bytes (a multiple of 16) and can_implement's alignment check holds for any M.
  const LayoutSFA layout_sfa = sfa_layout(p.sfa_ld, p.N, p.K);
  const LayoutSFB layout_sfb = sfb_layout(p.M, p.N, p.K);

  typename Gemm::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGemm,
      {p.M, p.N, p.K, 1},
      {static_cast<const ElementA*>(p.a), stride_a, static_cast<const ElementB*>(p.b), stride_b, p.sfa,
       layout_sfa, p.sfb, layout_sfb},
      {{}, nullptr, stride_c, static_cast<ElementD*>(p.d), stride_d}};
  args.epilogue.thread.alpha = 1.0f;
  args.epilogue.thread.beta = 0.0f;
  args.hw_info = hw;  // sm_count > 0 sizes the persistent grid without a query per call
  return args;
}

// The current device and its SM count (the torch binding sets the device of the operands first).
cutlass::KernelHardwareInfo current_hardware() {
  cutlass::KernelHardwareInfo hw;
  if (cudaGetDevice(&hw.device_id) != cudaSuccess) hw.device_id = 0;
  hw.sm_count = cutlass::KernelHardwareInfo::query_device_multiprocessor_count(hw.device_id);
  return hw;
}

// Host-side shape rules, before CUTLASS's own can_implement (which only says "no").
Status check_problem(const Problem& p) {
  if (p.M < 1 || p.N < 1 || p.K < 1) return Status::kBadShape;
  if (p.K % 128 != 0) return Status::kBadK;
  if (p.N % kAlignD != 0) return Status::kBadN;
  if (p.sfa_ld < p.M || p.sfa_ld % 4 != 0) return Status::kBadSfaLd;
  const auto misaligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 != 0; };
  if (misaligned(p.a) || misaligned(p.b) || misaligned(p.d) || misaligned(p.sfa)) return Status::kMisaligned;
  if (reinterpret_cast<uintptr_t>(p.sfb) % 4 != 0) return Status::kMisaligned;
  return Status::kOk;
}

cudaError_t to_cuda(cutlass::Status s) {
  switch (s) {
    case cutlass::Status::kSuccess: return cudaSuccess;
    case cutlass::Status::kErrorMisalignedOperand:
    case cutlass::Status::kErrorInvalidProblem:
    case cutlass::Status::kErrorNotSupported: return cudaErrorInvalidValue;
    case cutlass::Status::kErrorWorkspaceNull: return cudaErrorInvalidDevicePointer;
    // kErrorInternal: a failed cudaFuncSetAttribute or launch, whose error CUTLASS already consumed
    default: return cudaErrorLaunchFailure;
  }
}
}  // namespace

// A Gemm whose arguments (TMA descriptors included) are built once: run() is one kernel launch.
struct Plan {
  Gemm gemm;
};
}  // namespace fp8lab::cutlass_sm90

using fp8lab::cutlass_sm90::Gemm;
using fp8lab::cutlass_sm90::Plan;
using fp8lab::cutlass_sm90::Problem;
using fp8lab::cutlass_sm90::Status;

Status cutlass_blockwise_sm90_check(const Problem& p) {
  const Status s = fp8lab::cutlass_sm90::check_problem(p);
  if (s != Status::kOk) return s;
  const auto args = fp8lab::cutlass_sm90::make_arguments(p, cutlass::KernelHardwareInfo{});
  return Gemm::can_implement(args) == cutlass::Status::kSuccess ? Status::kOk : Status::kCutlassRefused;
}

size_t cutlass_blockwise_sm90_workspace_size(const Problem& p) {
  return Gemm::get_workspace_size(fp8lab::cutlass_sm90::make_arguments(p, fp8lab::cutlass_sm90::current_hardware()));
}

cudaError_t cutlass_blockwise_sm90(const Problem& p, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  if (cutlass_blockwise_sm90_check(p) != Status::kOk) return cudaErrorInvalidValue;
  const auto args = fp8lab::cutlass_sm90::make_arguments(p, fp8lab::cutlass_sm90::current_hardware());
  if (Gemm::get_workspace_size(args) > workspace_bytes) return cudaErrorInvalidValue;
  Gemm gemm;
  cutlass::Status s = gemm.initialize(args, workspace, stream);
  if (s == cutlass::Status::kSuccess) s = gemm.run(stream);
  return fp8lab::cutlass_sm90::to_cuda(s);
}

cudaError_t cutlass_blockwise_sm90_plan_create(const Problem& p, void* workspace, size_t workspace_bytes,
                                               cudaStream_t stream, Plan** out) {
  *out = nullptr;
  if (cutlass_blockwise_sm90_check(p) != Status::kOk) return cudaErrorInvalidValue;
  const auto args = fp8lab::cutlass_sm90::make_arguments(p, fp8lab::cutlass_sm90::current_hardware());
  if (Gemm::get_workspace_size(args) > workspace_bytes) return cudaErrorInvalidValue;
  Plan* plan = new (std::nothrow) Plan{};
  if (plan == nullptr) return cudaErrorMemoryAllocation;
  const cutlass::Status s = plan->gemm.initialize(args, workspace, stream);
  if (s != cutlass::Status::kSuccess) {
    delete plan;
    return fp8lab::cutlass_sm90::to_cuda(s);
  }
  *out = plan;
  return cudaSuccess;
}

cudaError_t cutlass_blockwise_sm90_plan_run(Plan* plan, cudaStream_t stream) {
  if (plan == nullptr) return cudaErrorInvalidValue;
  return fp8lab::cutlass_sm90::to_cuda(plan->gemm.run(stream));
}

void cutlass_blockwise_sm90_plan_destroy(Plan* plan) { delete plan; }

int cutlass_blockwise_sm90_shared_memory_bytes() { return fp8lab::cutlass_sm90::GemmKernel::SharedStorageSize; }

int cutlass_blockwise_sm90_threads() { return fp8lab::cutlass_sm90::GemmKernel::MaxThreadsPerBlock; }

int cutlass_blockwise_sm90_stages() { return fp8lab::cutlass_sm90::CollectiveMainloop::DispatchPolicy::Stages; }
