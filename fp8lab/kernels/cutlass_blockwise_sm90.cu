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
// - Epilogue: the default linear combination D = 1 * acc with a void C (no source tensor is read).
//
// Kernel configurations: one translation unit = one instantiation, chosen by the FP8LAB_CUTLASS_* macros
// below (the defaults are the original arm: cooperative 128x128x128, cluster 1x1x1, persistent
// scheduler). fp8lab/kernels/cutlass_blockwise_sm90.py holds the table of configurations and writes one
// small wrapper TU per kernel that defines the macros and includes this file, so the extension's kernels
// compile in parallel (a CUTLASS 3.x instantiation costs minutes of nvcc each). Every symbol is internal
// except fp8lab_cutlass_sm90_ops_<FP8LAB_CUTLASS_KERNEL>(), a table of function pointers the binding uses.
// Register budget (why no 128x256 or 256x128 tile): the blockwise collective keeps TWO fp32 accumulators
// per consumer warpgroup (the main one and the per-k-tile one it promotes from); a 64x128 warpgroup tile
// is 2 x 64 registers per thread, a 128x128 or 64x256 one 2 x 128 = 256 > the 232-240 setmaxnreg ceiling.
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

#ifndef FP8LAB_CUTLASS_KERNEL
#define FP8LAB_CUTLASS_KERNEL coop_128x128
#endif
#ifndef FP8LAB_CUTLASS_TILE_M
#define FP8LAB_CUTLASS_TILE_M 128
#endif
#ifndef FP8LAB_CUTLASS_TILE_N
#define FP8LAB_CUTLASS_TILE_N 128
#endif
#ifndef FP8LAB_CUTLASS_CLUSTER_M
#define FP8LAB_CUTLASS_CLUSTER_M 1
#endif
#ifndef FP8LAB_CUTLASS_CLUSTER_N
#define FP8LAB_CUTLASS_CLUSTER_N 1
#endif
// 0: cooperative (two consumer warpgroups split one tile's rows), 1: ping-pong (each consumer
// warpgroup owns a whole tile; one's epilogue overlaps the other's main loop)
#ifndef FP8LAB_CUTLASS_PINGPONG
#define FP8LAB_CUTLASS_PINGPONG 0
#endif
// 0: the persistent data-parallel tile scheduler, 1: stream-K (splits the K loop of the last wave's
// tiles over idle SMs and fixes up partial sums through the workspace: fills the GPU when tiles < SMs)
#ifndef FP8LAB_CUTLASS_STREAMK
#define FP8LAB_CUTLASS_STREAMK 0
#endif
#define FP8LAB_CAT_(a, b) a##b
#define FP8LAB_CAT(a, b) FP8LAB_CAT_(a, b)
#define FP8LAB_STR_(a) #a
#define FP8LAB_STR(a) FP8LAB_STR_(a)

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

// K tile = the scale block: one promotion per k-tile.
using TileShape = Shape<Int<FP8LAB_CUTLASS_TILE_M>, Int<FP8LAB_CUTLASS_TILE_N>, _128>;
using ClusterShape = Shape<Int<FP8LAB_CUTLASS_CLUSTER_M>, Int<FP8LAB_CUTLASS_CLUSTER_N>, _1>;

#if FP8LAB_CUTLASS_PINGPONG
using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8BlockScaledAccum;
using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;
#else
using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8BlockScaledAccum;
using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
#endif
#if FP8LAB_CUTLASS_STREAMK
using TileSchedulerTag = cutlass::gemm::StreamKScheduler;
#else
using TileSchedulerTag = void;  // GemmUniversal's default on sm90: the persistent tile scheduler
#endif
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
                                                        CollectiveMainloop, CollectiveEpilogue, TileSchedulerTag>;
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
  // Run-time scheduler options (no recompile): the order CTAs walk the tile grid and the swizzle width,
  // which decide how many CTAs in flight share an A row-panel or a B column-panel in L2.
  using Raster = cutlass::gemm::kernel::detail::RasterOrderOptions;
  args.scheduler.raster_order = p.raster == 1 ? Raster::AlongM : p.raster == 2 ? Raster::AlongN : Raster::Heuristic;
  args.scheduler.max_swizzle_size = p.swizzle;
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
  if (p.raster < 0 || p.raster > 2 || !(p.swizzle == 1 || p.swizzle == 2 || p.swizzle == 4 || p.swizzle == 8))
    return Status::kBadScheduler;
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

