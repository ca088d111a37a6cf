// gemv_rows_ext.cu -- the row-major decode GEMV behind its torch binding (gemv_rows_ext.cpp), in both
// forms: the CUDA-core kernels (gemv_rows.cuh: fp8, int8, int4 and nvfp4 x bf16 / fp16 activations x MB = 1,
// 2, 4 tokens per CTA; int4 and nvfp4 also at 8 rows x 1 token) and the tensor-core ones (gemv_rows_mma.cuh: fp8, int8 and int4 x bf16 / fp16 x 8 or
// 16 tokens x 16 or 32 rows x 4, 8 or 16 warps per CTA), and their loads-only twins. No torch headers here, so nvcc only compiles CUDA.
#include "gemv_rows_mma.cuh"

// form: 0 CUDA-core, 1 tensor-core (16 rows per CTA), 2 tensor-core (32 rows), 3 CUDA-core at 8 rows (int4, nvfp4).
// fmt: 0 fp8, 1 int8, 2 nvfp4 (CUDA-core forms only), 3 int4. cudaErrorInvalidValue for a form /
// format without a kernel or a bad shape. occ: null, or gets the CTAs per SM the launched kernel has
// (loads_only: padded to the GEMV's).
cudaError_t fp8lab_gemv_rows_launch(int form, int fmt, bool bf16, bool loads_only, const fp8lab::rows::RowsParams& p,
                                    cudaStream_t stream, int* occ) {
  return fp8lab::rows::launch_form(form, fmt, bf16, loads_only, p, stream, occ);
}

cudaError_t fp8lab_gemv_rows_occupancy(int form, int fmt, bool bf16, int N, int M, int K, bool loads_only,
                                       int* ctas_per_sm) {
  return fp8lab::rows::occupancy_form(form, fmt, bf16, N, M, K, loads_only, ctas_per_sm);
}
