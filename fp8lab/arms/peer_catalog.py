"""Every peer fp8lab can run: other people's kernels, measured beside fp8lab's arms (issue 17).

One row per peer arm: the library, how it is found (an importable package, or an extension
built from its own source by ``python -m fp8lab.peers build``), its licence and install line,
its format (weight codes, scale granularity and dtype, packing, activation dtype), the
notebooks that run it, and whether its wheel can be carried to an offline box (the shared H200
takes 64 MiB per transfer). Pure data: imports nothing heavier than the standard library, so a
CPU test, the README table and a ``not-run`` row can read it anywhere.

Labels and colours live in :mod:`fp8lab.arms.registry` (ids ``peer_*``), as for every arm.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

__all__ = ["Peer", "PEERS", "KINDS", "NOTEBOOKS", "get", "ids", "ids_for", "weight_stream_bytes"]

#: what a peer computes, and so which harness checks and times it
KINDS = ("weight_only", "blockwise", "quantiser")
#: notebook key -> the harness its peers go through
NOTEBOOKS = {"05": "blockwise", "06": "blockwise", "08": "weight_only", "10": "weight_only", "11": "weight_only",
             "06b": "quantiser"}
_NOT_SEEN = "not seen here (written against its public API)"
_GEMLITE = "0.6.0.post2 (sdist read; wheel built here)"


@dataclass(frozen=True)
class Peer:
    id: str                 # the arm id (``peer_*``) in tables, legends and the registry
    kind: str               # one of KINDS
    library: str            # what a reader would search for
    module: str             # the module probed (import) or the extension module built
    dist: Optional[str]     # pip distribution name for the version (None: a source build)
    discover: str           # "import" (pip-installed) | "build" (built from its source here)
    licence: str
    install: str            # the one line that makes it available
    notebooks: tuple        # notebook keys (NOTEBOOKS) whose sweeps run it
    fmt: str                # fp8lab format id of its weights (a registry format)
    weight: str             # the weight codes and their packing, as the peer stores them
    scales: str             # scale granularity and dtype
    act: str                # activation dtype it takes
    group: int = 0          # elements per weight scale along K (0: one per output channel)
    carried: str = ""       # how it reaches the offline H200 ("" = wheel under the limit)
    min_sm: int = 80        # FP8 tensor-core GEMMs need sm_89 (Ada) or sm_90 (Hopper, wgmma / TMA)
    autotunes: bool = False  # Triton autotunes its kernels at the first call per shape (precompile.ahead)
    jit: bool = False       # its own JIT compiles a kernel at the first call per shape (precompile.ahead)
    note: str = ""
    seen: str = _NOT_SEEN   # the version this adapter was written against (where it ran: data/, README)

    @property
    def carries(self) -> bool:
        """True when it can be carried to the offline box (a small wheel or a source build)."""
        return not self.carried.startswith("not carried")


_MARLIN_SRC = "github.com/IST-DASLab/marlin"
_DEEPGEMM_SRC = "github.com/deepseek-ai/DeepGEMM"
_VLLM = "pip install vllm"
_VLLM_MARLIN_MOD = "fp8lab_vllm_marlin"
_VLLM_MARLIN_INSTALL = ("python scripts/peers_offline.py --sources --source-peers vllm-marlin && python -m fp8lab.peers "
                        "build vllm-marlin  (github.com/huggingface/kernels-community, vllm-quantization @ 8836a01)")
_VLLM_MARLIN_CARRIED = "source (~0.4 MB: gptq_marlin, vLLM's ScalarType, its Python utilities), built on the box with nvcc"
_VLLM_MARLIN_SEEN = "kernels-community vllm-quantization @ 8836a01 (source; built with fp8lab's binding)"
_SGL = "pip install sgl-kernel"
_VLLM_QUANT_INSTALL = ("python scripts/peers_offline.py --sources --source-peers vllm && python -m fp8lab.peers build "
                       "vllm-quant  (vLLM 0.34.0's sdist from PyPI)")
_SGLANG_QUANT_INSTALL = ("python scripts/peers_offline.py --sources --source-peers sglang && python -m fp8lab.peers "
                         "build sglang-quant  (sglang 0.5.23's wheel from PyPI)")
_VLLM_CUTLASS_INSTALL = ("python scripts/peers_offline.py --sources --source-peers vllm && python -m fp8lab.peers "
                         "build vllm-cutlass  (vLLM 0.34.0's sdist from PyPI)")

PEERS: dict[str, Peer] = {p.id: p for p in (
    # ---- weight-only decode and prefill (notebooks 08, 11): the seed's subject first
    Peer("peer_marlin_int4", "weight_only", "Marlin (IST-DASLab, original)", "marlin_cuda", None, "build",
         "Apache-2.0",
         f"python scripts/peers_offline.py --sources && python -m fp8lab.peers build marlin  ({_MARLIN_SRC})",
         ("08", "10", "11"), "int4",
         "INT4 codes + 8 (symmetric), 8 per int32 in Marlin's tile permutation", "per-group 128 along K, fp16",
         "fp16", group=128, carried="source (~0.1 MB), built on the box with nvcc",
         note="the seed's subject: Marlin's own Layer.pack quantises; K % 128 == 0, N % 256 == 0",
         seen="0.1.1 @ 2f6d7c1 (source; kernel compiled for sm_90 here)"),
    Peer("peer_gemlite_w8a16_fp8", "weight_only", "gemlite A16W8_FP8", "gemlite", "gemlite", "import", "Apache-2.0",
         "pip install gemlite==0.6.0.post2", ("08", "10", "11"), "fp8", "FP8 e4m3 codes, one byte each (K-major)",
         "per output channel, fp32", "bf16", carried="sdist 0.2 MB (pure Python + Triton)", autotunes=True, seen=_GEMLITE),
    Peer("peer_gemlite_w8a16_int8", "weight_only", "gemlite A16W8_INT8", "gemlite", "gemlite", "import", "Apache-2.0",
         "pip install gemlite==0.6.0.post2", ("08", "10", "11"), "int8", "INT8 codes, one byte each (K-major)",
         "per output channel, fp32", "bf16", carried="sdist 0.2 MB (pure Python + Triton)", autotunes=True, seen=_GEMLITE),
    Peer("peer_gemlite_w4a16_int4", "weight_only", "gemlite A16W4_HQQ_INT", "gemlite", "gemlite", "import",
         "Apache-2.0", "pip install gemlite==0.6.0.post2", ("08", "10", "11"), "int4",
         "INT4 codes (asymmetric, with zero points), packed 8 per int32 over K",
         "per-group 128 along K, bf16 scale + bf16 zero", "bf16", group=128,
         carried="sdist 0.2 MB (pure Python + Triton)", autotunes=True, seen=_GEMLITE),
    Peer("peer_gemlite_w4a16_nvfp4", "weight_only", "gemlite A16W4_NVFP", "gemlite", "gemlite", "import",
         "Apache-2.0", "pip install gemlite==0.6.0.post2", ("08", "10", "11"), "nvfp4",
         "FP4 e2m1 codes, two per byte", "per-group 16 along K, fp8 e4m3 + one fp32 tensor scale", "bf16",
         group=16, carried="sdist 0.2 MB (pure Python + Triton)", autotunes=True,
         note="Hopper has no FP4 MMA: Triton's dot_scaled decomposes it", seen=_GEMLITE),
    # vLLM's Marlin GEMMs, built from kernels-community's copy of their sources (no vLLM needed)
    Peer("peer_vllm_marlin_fp8", "weight_only", "vLLM FP8 Marlin", _VLLM_MARLIN_MOD, None, "build", "Apache-2.0",
         _VLLM_MARLIN_INSTALL, ("08", "10", "11"), "fp8", "FP8 e4m3 codes repacked into Marlin's tile layout",
         "per output channel, bf16 (Marlin layout)", "bf16", carried=_VLLM_MARLIN_CARRIED, seen=_VLLM_MARLIN_SEEN,
         note="the seed's subject for FP8 (seed 003 measured vLLM's FP8 Marlin); K % 128 == 0, N % 64 == 0"),
    Peer("peer_vllm_marlin_int8", "weight_only", "vLLM GPTQ-Marlin INT8", _VLLM_MARLIN_MOD, None, "build",
         "Apache-2.0", _VLLM_MARLIN_INSTALL, ("08", "10", "11"), "int8",
         "INT8 codes (uint8b128), repacked into Marlin's tile layout", "per output channel, bf16 (Marlin layout)",
         "bf16", carried=_VLLM_MARLIN_CARRIED, seen=_VLLM_MARLIN_SEEN,
         note="FP8 Marlin's INT8 twin (same bytes, same scales): the seed's FP-vs-INT pair (C4)"),
    Peer("peer_vllm_marlin_int4", "weight_only", "vLLM GPTQ-Marlin INT4", _VLLM_MARLIN_MOD, None, "build",
         "Apache-2.0", _VLLM_MARLIN_INSTALL, ("08", "10", "11"), "int4",
         "INT4 codes (uint4b8), repacked into Marlin's tile layout", "per-group 128 along K, bf16 (Marlin layout)",
         "bf16", group=128, carried=_VLLM_MARLIN_CARRIED, seen=_VLLM_MARLIN_SEEN),
    # ---- blockwise W8A8 (notebooks 05 and 06)
    Peer("peer_torchao_blockwise", "blockwise", "torchao blockwise_fp8_gemm (Triton)", "torchao", "torchao",
         "import", "BSD-3-Clause", "pip install torchao==0.18.0", ("05", "06"), "fp8_blockwise",
         "FP8 e4m3 codes, one byte each", "1x128 activations, 128x128 weights, fp32", "e4m3",
         group=128, carried="wheel 3.4 MB", note="N and K multiples of 128 (its weight quantiser's blocks)",
         min_sm=89, autotunes=True,
         seen="0.18.0 (wheel read here)"),
    Peer("peer_vllm_blockwise", "blockwise", "vLLM w8a8_block_fp8_matmul (Triton)", "vllm", "vllm", "import",
         "Apache-2.0", _VLLM, ("05", "06"), "fp8_blockwise", "FP8 e4m3 codes, one byte each",
         "1x128 activations, 128x128 weights, fp32", "e4m3", group=128,
         carried="not carried: vLLM 0.34's wheel is 239 MB, its Python files alone 63 MB, and on a CUDA "
                 "device it imports its 89 MB _C_stable_libtorch extension at import", min_sm=89,
         note="its tuned configs where it ships them for the device, else its default; called by either "
              "name (w8a8_triton_block_scaled_mm since the rename, w8a8_block_fp8_matmul before)"),
    Peer("peer_sglang_blockwise", "blockwise", "sgl-kernel fp8_blockwise_scaled_mm (CUTLASS)", "sgl_kernel",
         "sgl-kernel", "import", "Apache-2.0", _SGL, ("05", "06"), "fp8_blockwise", "FP8 e4m3 codes, one byte each",
         "1x128 activations (M-major), 128x128 weights, fp32", "e4m3", group=128,
         carried="not carried: the sgl-kernel wheel is ~535 MB", min_sm=90),
    Peer("peer_deepgemm", "blockwise", "DeepGEMM fp8_gemm_nt", "deep_gemm", None, "build", "MIT",
         f"python scripts/peers_offline.py --sources && python -m fp8lab.peers build deepgemm  ({_DEEPGEMM_SRC})",
         ("05", "06"), "fp8_blockwise", "FP8 e4m3 codes, one byte each",
         "1x128 activations (MN-major, TMA-aligned), 128x128 weights, fp32", "e4m3", group=128, min_sm=90, jit=True,
         carried="source 1.6 MB (csrc, deep_gemm, {fmt} headers), built on the box against the nvidia-cutlass "
                 "wheel's CUTLASS headers; its JIT compiles each kernel with the box's nvcc",
         note="K multiple of 128 and N of 64 (the shapes its own tests run)",
         seen="2.6.1 @ 54e2261 (source; built on the H200: as it is, its first JIT call dies of SIGSEGV "
              "(its std::filesystem calls bind to libtorch.so's copies); with libstdc++ linked in statically "
              "it passes its probe and runs)"),
    Peer("peer_vllm_cutlass_blockwise", "blockwise", "vLLM cutlass_scaled_mm blockwise (CUTLASS, sm_90a)",
         "fp8lab_vllm_cutlass", None, "build", "Apache-2.0", _VLLM_CUTLASS_INSTALL, ("05", "06"), "fp8_blockwise",
         "FP8 e4m3 codes, one byte each", "1x128 activations (M-major), 128x128 weights (K-major), fp32", "e4m3",
         group=128, min_sm=90,
         carried="source (vLLM 0.34.0 sdist's scaled_mm_blockwise_sm90_fp8.cu and the headers it includes, from "
                 "the same unpack as vLLM's quantiser), built on the box against the nvidia-cutlass wheel's CUTLASS "
                 "headers (vLLM pins CUTLASS 4.7.1)",
         note="what vLLM 0.34 runs for block-FP8 linear layers on Hopper (its CutlassFp8BlockScaledMMKernel): no "
              "padding of M, the operands swapped onto 128 x 16 tiles when M is not a multiple of 4; N and K "
              "multiples of 128; activations by vLLM's CUDA quantiser (peer_vllm_cuda_quant_group) where built, "
              "else torch ops with its recipe and the GEMM timed alone",
         seen="vLLM 0.34.0 sdist (source; built with CUTLASS 4.2's headers)"),
    Peer("peer_vllm_triton_blockwise", "blockwise", "vLLM w8a8_triton_block_scaled_mm (Triton, from its source)",
         "fp8lab_vllm_triton", None, "build", "Apache-2.0", _VLLM_QUANT_INSTALL.split(" && ")[0] + "  (vLLM 0.34.0's "
         "sdist from PyPI; nothing to build: Triton compiles its kernel)", ("05", "06"), "fp8_blockwise",
         "FP8 e4m3 codes, one byte each", "1x128 activations, 128x128 weights, fp32", "e4m3", group=128, min_sm=89,
         carried="source (vLLM 0.34.0 sdist's fp8_utils.py and the block-FP8 configs it ships for NVIDIA GPUs, "
                 "0.3 MB); the kernel is cut from that file unchanged and launched as vLLM launches it",
         note="vLLM's tuned config for this device and (N, K) where it ships one (H200: DeepSeek-V3's shapes), "
              "else its default; activations by vLLM's CUDA quantiser (peer_vllm_cuda_quant_group) where built, "
              "else torch ops with its recipe; N and K multiples of 128; peer_vllm_blockwise is the same kernel "
              "through a pip-installed vLLM",
         seen="vLLM 0.34.0 sdist (source; kernel cut here)"),
    # ---- per-token-group activation quantisers (notebook 06b)
    Peer("peer_vllm_quant_group", "quantiser", "vLLM per_token_group_quant_fp8", "vllm", "vllm", "import",
         "Apache-2.0", _VLLM, ("06b",), "fp8", "FP8 e4m3 codes", "1x128 per token, fp32", "bf16", group=128,
         carried="not carried: the vllm wheel is far over the 64 MiB transfer limit"),
    Peer("peer_sglang_quant_group", "quantiser", "sgl-kernel sgl_per_token_group_quant_fp8", "sgl_kernel",
         "sgl-kernel", "import", "Apache-2.0", _SGL, ("06b",), "fp8", "FP8 e4m3 codes", "1x128 per token, fp32",
         "bf16", group=128, carried="not carried: the sgl-kernel wheel is ~535 MB"),
    Peer("peer_torchao_quant_group", "quantiser", "torchao fp8_blockwise_act_quant (Triton)", "torchao", "torchao",
         "import", "BSD-3-Clause", "pip install torchao==0.18.0", ("06b",), "fp8", "FP8 e4m3 codes",
         "1x128 per token, fp32", "bf16", group=128, carried="wheel 3.4 MB", min_sm=89,
         note="the activation quantiser of torchao's blockwise FP8 GEMM (peer_torchao_blockwise)",
         seen="0.18.0 (wheel read here)"),
    Peer("peer_vllm_cuda_quant_group", "quantiser", "vLLM per_token_group_fp8_quant (CUDA, built from its source)",
         "fp8lab_vllm_quant", None, "build", "Apache-2.0", _VLLM_QUANT_INSTALL, ("06b",), "fp8", "FP8 e4m3 codes",
         "1x128 per token, fp32 (row-major)", "bf16", group=128,
         carried="source 0.1 MB (the kernel's file and the five headers it includes, from vLLM 0.34.0's sdist), "
                 "built on the box with nvcc against torch's stable ABI",
         note="the kernel vLLM's per_token_group_quant_fp8 runs on CUDA (torch.ops._C.per_token_group_fp8_quant), "
              "with fp8lab's binding; peer_vllm_quant_group is the same call through a pip-installed vLLM",
         seen="vLLM 0.34.0 sdist (source; built with fp8lab's binding)"),
    Peer("peer_sglang_jit_quant_group", "quantiser", "SGLang per_token_group_quant (CUDA, JIT kernel built from "
         "sglang's wheel)", "fp8lab_sglang_quant", None, "build", "Apache-2.0", _SGLANG_QUANT_INSTALL, ("06b",), "fp8",
         "FP8 e4m3 codes", "1x128 per token, fp32 (row-major)", "bf16", group=128, min_sm=90,
         carried="source 0.3 MB (the kernel's header and the sglang headers it includes, from sglang 0.5.23's "
                 "wheel) and tvm-ffi 0.1.11's headers and library (2.8 MB), built on the box with nvcc for sm_90a",
         note="the kernel sglang's per_token_group_quant JIT-compiles and runs on CUDA (with programmatic dependent "
              "launch on sm_90 and newer, as sglang launches it), compiled unmodified with sglang's JIT flags "
              "(--use_fast_math) and fp8lab's C entry; peer_sglang_quant_group is sgl-kernel's older kernel, "
              "whose wheel (~535 MB) cannot be carried and which has no sdist",
         seen="sglang 0.5.23 wheel (source; built with fp8lab's C entry)"),
)}


def get(peer_id: str) -> Peer:
    """The catalog row of ``peer_id``; ValueError naming the known ids otherwise."""
    if peer_id not in PEERS:
        raise ValueError(f"unknown peer {peer_id!r}; known: {sorted(PEERS)}")
    return PEERS[peer_id]


def ids(kind: Optional[str] = None) -> tuple:
    if kind is not None and kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    return tuple(p.id for p in PEERS.values() if kind is None or p.kind == kind)


def ids_for(notebook: str) -> tuple:
    """The peers a notebook's sweep runs (its arm list), in catalog order."""
    if notebook not in NOTEBOOKS:
        raise ValueError(f"notebook must be one of {sorted(NOTEBOOKS)}, got {notebook!r}")
    return tuple(p.id for p in PEERS.values() if notebook in p.notebooks)


