// gemv_w16.cu -- standalone translation unit of the weight-only decode kernels (gemv_w16.cuh), for
// register / spill / SASS inspection and the SASS census, with no torch and no GPU:
//   nvcc -cubin -arch=sm_90 -O3 -std=c++17 -Xptxas -v -I fp8lab/kernels fp8lab/kernels/gemv_w16.cu -o k.cubin
// By default it instantiates every format in both activation types for the decode tile (NT = 1:
// M <= 8) and the widest tile (NT = 8: M up to 64 per block): 16 kernels. -DFP8LAB_WO_NT=<1|2|4|8>
// instantiates that tile only; -DFP8LAB_WO_FORMAT=<0..3> (fp8, int8, nvfp4, int4) and
// -DFP8LAB_WO_BF16=<0|1> narrow it to one kernel.
#include "gemv_w16.cuh"

// FP8LAB_WO_KERNELS(INST): INST(kernel name, BF16, NT) for every kernel the -D flags above select
// (one, or each format x activation type for one tile or for NT = 1 and 8).
#if defined(FP8LAB_WO_FORMAT) && defined(FP8LAB_WO_BF16) && defined(FP8LAB_WO_NT)
#if FP8LAB_WO_FORMAT == 0
#define FP8LAB_WO_SELECTED gemv_w8a16_fp8
#elif FP8LAB_WO_FORMAT == 1
#define FP8LAB_WO_SELECTED gemv_w8a16_int8
#elif FP8LAB_WO_FORMAT == 2
#define FP8LAB_WO_SELECTED gemv_w4a16_nvfp4
#else
#define FP8LAB_WO_SELECTED gemv_w4a16_int4
#endif
#define FP8LAB_WO_KERNELS(INST) INST(FP8LAB_WO_SELECTED, FP8LAB_WO_BF16, FP8LAB_WO_NT)
#else
#define FP8LAB_WO_ALL(INST, NT) \
  INST(gemv_w8a16_fp8, true, NT)      \
  INST(gemv_w8a16_fp8, false, NT)     \
  INST(gemv_w8a16_int8, true, NT)     \
  INST(gemv_w8a16_int8, false, NT)    \
  INST(gemv_w4a16_nvfp4, true, NT)    \
  INST(gemv_w4a16_nvfp4, false, NT)   \
  INST(gemv_w4a16_int4, true, NT)     \
  INST(gemv_w4a16_int4, false, NT)
#ifdef FP8LAB_WO_NT
#define FP8LAB_WO_KERNELS(INST) FP8LAB_WO_ALL(INST, FP8LAB_WO_NT)
#else
#define FP8LAB_WO_KERNELS(INST) FP8LAB_WO_ALL(INST, 1) FP8LAB_WO_ALL(INST, 8)
#endif
#endif

#define FP8LAB_WO_INST(NAME, BF16, NT) template __global__ void fp8lab::wo::NAME<BF16, NT>(const fp8lab::wo::WoParams);
FP8LAB_WO_KERNELS(FP8LAB_WO_INST)

// -DFP8LAB_WO_XALU adds the EXTRA_ALU kernels of notebook 10 (fp8, bf16, NT = 1, k = 0, 1, 2, 4, 8, 16
// extra dependent integer instructions per weight element).
#ifdef FP8LAB_WO_XALU
#define FP8LAB_WO_XALU_INST(XA) \
  template __global__ void fp8lab::wo::gemv_w8a16_fp8_xalu<true, 1, XA>(const fp8lab::wo::WoParams, uint32_t);
FP8LAB_WO_XALU_INST(0)
FP8LAB_WO_XALU_INST(1)
FP8LAB_WO_XALU_INST(2)
FP8LAB_WO_XALU_INST(4)
FP8LAB_WO_XALU_INST(8)
FP8LAB_WO_XALU_INST(16)
#endif

// -DFP8LAB_WO_SK adds the stream-K kernels (gemv_*_sk, issue 7) of the same formats / activation
// types / tiles as selected above (FP8LAB_WO_FORMAT / _BF16 / _NT), for -Xptxas -v:
//   nvcc -cubin -arch=sm_90 -O3 -std=c++17 -Xptxas -v -I fp8lab/kernels -DFP8LAB_WO_SK \
//        -DFP8LAB_WO_FORMAT=2 -DFP8LAB_WO_BF16=1 -DFP8LAB_WO_NT=1 fp8lab/kernels/gemv_w16.cu -o k.cubin
#ifdef FP8LAB_WO_SK
// Two steps, so that NAME is macro-expanded (FP8LAB_WO_SELECTED) before ## pastes the suffix.
#define FP8LAB_WO_SK_INST_(NAME, BF16, NT) template __global__ void fp8lab::wo::NAME##_sk<BF16, NT>(const fp8lab::wo::WoParams);
#define FP8LAB_WO_SK_INST(NAME, BF16, NT) FP8LAB_WO_SK_INST_(NAME, BF16, NT)
FP8LAB_WO_KERNELS(FP8LAB_WO_SK_INST)
#endif
