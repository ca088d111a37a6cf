"""Every id fp8lab's experiments emit, with the text and colour it gets in a figure.

One row per id: an arm (a kernel that is checked and timed), a ceiling of notebook 00, a
weight / activation / code format or a roofline precision, a main-loop variant, a quantiser
that is named in a table column but is not itself an arm, or a family of arms compared as one
route (notebook 06's ``best_w8a8``). Figures, tick labels and verdict texts look ids up here
and nowhere else; ``tests/test_registry.py`` walks every id the experiments can emit and fails
when one has no row.

- ``label``: legend text. Arms fp8lab owns keep their id in it, so a reader can find the
  kernel from the legend; a baseline is named after its library.
- ``short``: tick-label text where the label is too long (defaults to the label).
- ``color``: arms each have their own (no two arms share one, so an arm keeps its colour in
  every figure whatever else is drawn beside it); any other row may instead take the colour of
  an arm (``color_of``: a ceiling the arm that measures it, a format the kernel that decodes
  it or, for a roofline precision, the arm whose ceiling draws that roof).
  Okabe-Ito first (colour-blind safe), then Paul Tol's muted, vibrant and light sets, which are
  colour-blind safe too. Arms drawn in the same figure get clearly different hues.
- ``scheme``: weight x activation precision, where it means something: W8A8, W8A16, W4A16
  or W16A16.

A derived id ``<W8A8 arm>+quant`` (notebook 11's rows with the activation quantiser's time
added) reads as its arm plus " + act. quantisation", in the arm's colour.

- ``count``: how one call of the arm is counted, FLOPs and bytes (:func:`count`; the rules
  are in ``fp8lab.arms.counts``): every rate in a table and every roof in a figure goes
  through it. The kernels behind notebook 00's ceilings have none: each counts its own launch
  configuration (``kernels.fma_peak.flop``, ``kernels.hmma_peak.flop``; a copy moves 2 x its
  size).

Each arm's kernel sources, entry point and float64 reference are declared beside it in
``fp8lab.arms.where`` (``python -m fp8lab arm ID`` prints them with the tests and table rows);
this module imports nothing heavier than the standard library until a count needs a format's
facts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

__all__ = ["Entry", "UnknownId", "KINDS", "SCHEMES", "ENTRIES", "entry", "ids", "label", "short_label",
           "color", "scheme", "activation", "count", "PEER_PREFIX", "is_peer", "style"]

KINDS = ("arm", "ceiling", "format", "variant", "quantiser", "family")
SCHEMES = ("W8A8", "W8A16", "W4A16", "W16A16")
#: Suffixes that derive an id from an arm's id: suffix -> (what it adds to the arm's label,
#: the scheme an arm needs to take it). "+quant": a W8A8 GEMM timed with its activation quantiser.
DERIVED = {"+quant": (" + act. quantisation", "W8A8")}
_FILE = "fp8lab/arms/registry.py"


@dataclass(frozen=True)
class Entry:
    id: str
    kind: str
    label: str
    short: Optional[str] = None
    color: Optional[str] = None        # own colour (every arm has one)
    color_of: Optional[str] = None     # ... or the colour of this other id
    scheme: Optional[str] = None
    count: Optional[tuple] = None      # (a rule of arms.counts.RULES, its leading arguments)


class UnknownId(LookupError):
    """An id with no row in the registry."""

    def __str__(self) -> str:          # LookupError would print the message in quotes
        return str(self.args[0]) if self.args else ""


def _arm(id, label, color, scheme=None, short=None, count=None):
    return Entry(id, "arm", label, short, color, None, scheme, count)


def _ceiling(id, label, arm):
    return Entry(id, "ceiling", label, None, None, arm)


def _format(id, label, short=None, color=None, color_of=None):
    return Entry(id, "format", label, short, color, color_of)


_ROWS = (
    # --- W8A8 blockwise GEMMs and their baselines (notebooks 03-05, 06, 11)
    _arm("mma_blockwise", "mma_blockwise (mma.sync)", "#0072B2", "W8A8", short="mma_blockwise",
         count=("w8a8_blockwise",)),
    _arm("triton_blockwise", "triton_blockwise", "#E69F00", "W8A8", count=("w8a8_blockwise",)),
    _arm("cutlass_blockwise_sm90", "cutlass_blockwise_sm90", "#009E73", "W8A8", count=("w8a8_blockwise",)),
    _arm("cublaslt_blockwise", "cuBLASLt blockwise", "#D55E00", "W8A8", count=("w8a8_blockwise",)),
    _arm("wgmma_blockwise_sm90", "wgmma_blockwise_sm90 (fp8lab's TMA + wgmma)", "#882E72", "W8A8",
         short="wgmma_blockwise", count=("w8a8_blockwise",)),
    _arm("gemv_w8a8_blockwise", "gemv_w8a8_blockwise (decode GEMV, M <= 64)", "#1965B0", "W8A8", short="W8A8 GEMV",
         count=("w8a8_blockwise",)),
    _arm("cublas_bf16", "cuBLAS BF16", "#000000", "W16A16", count=("w16a16",)),
    _arm("cublas_fp8_tensorwise", "cuBLAS FP8 per-tensor (reference)", "#CC79A7", "W8A8",
         short="cuBLAS FP8 per-tensor", count=("w8a8_tensorwise",)),
    # --- seed 001's kernels and the passes its routes need every step (notebook 06)
    _arm("scalar_tiled", "scalar_tiled", "#999999", "W8A16", count=("w8a16_blockwise",)),
    _arm("wmma_w8a16", "wmma_w8a16", "#56B4E9", "W8A16", count=("w8a16_blockwise",)),
    _arm("dequant_w8_bf16", "dequant_w8_bf16", "#CC3311", count=("dequant_w8",)),
    # --- weight-only kernels (notebooks 08, 10, 11): W8 blues, W4 reds, FP dark, INT light
    _arm("gemv_w8a16_fp8", "gemv_w8a16_fp8 (FP8 e4m3)", "#332288", "W8A16", short="W8A16 FP8",
         count=("weight_only", "fp8")),
    _arm("gemv_w8a16_int8", "gemv_w8a16_int8 (INT8)", "#88CCEE", "W8A16", short="W8A16 INT8",
         count=("weight_only", "int8")),
    _arm("gemv_w4a16_nvfp4", "gemv_w4a16_nvfp4 (NVFP4 e2m1)", "#882255", "W4A16", short="W4A16 NVFP4",
         count=("weight_only", "nvfp4")),
    _arm("gemv_w4a16_int4", "gemv_w4a16_int4 (INT4)", "#CC6677", "W4A16", short="W4A16 INT4",
         count=("weight_only", "int4")),
    _arm("gemv_w8a16_fp8_xalu", "gemv_w8a16_fp8 + k extra ALU", "#4477AA", "W8A16", short="W8A16 FP8 + ALU",
         count=("weight_only", "fp8")),
    _arm("triton_w8a16", "triton_w8a16 (wgmma)", "#44AA99", "W8A16", short="triton_w8a16",
         count=("weight_only", "fp8")),
    # --- 1x128 activation quantisers (notebook 06b)
    _arm("quant_act_naive", "quant_act_naive", "#BBBBBB", count=("quant_act",)),
    _arm("quant_act_warp", "quant_act_warp", "#117733", count=("quant_act",)),
    _arm("quant_act_16t", "quant_act_16t", "#33BBEE", count=("quant_act",)),
    _arm("quant_act_warp_ilp", "quant_act_warp_ilp", "#AA4499", count=("quant_act",)),
    _arm("quant_act_warp_ilp_pdl", "quant_act_warp_ilp + PDL (launch overlaps the kernel before)", "#5D2E8C", short="ilp + PDL", count=("quant_act",)),
    _arm("quant_act_subwarp", "quant_act_subwarp (8 lanes x 32 B per group)", "#117777", short="subwarp", count=("quant_act",)),
    _arm("quant_act_subwarp_pdl", "quant_act_subwarp + PDL (waits, then releases the next kernel)", "#0B4F4F", short="subwarp + PDL", count=("quant_act",)),
    _arm("torch_reference", "torch_reference", "#EE3377", count=("quant_act",)),
    _arm("traffic_copy", "traffic_copy (same bytes, no math)", "#DDCC77", short="traffic_copy",
         count=("quant_act",)),
    _arm("traffic_copy_pdl", "traffic_copy + PDL (the yardstick of the PDL arms)", "#A89F3C",
         short="traffic_copy + PDL", count=("quant_act",)),
    # --- the kernels behind the measured ceilings (notebook 00)
    _arm("copy_d2d", "device-to-device copy", "#009988", short="copy"),
    _arm("fma_peak", "fma_peak (FP32 FMA kernel)", "#999933", short="fma_peak"),
    _arm("hmma_peak", "hmma_peak (BF16 mma.sync kernel)", "#77AADD", "W16A16", short="hmma_peak"),

    # --- peers (issue 17): other people's kernels, checked and timed through fp8lab's path
    # (fp8lab.arms.peer_catalog holds their library, licence, install line and format). Drawn in one
    # style of their own (style(): dash-dotted, open diamonds) beside fp8lab's solid arms. Hues
    # differ from the own arms of the notebooks each is drawn in (08 / 11: blues, reds, black;
    # 05: Okabe-Ito); a library's FP / INT pair shares a family, FP dark and INT light.
    _arm("peer_marlin_int4", "Marlin INT4 (IST-DASLab, peer)", "#225522", "W4A16", short="Marlin INT4",
         count=("peer", "peer_marlin_int4")),
    _arm("peer_gemlite_w8a16_fp8", "gemlite A16W8 FP8 (peer)", "#997700", "W8A16", short="gemlite FP8",
         count=("peer", "peer_gemlite_w8a16_fp8")),
    _arm("peer_gemlite_w8a16_int8", "gemlite A16W8 INT8 (peer)", "#DDAA33", "W8A16", short="gemlite INT8",
         count=("peer", "peer_gemlite_w8a16_int8")),
    _arm("peer_gemlite_w4a16_int4", "gemlite A16W4 INT4 (peer)", "#EE8866", "W4A16", short="gemlite INT4",
         count=("peer", "peer_gemlite_w4a16_int4")),
    _arm("peer_gemlite_w4a16_nvfp4", "gemlite A16W4 NVFP4 (peer)", "#EE7733", "W4A16", short="gemlite NVFP4",
         count=("peer", "peer_gemlite_w4a16_nvfp4")),
    _arm("peer_vllm_marlin_fp8", "vLLM FP8 Marlin (peer)", "#663333", "W8A16", short="vLLM FP8 Marlin",
         count=("peer", "peer_vllm_marlin_fp8")),
    _arm("peer_vllm_marlin_int8", "vLLM GPTQ-Marlin INT8 (peer)", "#BB7777", "W8A16", short="vLLM INT8 Marlin",
         count=("peer", "peer_vllm_marlin_int8")),
    _arm("peer_vllm_marlin_int4", "vLLM GPTQ-Marlin INT4 (peer)", "#6699CC", "W4A16", short="vLLM INT4 Marlin",
         count=("peer", "peer_vllm_marlin_int4")),
    _arm("peer_torchao_blockwise", "torchao blockwise FP8 (peer)", "#AAAA00", "W8A8", short="torchao",
         count=("peer", "peer_torchao_blockwise")),
    _arm("peer_vllm_blockwise", "vLLM Triton block FP8 (peer)", "#994455", "W8A8", short="vLLM block FP8",
         count=("peer", "peer_vllm_blockwise")),
    _arm("peer_sglang_blockwise", "sgl-kernel blockwise FP8 (peer)", "#666633", "W8A8", short="sgl-kernel",
         count=("peer", "peer_sglang_blockwise")),
    _arm("peer_deepgemm", "DeepGEMM FP8 (peer)", "#222255", "W8A8", short="DeepGEMM",
         count=("peer", "peer_deepgemm")),
    _arm("peer_vllm_cutlass_blockwise", "vLLM CUTLASS blockwise FP8 (peer)", "#8C510A", "W8A8",
         short="vLLM CUTLASS", count=("peer", "peer_vllm_cutlass_blockwise")),
    _arm("peer_vllm_triton_blockwise", "vLLM Triton block FP8, from source (peer)", "#AA3377", "W8A8",
         short="vLLM Triton (src)", count=("peer", "peer_vllm_triton_blockwise")),
    _arm("peer_vllm_quant_group", "vLLM per-token-group quant (peer)", "#004488", short="vLLM quant",
         count=("quant_act",)),
    _arm("peer_sglang_quant_group", "sgl-kernel per-token-group quant (peer)", "#BB5566", short="sgl quant",
         count=("quant_act",)),
    _arm("peer_torchao_quant_group", "torchao per-token-group quant (peer)", "#661100", short="torchao quant",
         count=("quant_act",)),
    _arm("peer_vllm_cuda_quant_group", "vLLM CUDA per-token-group quant, from source (peer)", "#0099BB",
         short="vLLM CUDA quant", count=("quant_act",)),
    _arm("peer_sglang_jit_quant_group", "SGLang per-token-group quant, JIT kernel from its wheel (peer)", "#7A9E2B",
         short="SGLang quant", count=("quant_act",)),

    # --- ceilings: the colour of the arm that measures each (ceilings.CEILINGS says which)
    _ceiling("copy_bandwidth", "copy bandwidth", "copy_d2d"),
    _ceiling("fp32_fma", "FP32 FMA (own kernel)", "fma_peak"),
    _ceiling("bf16_tensor", "BF16 cuBLAS", "cublas_bf16"),
    _ceiling("bf16_mma_sync", "BF16 mma.sync (own kernel)", "hmma_peak"),
    _ceiling("fp8_tensor", "FP8 cuBLAS, per-tensor", "cublas_fp8_tensorwise"),
    _ceiling("fp8_tensor_blockwise", "FP8 cuBLASLt, blockwise", "cublaslt_blockwise"),

    # --- formats: weight formats of the weight-only kernels (their kernel's colour), the
    # 16-bit activation / dequant-target types, roofline precisions (the colour of the arm
    # whose ceiling draws that roof) and the element codes of notebook 01
    _format("fp8", "FP8", color_of="cublas_fp8_tensorwise"),
    _format("int8", "INT8", color_of="gemv_w8a16_int8"),
    _format("nvfp4", "NVFP4", color_of="gemv_w4a16_nvfp4"),
    _format("int4", "INT4", color_of="gemv_w4a16_int4"),
    _format("bf16", "BF16", color_of="cublas_bf16"),
    _format("fp16", "FP16", color="#0072B2"),
    _format("fp32", "FP32", color_of="fma_peak"),
    _format("fp4", "FP4", color_of="gemv_w4a16_nvfp4"),
    _format("fp8_blockwise", "FP8 blockwise", color_of="cublaslt_blockwise"),
    _format("e4m3", "E4M3", color_of="gemv_w8a16_fp8"),
    _format("e5m2", "E5M2", color="#E69F00"),
    _format("e2m1", "E2M1", color_of="gemv_w4a16_nvfp4"),
    _format("ue8m0", "UE8M0 (scale)", short="UE8M0", color="#999999"),

    # --- main-loop variants of the blockwise kernels (per_step is Triton's name for per_slice)
    Entry("per_slice", "variant", "per_slice", color="#D55E00"),
    Entry("per_block", "variant", "per_block", color="#0072B2"),
    Entry("per_block_inplace", "variant", "per_block_inplace", color="#009E73"),
    Entry("per_step", "variant", "per_step", color_of="per_slice"),

    # --- quantisers named in a table (blockwise's ``quant`` column) that are not arms
    Entry("quant_act_reference", "quantiser", "quant_act_reference (torch)", "quant_act_reference",
          color_of="torch_reference"),

    # --- families: routes compared as one (notebook 06); the other families are arm ids
    Entry("best_w8a8", "family", "best fp8lab W8A8", color_of="triton_blockwise", scheme="W8A8"),
)

ENTRIES: dict[str, Entry] = {e.id: e for e in _ROWS}


def _unknown(id) -> UnknownId:
    return UnknownId(f"{id!r} has no entry in the arm registry ({_FILE}): add a row there with its "
                     "label and colour")


def _split(id: str) -> tuple[Entry, str]:
    """(entry, suffix) for an id or a derived id ``<arm><suffix>``."""
    if not isinstance(id, str):
        raise _unknown(id)
    if id in ENTRIES:
        return ENTRIES[id], ""
    for suffix in DERIVED:
        base = id[: -len(suffix)]
        if id.endswith(suffix) and base in ENTRIES and ENTRIES[base].kind == "arm" \
                and ENTRIES[base].scheme == DERIVED[suffix][1]:
            return ENTRIES[base], suffix
    raise _unknown(id)


def entry(id: str) -> Entry:
    """The registry row of ``id`` (a derived id gives its arm's row)."""
    return _split(id)[0]


def ids(kind: Optional[str] = None) -> tuple:
    """Every id in the registry, or those of one kind."""
    if kind is not None and kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    return tuple(i for i, e in ENTRIES.items() if kind is None or e.kind == kind)


def label(id: str, *, with_scheme: bool = False) -> str:
    """Legend text of ``id``. with_scheme: the scheme joins the label's parenthesis, or opens
    one ('triton_w8a16 (W8A16, wgmma)', 'cuBLAS BF16 (W16A16)')."""
    e, suffix = _split(id)
    text = e.label
    if with_scheme and e.scheme:
        text = (f"{text[:-1].replace(' (', f' ({e.scheme}, ', 1)})" if text.endswith(")")
                else f"{text} ({e.scheme})")
    return text + (DERIVED[suffix][0] if suffix else "")


def short_label(id: str) -> str:
    """Tick-label text of ``id`` (its label when it has no short one)."""
    e, suffix = _split(id)
    return (e.short or e.label) + (DERIVED[suffix][0] if suffix else "")


def color(id: str) -> str:
    """The colour of ``id``: its own, or that of the id it takes its colour from."""
    e, _ = _split(id)
    seen = [e.id]
    while e.color is None:
        if e.color_of is None or e.color_of in seen:
            raise UnknownId(f"{e.id!r} in {_FILE} has no colour (own or via color_of: {seen})")
        seen.append(e.color_of)
        e = entry(e.color_of)
    return e.color


def scheme(id: str) -> Optional[str]:
    """W8A8 / W8A16 / W4A16 / W16A16, or None where the id has none (a quantiser, a copy)."""
    return _split(id)[0].scheme


def activation(id: str) -> Optional[str]:
    """The activation precision of ``id``'s scheme ('A8', 'A16'), or None."""
    s = scheme(id)
    return s[s.index("A"):] if s else None


def count(id: str, *, M=1, N=None, K=None, **opts):
    """FLOPs and bytes of one call of arm ``id`` at (M, N, K) (an ``arms.counts.Count``); a
    quantiser takes (M, K), a dequantisation pass (N, K). ``opts`` go to the rule (e.g.
    ``out_bytes=4`` for seed 001's fp32-output kernels)."""
    e, _ = _split(id)
    if e.count is None:
        raise UnknownId(f"{e.id!r} has no count in the arm registry ({_FILE}); the kernels behind "
                        "notebook 00's ceilings count their own launch configuration")
    from . import counts

    rule, *args = e.count
    return counts.RULES[rule](*args, M=M, N=N, K=K, **opts)


#: ids of other people's kernels (issue 17) start with this
PEER_PREFIX = "peer_"
#: the one style every peer is drawn in, and fp8lab's own arms' (matplotlib keyword arguments)
PEER_STYLE = {"ls": "-.", "marker": "D", "mfc": "none"}
OWN_STYLE = {"ls": "-", "marker": "o"}


def is_peer(id: str) -> bool:
    """True for a peer arm (another library's kernel), False for fp8lab's own ids."""
    return _split(id)[0].id.startswith(PEER_PREFIX)


def style(id: str) -> dict:
    """Line style of ``id`` in a figure: peers dash-dotted with open diamonds (dashes already mean
    "with activation quantisation" in notebooks 05 and 11), everything else solid
    with filled circles (colours: :func:`color`)."""
    return dict(PEER_STYLE if is_peer(id) else OWN_STYLE)
