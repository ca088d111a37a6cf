// cutlass_blockwise_sm90_probe.cu -- host-only program: prints the CuTe scale-factor layouts the CUTLASS
// blockwise GEMM builds (cutlass_blockwise_sm90_config.h, the header the kernel itself uses), so a CPU
// test can check fp8lab's numpy model of them without a GPU. No device code; ~10 s of nvcc.
//
// Usage: probe M N K   ->  prints, one per line,
//   SFA <cute layout>        e.g. ((_1,8),(_128,3),1):((_0,_1),(_0,8),24)
//   SFB <cute layout>
//   SFA_OFFSETS <o(0,0) o(0,1) ... o(M-1,K-1)>   offset of every (m, k), row-major over (m, k)
//   SFB_OFFSETS <o(0,0) ... o(N-1,K-1)>
#include <cstdio>
#include <cstdlib>

#include "cutlass_blockwise_sm90_config.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s M N K\n", argv[0]);
    return 2;
  }
  const int M = std::atoi(argv[1]), N = std::atoi(argv[2]), K = std::atoi(argv[3]);
  const int sfa_ld = (M + 3) / 4 * 4;  // the wrapper's padded leading dimension
  const auto sfa = fp8lab::cutlass_sm90::sfa_layout(sfa_ld, N, K);
  const auto sfb = fp8lab::cutlass_sm90::sfb_layout(M, N, K);
  std::printf("SFA ");
  cute::print(sfa);
  std::printf("\nSFB ");
  cute::print(sfb);
  std::printf("\nSFA_OFFSETS");
  for (int m = 0; m < M; ++m)
    for (int k = 0; k < K; ++k) std::printf(" %d", static_cast<int>(sfa(cute::make_coord(m, k, 0))));
  std::printf("\nSFB_OFFSETS");
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k) std::printf(" %d", static_cast<int>(sfb(cute::make_coord(n, k, 0))));
  std::printf("\n");
  return 0;
}
