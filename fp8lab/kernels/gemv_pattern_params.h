// gemv_pattern_params.h -- the argument block of the pattern kernels (gemv_pattern.cuh), in a header
// with no device code so the torch binding (a .cpp) and the kernels share one definition.
#pragma once

#include <cstdint>

namespace fp8lab {
namespace wo {

struct PatternParams {
  const void* w;            // packed weights, as WoParams::w
  const uint32_t* scales;   // packed scales, as WoParams::scales
  uint32_t* sink;           // one word per launched thread (written only where the XOR equals key)
  uint32_t key;
  int n_tiles16;            // as WoParams
  int steps;                // K / 128
  int steps_per_split;      // split-K: steps per blockIdx.y
  int tiles_x;              // stream-K: CTA tiles along N (set by the launcher)
  int units_per_cta;        // stream-K: (tile, step) units per CTA (set by the launcher)
};

}  // namespace wo
}  // namespace fp8lab
