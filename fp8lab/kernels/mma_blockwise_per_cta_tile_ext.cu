// mma_blockwise_per_cta_tile_ext.cu -- one kernel table of the torch extension (why the tables are
// split: mma_blockwise_ext_tables.h): every config of mma_blockwise_configs.h as per_block with the
// per_cta_tile lookup (a bug kept on purpose, claim A5).
#include "mma_blockwise.cuh"
#include "mma_blockwise_ext_tables.h"

namespace fp8lab {
#define FP8LAB_ROW(BM, BN, WM, WN, S) &launch_mma_blockwise<TileConfig<BM, BN, WM, WN, S>, kPerBlock, kPerCtaTile>,
const MmaLaunchFn kMmaPerBlockCtaTile[kMmaNumConfigs] = {FP8LAB_MMA_CONFIGS(FP8LAB_ROW)};
#undef FP8LAB_ROW
}  // namespace fp8lab
