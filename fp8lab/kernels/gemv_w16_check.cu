// gemv_w16_check.cu -- the dequant probes alone (no mma): for each format and activation type a
// kernel that only dequantises (DEQUANT = true) and its pass-through twin (false). Compiled by
// fp8lab.kernels.weight_only.dequant_sass_counts, which subtracts the twin's SASS opcode counts
// from the probe's: what is left is the dequant sequence, compared with the emulator's trace.
// Not part of the SASS census (the *_check suffix): the probes issue no MMA.
#include "gemv_w16.cuh"

#define FP8LAB_WO_PROBE(F, BF16)                                                                   \
  template __global__ void fp8lab::wo::dequant_probe<F, BF16, true>(const uint32_t*, uint32_t*, int); \
  template __global__ void fp8lab::wo::dequant_probe<F, BF16, false>(const uint32_t*, uint32_t*, int);
FP8LAB_WO_PROBE(fp8lab::wo::kFp8, false)
FP8LAB_WO_PROBE(fp8lab::wo::kFp8, true)
FP8LAB_WO_PROBE(fp8lab::wo::kInt8, false)
FP8LAB_WO_PROBE(fp8lab::wo::kInt8, true)
FP8LAB_WO_PROBE(fp8lab::wo::kNvfp4, false)
FP8LAB_WO_PROBE(fp8lab::wo::kNvfp4, true)
FP8LAB_WO_PROBE(fp8lab::wo::kInt4, false)
FP8LAB_WO_PROBE(fp8lab::wo::kInt4, true)
