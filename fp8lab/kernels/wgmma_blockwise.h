// wgmma_blockwise.h -- the host interface of wgmma_blockwise.cu (fp8lab's own Hopper blockwise-scaled
// FP8 GEMM): no CUDA headers beyond the runtime, so the torch binding compiles with the host compiler.
#pragma once

#include <cuda_runtime.h>

namespace fp8lab {
namespace wgbw {

// Shared-memory stages of (A tile, B tile, per-token scales): as many as fit 227 KB, 6 x 32.5 KB at
// tile width 128, 7 x 30.5 KB at 112.
template <int BN>
constexpr int stages_for() {
  return BN == 128 ? 6 : 7;
}
constexpr int kStages = stages_for<128>();
// Tile widths (columns of N per tile): 128 (one weight scale block per tile), or 112 (a tile may
// straddle two: fewer idle SMs in the last wave where N / 128 tiles leave one, e.g. N = 7168 at M = 1024).
constexpr int kTileWidths[2] = {128, 112};

enum class Status : int {
  kOk = 0,
  kBadShape,            // M, N, K >= 1
  kBadK,                // K % 128
  kBadN,                // N % 8
  kBadSfaLd,            // sfa_ld >= M, % 4
  kBadGroup,            // group_m >= 1
  kMisaligned,          // a, b, sfa 16 bytes; out, sfb 4 bytes
  kNoDriverEntryPoint,  // cuTensorMapEncodeTiled not reachable
  kTensorMapRefused,    // the driver refused a tensor map
  kLaunchFailed,
  kBadVariant,
  kBadTileN,            // tile_n: 128 or 112
};

// kWait: each K block's MMAs complete before its promotion (CUTLASS's and DeepGEMM's order);
// kOverlap: two temporary accumulators, block kb - 1 promoted while block kb's MMAs run.
enum class Variant : int { kWait = 0, kOverlap = 1 };

struct Problem {
  const void* a;     // (M, K) e4m3, row-major
  const float* sfa;  // (K/128, sfa_ld) fp32: per-token scales, M-major
  const void* b;     // (N, K) e4m3, row-major
  const float* sfb;  // (ceil(N/128), K/128) fp32, row-major
  void* out;         // (M, N) bf16, row-major
  int M, N, K, sfa_ld;
  int group_m;       // tile rows per group of the tile walk
  int tile_n = 128;  // columns of N per tile: 128 or 112
};

Status check(const Problem& p);
Status launch(const Problem& p, Variant v, int sms, cudaStream_t stream);
int shared_memory_bytes(int tile_n = 128);   // -1 for a tile width not built
// The CUDA error behind the last kLaunchFailed of this thread (cudaSuccess otherwise).
cudaError_t last_launch_error();

}  // namespace wgbw
}  // namespace fp8lab