// A Gemm whose arguments (TMA descriptors included) are built once: run() is one kernel launch.
struct Plan {
  Gemm gemm;
  typename Gemm::Arguments args;
  void* workspace = nullptr;
};

Status check(const Problem& p) {
  const Status s = check_problem(p);
  if (s != Status::kOk) return s;
  const auto args = make_arguments(p, cutlass::KernelHardwareInfo{});
  return Gemm::can_implement(args) == cutlass::Status::kSuccess ? Status::kOk : Status::kCutlassRefused;
}

size_t workspace_size(const Problem& p) { return Gemm::get_workspace_size(make_arguments(p, current_hardware())); }

cudaError_t run(const Problem& p, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  if (check(p) != Status::kOk) return cudaErrorInvalidValue;
  const auto args = make_arguments(p, current_hardware());
  if (Gemm::get_workspace_size(args) > workspace_bytes) return cudaErrorInvalidValue;
  Gemm gemm;
  cutlass::Status s = gemm.initialize(args, workspace, stream);
  if (s == cutlass::Status::kSuccess) s = gemm.run(stream);
  return to_cuda(s);
}

cudaError_t plan_create(const Problem& p, void* workspace, size_t workspace_bytes, cudaStream_t stream,
                        void** out) {
  *out = nullptr;
  if (check(p) != Status::kOk) return cudaErrorInvalidValue;
  const auto args = make_arguments(p, current_hardware());
  if (Gemm::get_workspace_size(args) > workspace_bytes) return cudaErrorInvalidValue;
  Plan* plan = new (std::nothrow) Plan{};
  if (plan == nullptr) return cudaErrorMemoryAllocation;
  plan->args = args;
  plan->workspace = workspace;
  const cutlass::Status s = plan->gemm.initialize(args, workspace, stream);
  if (s != cutlass::Status::kSuccess) {
    delete plan;
    return to_cuda(s);
  }
  *out = plan;
  return cudaSuccess;
}

cudaError_t plan_run(void* plan, cudaStream_t stream) {
  if (plan == nullptr) return cudaErrorInvalidValue;
  Plan& pl = *static_cast<Plan*>(plan);
  if constexpr (FP8LAB_CUTLASS_STREAMK) {
    // Stream-K's fix-up counts peers in lock flags of the workspace and never clears them: zero them
    // before every launch (one memset, capturable in a CUDA graph), or the second run deadlocks.
    const cutlass::Status s = GemmKernel::initialize_workspace(pl.args, pl.workspace, stream);
    if (s != cutlass::Status::kSuccess) return to_cuda(s);
  }
  return to_cuda(pl.gemm.run(stream));
}

void plan_destroy(void* plan) { delete static_cast<Plan*>(plan); }

const KernelOps kOps{FP8LAB_STR(FP8LAB_CUTLASS_KERNEL),
                     &check,
                     &workspace_size,
                     &run,
                     &plan_create,
                     &plan_run,
                     &plan_destroy,
                     static_cast<int>(GemmKernel::SharedStorageSize),
                     static_cast<int>(GemmKernel::MaxThreadsPerBlock),
                     static_cast<int>(CollectiveMainloop::DispatchPolicy::Stages)};
}  // namespace
}  // namespace fp8lab::cutlass_sm90

// The one external symbol of this translation unit (its name carries the kernel's name).
const fp8lab::cutlass_sm90::KernelOps* FP8LAB_CAT(fp8lab_cutlass_sm90_ops_, FP8LAB_CUTLASS_KERNEL)() {
  return &fp8lab::cutlass_sm90::kOps;
}