def weight_stream_bytes(peer_id: str, N: int, K: int) -> int:
    """The bytes of the weight stream the peer's format holds for an (N, K) weight: codes plus
    scales (plus zero points / the tensor scale), from the format alone. The sweeps record
    the bytes of the tensors the peer really built (:func:`fp8lab.peers.harness.tensor_bytes`)
    and note a disagreement with this count."""
    p = get(peer_id)
    if p.kind == "quantiser":
        raise ValueError(f"{peer_id} is an activation quantiser: it reads activations, not weights")
    n = N * K
    if p.fmt in ("int4", "nvfp4", "fp4"):
        codes = n // 2
    else:
        codes = n
    if p.fmt == "fp8_blockwise":
        return codes + 4 * math.ceil(N / 128) * math.ceil(K / 128)
    groups = N * (K // p.group) if p.group else N
    if p.id == "peer_marlin_int4" or p.id == "peer_vllm_marlin_int4":
        return codes + 2 * groups                         # fp16 / bf16 scales
    if p.id == "peer_gemlite_w4a16_int4":
        return codes + 2 * 2 * groups                     # bf16 scale + bf16 zero
    if p.fmt == "nvfp4":
        return codes + groups + 4                         # e4m3 group scales + one fp32
    if p.id.startswith("peer_gemlite_w8a16"):
        return codes + 4 * groups                         # fp32 per-channel
    return codes + 2 * groups                             # vLLM FP8 Marlin: bf16 per-channel


def resolve(peers, notebook: str) -> list:
    """A notebook's ``peers`` parameter -> peer ids: "all" (the notebook's whole list), a list of
    ids, or [] / None (none). ValueError naming the notebook's peers for anything else, so a
    typo fails before any measuring, not after."""
    if peers is None:
        return []
    if isinstance(peers, str):
        if peers == "all":
            return list(ids_for(notebook))
        raise ValueError(f"peers must be 'all', a list of ids or []; got {peers!r}; "
                         f"notebook {notebook}'s peers: {list(ids_for(notebook))}")
    ids = list(peers)
    check_ids(ids, notebook)
    return ids


def check_ids(peers, notebook: str) -> None:
    allowed = ids_for(notebook)
    bad = [p for p in peers if p not in allowed]
    if bad:
        raise ValueError(f"not peers of notebook {notebook}: {bad}; its peers: {list(allowed)}")
