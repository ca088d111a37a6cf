// gemv_rows_ext.cu -- the row-major decode GEMV (gemv_rows.cuh) behind its torch binding
// (gemv_rows_ext.cpp): fp8 and int8 x bf16 / fp16 activations x MB = 1, 2, 4 tokens per CTA, and
// their loads-only twins. No torch headers here, so nvcc only compiles CUDA.
#include "gemv_rows.cuh"

// fmt: 0 fp8, 1 int8. cudaErrorInvalidValue for another format or a bad shape.
// occ: null, or gets the CTAs per SM the launched kernel has (loads_only: padded to the GEMV's).
cudaError_t fp8lab_gemv_rows_launch(int fmt, bool bf16, bool loads_only, const fp8lab::rows::RowsParams& p,
                                    cudaStream_t stream, int* occ) {
  return fp8lab::rows::launch(fmt, bf16, loads_only, p, stream, occ);
}

cudaError_t fp8lab_gemv_rows_occupancy(int fmt, bool bf16, int M, bool loads_only, int* ctas_per_sm) {
  return fp8lab::rows::occupancy(fmt, bf16, M, loads_only, ctas_per_sm);
}
