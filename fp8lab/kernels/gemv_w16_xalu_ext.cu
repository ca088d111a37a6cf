// gemv_w16_xalu_ext.cu -- the EXTRA_ALU variants of the fp8 decode kernel (notebook 10's compute-
// headroom sweep): bf16, NT = 1, k = 0, 1, 2, 4, 8, 16 extra dependent integer instructions per
// weight element. A separate extension so the main one (gemv_w16_ext) builds as before.
#include "gemv_w16.cuh"

// extra_alu: one of 0, 1, 2, 4, 8, 16 (else cudaErrorInvalidValue; the Python wrapper validates
// first); salt: 0 (the chain's opaque operand); p.M <= 8 (the NT = 1 tile).
cudaError_t fp8lab_gemv_w16_xalu_launch(int extra_alu, const fp8lab::wo::WoParams& p, int splits, uint32_t salt,
                                        cudaStream_t stream) {
  using namespace fp8lab::wo;
  switch (extra_alu) {
    case 0: return launch_gemv_xalu<true, 0>(p, splits, salt, stream);
    case 1: return launch_gemv_xalu<true, 1>(p, splits, salt, stream);
    case 2: return launch_gemv_xalu<true, 2>(p, splits, salt, stream);
    case 4: return launch_gemv_xalu<true, 4>(p, splits, salt, stream);
    case 8: return launch_gemv_xalu<true, 8>(p, splits, salt, stream);
    case 16: return launch_gemv_xalu<true, 16>(p, splits, salt, stream);
    default: return cudaErrorInvalidValue;
  }
}
