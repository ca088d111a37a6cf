// gemv_rows_params.h -- the argument block of the row-major decode GEMV (gemv_rows.cuh), in a header
// with no device code so the torch binding (a .cpp) and the kernels share one definition.
#pragma once

#include <cstdint>

namespace fp8lab {
namespace rows {

struct RowsParams {
  const uint8_t* w;      // (N, K) weight codes, row-major: e4m3, or int8 as offset binary (value = code - 128)
  const uint16_t* s;     // (N, K / 128) group scales in the activation dtype (bf16 or fp16), row-major
  const void* x;         // (M, K) activations, bf16 or fp16, row-major
  void* out;             // (M, N) output in the activation dtype
  uint32_t* sink;        // loads-only kernels: one word per launched thread (written only where the XOR equals key)
  uint32_t key;
  int N, K, M;
  float out_factor;      // multiplies every output
};

}  // namespace rows
}  // namespace fp8lab
