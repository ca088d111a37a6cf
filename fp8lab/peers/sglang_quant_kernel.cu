// fp8lab's C entry to SGLang's per-token-group FP8 activation quantiser: PerTokenGroupQuantFlatKernel of
// sglang's kernels/jit/csrc/gemm/per_token_group_quant.cuh (what sglang's per_token_group_quant JIT-compiles
// and runs on CUDA), compiled here from sglang's released wheel (fp8lab/peers/sglang_quant.py), unmodified,
// instantiated as sglang instantiates it for bf16 input, e4m3 output, groups of 128, fp32 scales
// (row-major or column-major), no SiLU fusion, with programmatic dependent launch where sglang enables it
// (sm_90 and newer). Its launcher takes tvm-ffi TensorViews and reads the CUDA stream from tvm-ffi's
// environment (TVMFFIEnvGetStream): this file builds the DLTensors, sets that stream to the caller's for the
// one call and restores it. No torch header here (sglang's and torch's DLPack definitions stay apart); the
// torch operator is in sglang_quant_binding.cpp.
#include <gemm/per_token_group_quant.cuh>
#include <tvm/ffi/extra/c_env_api.h>

#include <cstdint>
#include <cstdio>
#include <exception>

namespace sglang {  // where sglang's own generated wrapper names the launcher
template <bool kRowMajor, bool kPdl>
using Fp8labFlat = PerTokenGroupQuantFlatKernel<bf16_t, fp8_e4m3_t, 128, false, kRowMajor, true, false, kPdl>;
}  // namespace sglang

namespace {

template <bool kRowMajor, bool kPdl>
using Flat = sglang::Fp8labFlat<kRowMajor, kPdl>;

DLTensor make(void* data, DLDataType dtype, int device, int64_t* shape, int64_t* strides) {
  DLTensor t{};
  t.data = data;
  t.device = DLDevice{kDLCUDA, device};
  t.ndim = 2;
  t.dtype = dtype;
  t.shape = shape;
  t.strides = strides;
  t.byte_offset = 0;
  return t;
}

}  // namespace

// x (M, K) bf16 row-major; q (M, K) e4m3 row-major; s (M, K/128) fp32 with element strides (ss0, ss1):
// row-major (ss1 == 1) or column-major (ss0 == 1). Returns 0, or 1 with the reason in err.
extern "C" int fp8lab_sglang_per_token_group_quant(void* x, void* q, void* s, int64_t M, int64_t K, int64_t ss0,
                                                  int64_t ss1, int device, void* stream, int pdl, char* err,
                                                  int64_t err_len) {
  int64_t xshape[2] = {M, K}, xstrides[2] = {K, 1};
  int64_t sshape[2] = {M, K / 128}, sstrides[2] = {ss0, ss1};
  DLTensor tx = make(x, DLDataType{kDLBfloat, 16, 1}, device, xshape, xstrides);
  DLTensor tq = make(q, DLDataType{kDLFloat8_e4m3fn, 8, 1}, device, xshape, xstrides);
  DLTensor ts = make(s, DLDataType{kDLFloat, 32, 1}, device, sshape, sstrides);
  const bool row_major = ss0 >= ss1;  // sglang's _infer_scale_layout: stride(-2) >= stride(-1)
  TVMFFIStreamHandle previous = nullptr;
  if (TVMFFIEnvSetStream(kDLCUDA, device, stream, &previous) != 0) {
    std::snprintf(err, static_cast<size_t>(err_len), "TVMFFIEnvSetStream failed");
    return 1;
  }
  int rc = 0;
  try {
    if (row_major)
      pdl ? Flat<true, true>::run(&tx, &tq, &ts) : Flat<true, false>::run(&tx, &tq, &ts);
    else
      pdl ? Flat<false, true>::run(&tx, &tq, &ts) : Flat<false, false>::run(&tx, &tq, &ts);
  } catch (const std::exception& e) {
    std::snprintf(err, static_cast<size_t>(err_len), "%s", e.what());
    rc = 1;
  }
  TVMFFIEnvSetStream(kDLCUDA, device, previous, nullptr);
  return rc;
}
