"""Where each arm lives: its kernel sources, the Python entry a sweep calls, and the float64
reference its tests check it against (issue 18: from one id, a newcomer finds the kernel,
reference, count, tests, table rows and legend; ``python -m fp8lab arm ID`` prints all of it,
this module holds the declared half).

Paths are relative to the repository root; entries are ``module:name``. ``tests/test_where.py``
checks every path exists and every entry is defined in its module (read with ``ast``, nothing
imported), and that every arm fp8lab owns in the registry has a row here. Library baselines name
the library call instead of sources; peers are described by ``fp8lab.arms.peer_catalog``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

__all__ = ["Where", "WHERE", "where"]


@dataclass(frozen=True)
class Where:
    sources: tuple = ()            # kernel sources (and the binding that exposes them)
    call: Optional[str] = None     # "module:function" the sweeps call
    reference: Optional[str] = None  # "module:function" the arm's tests check it against
    library: str = ""              # a library baseline: what runs


_K = "fp8lab/kernels/"
_MB = (_K + "mma_blockwise.cuh", _K + "mma_blockwise.cu", _K + "mma_blockwise_ext.cpp")
_SEED = _K + "seed001_ext.cpp"
_GEMV = (_K + "gemv_w16.cuh", _K + "gemv_w16_ext.cu", _K + "gemv_w16_sk_ext.cu", _K + "gemv_w16_ext.cpp",
         _K + "gemv_w16_bind.h")
_GEMV_CALL = "fp8lab.kernels.weight_only:gemv_w16"
_GEMV_REF = "fp8lab.kernels.weight_only:reference"
_QUANT = (_K + "quant_act.cu", _SEED)
_QUANT_CALL = "fp8lab.kernels.quant_act:quant_act"
_QUANT_REF = "fp8lab.kernels.baselines:quant_act_reference"
_SEED_REF = "fp8lab.kernels.seed001:reference_w8a16"

WHERE = {
    # fp8lab's own arms
    "mma_blockwise": Where(_MB, "fp8lab.kernels.mma_blockwise:mma_blockwise",
                           "fp8lab.kernels.mma_blockwise:mma_blockwise_reference"),
    "triton_blockwise": Where((_K + "triton_blockwise.py",), "fp8lab.kernels.triton_blockwise:blockwise_fp8_gemm",
                              "fp8lab.kernels.triton_blockwise:reference_blockwise_gemm"),
    "cutlass_blockwise_sm90": Where((_K + "cutlass_blockwise_sm90.cu", _K + "cutlass_blockwise_sm90.h",
                                     _K + "cutlass_blockwise_sm90_config.h", _K + "cutlass_blockwise_sm90_ext.cpp"),
                                    "fp8lab.kernels.cutlass_blockwise_sm90:cutlass_blockwise_sm90",
                                    "fp8lab.kernels.cutlass_blockwise_sm90:reference"),
    "wgmma_blockwise_sm90": Where((_K + "wgmma_blockwise.cu", _K + "wgmma_blockwise.h", _K + "wgmma_blockwise_ext.cpp"),
                                  "fp8lab.kernels.wgmma_blockwise:wgmma_blockwise", "fp8lab.kernels.wgmma_blockwise:reference"),
    "gemv_w8a8_blockwise": Where((_K + "gemv_w16.cuh", _K + "gemv_w8a8_ext.cu", _K + "gemv_w8a8_ext.cpp"),
                                 "fp8lab.kernels.gemv_w8a8:gemv_w8a8", "fp8lab.kernels.gemv_w8a8:reference"),
    "scalar_tiled": Where((_K + "scalar_tiled.cu", _SEED), "fp8lab.kernels.seed001:scalar_tiled", _SEED_REF),
    "wmma_w8a16": Where((_K + "wmma_w8a16.cu", _SEED), "fp8lab.kernels.seed001:wmma_w8a16", _SEED_REF),
    "dequant_w8_bf16": Where((_K + "seed001_dequant.cu", _SEED), "fp8lab.kernels.seed001:dequant_w8_bf16",
                             "fp8lab.kernels.baselines:dequantize_weight"),
    "gemv_w8a16_fp8": Where(_GEMV, _GEMV_CALL, _GEMV_REF),
    "gemv_w8a16_int8": Where(_GEMV, _GEMV_CALL, _GEMV_REF),
    "gemv_w4a16_nvfp4": Where(_GEMV, _GEMV_CALL, _GEMV_REF),
    "gemv_w4a16_int4": Where(_GEMV, _GEMV_CALL, _GEMV_REF),
    "gemv_w8a16_fp8_xalu": Where((_K + "gemv_w16.cuh", _K + "gemv_w16_xalu_ext.cu", _K + "gemv_w16_xalu_ext.cpp",
                                  _K + "gemv_w16_bind.h"), _GEMV_CALL, _GEMV_REF),
    "triton_w8a16": Where((_K + "triton_w8a16.py",), "fp8lab.kernels.triton_w8a16:triton_w8a16",
                          "fp8lab.kernels.triton_w8a16:reference"),
    "quant_act_naive": Where(_QUANT, _QUANT_CALL, _QUANT_REF),
    "quant_act_warp": Where(_QUANT, _QUANT_CALL, _QUANT_REF),
    "quant_act_16t": Where(_QUANT, _QUANT_CALL, _QUANT_REF),
    "quant_act_warp_ilp": Where(_QUANT, _QUANT_CALL, _QUANT_REF),
    "quant_act_warp_ilp_pdl": Where(_QUANT, _QUANT_CALL, _QUANT_REF),
    "quant_act_subwarp": Where(_QUANT, _QUANT_CALL, _QUANT_REF),
    "quant_act_subwarp_pdl": Where(_QUANT, _QUANT_CALL, _QUANT_REF),
    "traffic_copy": Where(_QUANT, "fp8lab.kernels.quant_act:traffic_copy"),
    "traffic_copy_pdl": Where(_QUANT, "fp8lab.kernels.quant_act:traffic_copy"),
    "fma_peak": Where((_K + "fma_peak.py",), "fp8lab.kernels.fma_peak:launch", "fp8lab.kernels.fma_peak:reference"),
    "hmma_peak": Where((_K + "hmma_peak.cu", _K + "hmma_peak_ext.cpp"), "fp8lab.kernels.hmma_peak:launch",
                       "fp8lab.kernels.hmma_peak:reference"),
    # library baselines
    "cublaslt_blockwise": Where(call="fp8lab.kernels.baselines:cublaslt_blockwise",
                                reference="fp8lab.kernels.mma_blockwise:mma_blockwise_reference",
                                library="cuBLASLt through torch.nn.functional.scaled_mm (BlockWise1x128 / 128x128)"),
    "cublas_bf16": Where(call="fp8lab.kernels.baselines:cublas_bf16", library="cuBLAS through torch.mm"),
    "cublas_fp8_tensorwise": Where(library="cuBLASLt through torch._scaled_mm, one scale per tensor"),
    "torch_reference": Where(call="fp8lab.kernels.baselines:quant_act_reference",
                             library="PyTorch ops (the quantisers' bit-exact reference, timed)"),
    "copy_d2d": Where(library="torch Tensor.copy_ (a device-to-device copy)"),
}


def where(arm_id: str) -> Optional[Where]:
    """The declared row of ``arm_id`` (None for a peer or an id that is not an arm)."""
    return WHERE.get(arm_id)
