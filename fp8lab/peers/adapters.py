"""One adapter per peer: fp8lab's generated weights -> the peer's own operands (through the
peer's own quantisation and packing functions) -> :class:`~fp8lab.peers.harness.Prepared`.

The float64 reference weights come from what the peer stored (its codes and scales as its
kernel reads them, or its own dequantise function), never from fp8lab's emulators. GPU only;
each adapter imports its peer lazily and raises :class:`~fp8lab.peers.discover.PeerUnavailable`
(-> a not-run row) for a shape or GPU the peer does not support, naming the constraint.

The vLLM (Triton block FP8, group quantiser) and sgl-kernel adapters are written against those
libraries' public Python APIs and have not run on the shared H200 (their wheels are over its
transfer limit): an API that moved in another version gives a not-run row naming the version
and the error. vLLM's Marlin GEMMs, vLLM's CUTLASS blockwise GEMM and DeepGEMM run there, built
from their own sources (fp8lab.peers.vllm_marlin, fp8lab.peers.vllm_cutlass, fp8lab.peers.build).
"""

from __future__ import annotations

import copy
import math
import os

from . import discover
from .discover import PeerUnavailable, import_marlin, import_peer_module
from .harness import Prepared
from ..emulate import blockscale

__all__ = ["WEIGHT_ONLY", "BLOCKWISE", "QUANTISERS", "dense_weight"]


def dense_weight(N: int, K: int, seed: int = 0, device="cuda"):
    """(N, K) fp32: the weights every weight-only peer quantises, drawn the way the decode
    sweep draws cuBLAS BF16's (0.02 N(0, 1), the same generator seed)."""
    import torch

    g = torch.Generator(device=device).manual_seed(seed)
    return 0.02 * torch.randn(N, K, device=device, generator=g)


def _need(cond: bool, msg: str) -> None:
    if not cond:
        raise PeerUnavailable(msg)


def _device():
    import torch

    return f"cuda:{torch.cuda.current_device()}"


# ------------------------------------------------------------------------------------------
# weight-only: prepare(w (N, K) fp32 cuda) -> Prepared; call(state, x (M, K), out) -> (M, N)
# ------------------------------------------------------------------------------------------
def marlin_int4(w) -> Prepared:
    """The original Marlin: fp16 activations, INT4 weights with fp16 scales per 128 along K.
    Scales are Marlin's test recipe (max |w| of the group / 7.5, so codes span 0..15 around 8);
    ``marlin.Layer.pack`` rounds, clamps and permutes them as Marlin's users do."""
    import torch

    marlin = import_marlin()
    N, K = w.shape
    _need(K % 128 == 0 and N % 256 == 0, f"Marlin needs K % 128 == 0 and N % 256 == 0, got N={N}, K={K}")
    g = 128
    maxq = 15
    wt = w.t().contiguous().half()                                     # (K, N) fp16
    grp = wt.reshape(K // g, g, N)
    s = (grp.abs().amax(dim=1) * (2 / maxq)).clamp_min(1e-6).half()    # (K/g, N) fp16
    q = torch.clamp(torch.round(grp / s[:, None, :]).int() + (maxq + 1) // 2, 0, maxq)
    fake = ((q - (maxq + 1) // 2).half() * s[:, None, :]).reshape(K, N)   # (K, N) fp16 fake-quantised
    del grp, q
    layer = marlin.Layer(K, N, groupsize=g).to(w.device)
    linear = torch.nn.Linear(K, N, bias=False, device=w.device, dtype=torch.half)
    linear.weight.data = fake.t().contiguous()
    layer.pack(linear, s.t().contiguous())                             # Marlin's own quantise + pack
    w_ref = fake.t().double()                                          # (N, K): what pack encoded
    del linear, fake
    state = (layer.B, layer.s, torch.zeros(N // 128 * 16, dtype=torch.int, device=w.device))

    def call(st, x, out):
        B, sc, ws = st
        marlin.mul(x, B, out, sc, ws, -1, -1, -1, 16)
        return out

    return Prepared(state, call, lambda st: (st[0].clone(), st[1].clone(), torch.zeros_like(st[2])),
                    lambda st: (st[0], st[1]), w_ref, "fp16", takes_out=True, config=_marlin_config())


def _marlin_config() -> str:
    """Marlin's config column: its settings, and which build ran when it is not the source as it is."""
    from .discover import MARLIN_CHOICE

    v = MARLIN_CHOICE.get("variant", "as-is")
    extra = "" if v == "as-is" else f"; build {v} (L2 evict_first hint removed), probes: {MARLIN_CHOICE.get('why', '')}"
    return "groupsize 128, max_par 16" + extra


def _gemlite_layer_call(st, x, out):
    return st.forward_auto_no_warmup(x)


def _gemlite_weights(st):
    return (st.W_q, st.scales, st.zeros if st.zeros.numel() else None)


def _gemlite_prepared(layer, w_ref, config):
    # gemlite ships tuned configs for some GPUs (matched by device name); elsewhere (the H200
    # among them) its first call per shape autotunes: the row says which
    from gemlite import core

    tag = getattr(core, "selected_tag", None)
    cache = (f"configs {os.path.basename(tag)}" if tag else
             f"autotuned here (no shipped config for this GPU; {discover.autotune_note()})")
    return Prepared(layer, _gemlite_layer_call, copy.deepcopy, _gemlite_weights, w_ref, "bf16", takes_out=False,
                    config=f"{config}; {cache}")


def gemlite_w8a16(w, fp8: bool) -> Prepared:
    """gemlite's A16W8 (FP8 e4m3 or INT8 codes, one fp32 scale per output channel): its own
    ``from_weights`` quantises and packs; the reference is its stored codes x scales."""
    import torch
    from gemlite import helper

    cls = helper.A16W8_FP8 if fp8 else helper.A16W8_INT8
    layer = cls(device=_device(), dtype=torch.bfloat16).from_weights(w.to(torch.bfloat16))
    Wq, sc = layer.W_q, layer.scales                                   # (K, N) codes, (1, N) fp32
    _need(Wq.dim() == 2 and Wq.element_size() == 1, f"unexpected gemlite W_q {tuple(Wq.shape)} {Wq.dtype}")
    w_ref = (Wq.double() * sc.double().reshape(1, -1)).t().contiguous()
    return _gemlite_prepared(layer, w_ref, f"W_group_mode {layer.W_group_mode}")


def gemlite_w4a16_int4(w, group: int = 128) -> Prepared:
    """gemlite's A16W4_HQQ_INT: asymmetric INT4 codes with a scale and a zero point per group of
    128 along K (min-max, HQQ's layout without its optimiser); gemlite packs them and stores
    the zero as -zero * scale in bf16. The reference is codes x its stored scale + its stored zero."""
    import torch
    from gemlite import helper

    N, K = w.shape
    _need(K % group == 0, f"K must be a multiple of {group}, got {K}")
    grp = w.reshape(N, K // group, group)
    lo, hi = grp.amin(-1), grp.amax(-1)
    scale = ((hi - lo) / 15).clamp_min(1e-8)
    zero = -lo / scale
    q = torch.clamp(torch.round(grp / scale[..., None] + zero[..., None]), 0, 15).to(torch.uint8).reshape(N, K)
    layer = helper.A16W4_HQQ_INT(device=_device(), dtype=torch.bfloat16).from_weights(
        q, scale.to(torch.bfloat16), zero.to(torch.bfloat16))
    sc = layer.scales.double()                                         # (K/g, N)
    zs = layer.zeros.double()
    if layer.W_group_mode == 4:                                        # W = q * scale + (-zero * scale)
        w_ref = q.double().reshape(N, K // group, group) * sc.t()[..., None] + zs.t()[..., None]
    else:                                                              # W = (q - zero) * scale
        w_ref = (q.double().reshape(N, K // group, group) - zs.t()[..., None]) * sc.t()[..., None]
    return _gemlite_prepared(layer, w_ref.reshape(N, K), f"group {group}, W_group_mode {layer.W_group_mode}")


def gemlite_w4a16_nvfp4(w) -> Prepared:
    """gemlite's A16W4_NVFP: its own NVFP4 quantiser (e2m1 codes, e4m3 scale per 16, one fp32
    tensor scale), packed by ``from_weights``; the reference is its own ``dequantize``."""
    import torch
    from gemlite import helper
    from gemlite.quant_utils import WeightQuantizerMXFP

    N, K = w.shape
    _need(K % 16 == 0, f"K must be a multiple of 16, got {K}")
    qz = WeightQuantizerMXFP(device=_device(), compute_dtype=torch.bfloat16)
    wb = w.to(torch.bfloat16)
    Wq0, sc0, meta = qz.quantize_nvfp4(wb, index=True)                # (N*K/16, 16) codes, (N*K/16, 1) e4m3
    # its own dequantise, on the shapes its quantiser returns (one scale row per 16 codes); the
    # kernel multiplies by 1 / meta_scale (A16W4_NVFP stores the inverse)
    w_ref = qz.dequantize(Wq0, sc0, shape=(N, K), dtype=torch.float32, meta_scales=1.0 / meta).double()
    Wq, sc = Wq0.view(N, K), sc0.view(N, K // 16)
    layer = helper.A16W4_NVFP(device=_device(), dtype=torch.bfloat16).from_weights(Wq, scales=sc, meta_scale=meta)
    return _gemlite_prepared(layer, w_ref, "group 16")


def _vllm_version() -> str:
    import importlib.metadata as md

    try:
        return md.version("vllm")
    except md.PackageNotFoundError:
        return "?"


#: vLLM's defaults for the Marlin GEMM's reduction (VLLM_MARLIN_USE_ATOMIC_ADD unset; fp32 reduce)
_VLLM_MARLIN_REDUCE = dict(use_atomic_add=False, use_fp32_reduce=True)


def _vllm_marlin():
    from . import vllm_marlin

    return vllm_marlin.package()


def _vllm_marlin_gptq(w, type_name: str, group: int) -> Prepared:
    """vLLM's GPTQ-Marlin on ``type_name`` codes (uint4b8, uint8b128: symmetric, no zero points,
    no act-order), ``group`` elements per bf16 scale along K (-1: one per output channel). Its
    test helper ``marlin_quantize`` quantises, repacks and returns its own dequantised weights
    (the reference); the call is the GEMM ``apply_gptq_marlin_linear`` makes under vLLM's defaults."""
    import torch

    vq = _vllm_marlin()
    N, K = w.shape
    _need(K % 128 == 0 and N % 64 == 0, f"vLLM Marlin needs K % 128 == 0 and N % 64 == 0, got N={N}, K={K}")
    wtype = getattr(vq.scalar_types, type_name)
    w_ref_kn, q_w, s, g_idx, sort_idx, _ = vq.marlin_utils_test.marlin_quantize(
        w.t().contiguous().to(torch.bfloat16), wtype, group, False)
    ws = vq.marlin_utils.marlin_make_workspace_new(w.device)
    zp = vq.marlin_utils.marlin_make_empty_g_idx(w.device)              # symmetric: no zero points
    state = (q_w, s, g_idx, sort_idx, ws, zp)

    def call(st, x, out):
        qw, sc, gi, si, wsp, z = st
        return vq.gptq_marlin_gemm(x, None, qw, sc, None, z, gi, si, wsp, wtype, size_m=x.shape[0], size_n=N,
                                   size_k=K, is_k_full=True, is_zp_float=False, **_VLLM_MARLIN_REDUCE)

    per = "per output channel" if group == -1 else f"group {group}"
    return Prepared(state, call, lambda st: tuple(t.clone() for t in st), lambda st: (st[0], st[1]),
                    w_ref_kn.t().double().contiguous(), "bf16",
                    config=f"{type_name} {per}, bf16 activations; {_vllm_marlin_source()}")


def _vllm_marlin_source() -> str:
    from . import vllm_marlin

    return vllm_marlin.version()


def vllm_marlin_int4(w) -> Prepared:
    """vLLM's GPTQ-Marlin INT4 (uint4b8 codes, group 128), vLLM's choice for GPTQ INT4 checkpoints."""
    return _vllm_marlin_gptq(w, "uint4b8", 128)


def vllm_marlin_int8(w) -> Prepared:
    """vLLM's GPTQ-Marlin INT8 (uint8b128 codes, one bf16 scale per output channel): the same
    bytes per weight and the same scales as its FP8 Marlin, so the pair differs only in dequant
    (claim C4)."""
    return _vllm_marlin_gptq(w, "uint8b128", -1)


def vllm_marlin_fp8(w) -> Prepared:
    """vLLM's FP8 Marlin (weight-only FP8; vLLM's choice on GPUs without FP8 GEMMs): per-channel
    e4m3 codes, quantised and repacked by its ``marlin_quant_fp8_torch``, which also returns its
    own dequantised weights (the reference); the call is the GEMM ``apply_fp8_marlin_linear``
    makes under vLLM's defaults."""
    import torch

    vq = _vllm_marlin()
    N, K = w.shape
    _need(K % 128 == 0 and N % 64 == 0, f"vLLM Marlin needs K % 128 == 0 and N % 64 == 0, got N={N}, K={K}")
    ref_kn, qw, sc = vq.marlin_utils_fp8.marlin_quant_fp8_torch(w.to(torch.bfloat16), -1)
    ws = vq.marlin_utils.marlin_make_workspace_new(w.device)
    wtype = vq.scalar_types.float8_e4m3fn

    def call(st, x, out):
        return vq.gptq_marlin_gemm(x, None, st[0], st[1], None, None, None, None, st[2], wtype, size_m=x.shape[0],
                                   size_n=N, size_k=K, is_k_full=True, is_zp_float=False, **_VLLM_MARLIN_REDUCE)

    return Prepared((qw, sc, ws), call, lambda st: (st[0].clone(), st[1].clone(), torch.zeros_like(st[2])),
                    lambda st: (st[0], st[1]), ref_kn.t().double().contiguous(), "bf16",
                    config=f"marlin_quant_fp8_torch, per output channel, bf16 activations; {_vllm_marlin_source()}")


WEIGHT_ONLY = {
    "peer_marlin_int4": marlin_int4,
    "peer_gemlite_w8a16_fp8": lambda w: gemlite_w8a16(w, fp8=True),
    "peer_gemlite_w8a16_int8": lambda w: gemlite_w8a16(w, fp8=False),
    "peer_gemlite_w4a16_int4": gemlite_w4a16_int4,
    "peer_gemlite_w4a16_nvfp4": gemlite_w4a16_nvfp4,
    "peer_vllm_marlin_fp8": vllm_marlin_fp8,
    "peer_vllm_marlin_int4": vllm_marlin_int4,
    "peer_vllm_marlin_int8": vllm_marlin_int8,
}


# ------------------------------------------------------------------------------------------
# blockwise W8A8: prepare(x (M, K) bf16, w (N, K) fp32) -> Prepared whose state holds the
# peer-quantised activations too (quantised outside the timed call, as fp8lab's quant=none rows)
# ------------------------------------------------------------------------------------------
def _blockwise_prepared(state, call, a, sa, b, sb, config="", with_quant=None):
    """Reference weights and activations from the peer's own codes and fp32 scales.
    ``with_quant(state, x)``: the peer's activation quantiser and GEMM in one call (x bf16)."""
    N, K = b.shape
    M = a.shape[0]
    A = blockscale.dequant(a, sa.reshape(M, -1), (1, 128))
    B = blockscale.dequant(b, sb, (128, 128))
    return Prepared(state, call, lambda st: tuple(t.clone() for t in st), lambda st: (st[2], st[3]), B, "e4m3",
                    takes_out=False, config=config, extra={"ref_x": A, "with_quant": with_quant})


def torchao_blockwise(x, w) -> Prepared:
    """torchao's Triton ``blockwise_fp8_gemm`` with its own quantisers (1x128 activations,
    128x128 weights, fp32 scales, row-major)."""
    try:
        bq = import_peer_module("torchao.kernel.blockwise_quantization")
    except Exception as e:  # noqa: BLE001
        raise PeerUnavailable(f"torchao.kernel.blockwise_quantization not importable ({e})") from e
    N, K = w.shape
    _need(N % 128 == 0 and K % 128 == 0, f"torchao's weight quantiser needs N and K multiples of 128, got N={N}, K={K}")
    a, sa = bq.fp8_blockwise_act_quant(x.contiguous())
    b, sb = bq.fp8_blockwise_weight_quant(w.contiguous())
    def with_quant(st, x):
        qa, qs = bq.fp8_blockwise_act_quant(x)
        return bq.blockwise_fp8_gemm(qa, qs, st[2], st[3])

    return _blockwise_prepared((a, sa, b, sb), lambda st, _x, _o: bq.blockwise_fp8_gemm(st[0], st[1], st[2], st[3]),
                               a, sa, b, sb, with_quant=with_quant, config=f"autotuned here; {discover.autotune_note()}")


#: the name of vLLM's Triton block-FP8 GEMM in fp8_utils: w8a8_triton_block_scaled_mm today (0.34
#: has no other), w8a8_block_fp8_matmul in the releases before the rename
VLLM_TRITON_BLOCK_MM = ("w8a8_triton_block_scaled_mm", "w8a8_block_fp8_matmul")


def _vllm_triton_block_mm(fu):
    for name in VLLM_TRITON_BLOCK_MM:
        if callable(getattr(fu, name, None)):
            return getattr(fu, name)
    raise PeerUnavailable(f"vllm {_vllm_version()}: fp8_utils has none of {', '.join(VLLM_TRITON_BLOCK_MM)}")


def vllm_blockwise(x, w) -> Prepared:
    """vLLM's Triton block-FP8 GEMM (``w8a8_triton_block_scaled_mm``; ``w8a8_block_fp8_matmul`` before
    the rename) with its tuned config for this device and N, K where it ships one, else its default,
    and its ``per_token_group_quant_fp8``; weights by 128x128 blocks."""
    import torch

    try:
        from vllm.model_executor.layers.quantization.utils import fp8_utils as fu
    except Exception as e:  # noqa: BLE001
        raise PeerUnavailable(f"vllm {_vllm_version()}: fp8_utils not importable ({e})") from e
    N, K = w.shape
    a, sa = fu.per_token_group_quant_fp8(x.contiguous(), 128)
    nb, kb = math.ceil(N / 128), K // 128
    wp = torch.nn.functional.pad(w, (0, 0, 0, nb * 128 - N)).reshape(nb, 128, kb, 128)
    sb = (wp.abs().amax(dim=(1, 3)) / 448.0).clamp_min(1e-12)          # (nb, kb) fp32
    b = (wp / sb[:, None, :, None]).reshape(nb * 128, K)[:N].to(torch.float8_e4m3fn).contiguous()
    cfg = fu.get_w8a8_block_fp8_configs(N, K, 128, 128) if hasattr(fu, "get_w8a8_block_fp8_configs") else None
    mm = _vllm_triton_block_mm(fu)

    def call(st, _x, _o):
        return mm(st[0], st[2], st[1], st[3], [128, 128], output_dtype=torch.bfloat16)

    def with_quant(st, x):
        qa, qs = fu.per_token_group_quant_fp8(x, 128)
        return mm(qa, st[2], qs, st[3], [128, 128], output_dtype=torch.bfloat16)

    return _blockwise_prepared((a, sa, b, sb), call, a, sa, b, sb, with_quant=with_quant,
                               config="tuned config for this device" if cfg else "default config")


_SGL_EXTRA: dict = {}


def _sgl_group_quant_kwargs(fn) -> dict:
    """The keyword arguments sgl-kernel's per-token-group quantiser takes beyond the seven every
    version has: fp32 scales (``scale_ue8m0=False``, a flag of newer versions) and its first
    kernel (``enable_v2=False``: 0.3.21 reads SGLANG_PER_TOKEN_GROUP_QUANT_8BIT_V2 through
    ``sglang.srt.utils`` when it is left None, i.e. imports the whole sglang package, which a box
    with sgl-kernel alone does not have)."""
    import inspect

    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):       # a builtin without a signature: the seven only
        return {}
    return {k: False for k in ("scale_ue8m0", "enable_v2") if k in params}


def _sgl_group_quant(sgl_kernel, x, q, s):
    """sgl-kernel's per-token-group FP8 quantiser (``sgl_per_token_group_quant_fp8``, since 0.3
    an alias of ``sgl_per_token_group_quant_8bit``) with fp32 scales."""
    fn = sgl_kernel.sgl_per_token_group_quant_fp8
    if "kwargs" not in _SGL_EXTRA:
        _SGL_EXTRA["kwargs"] = _sgl_group_quant_kwargs(fn)
    fn(x, q, s, 128, 1e-10, -448.0, 448.0, **_SGL_EXTRA["kwargs"])


def sglang_blockwise(x, w) -> Prepared:
    """sgl-kernel's CUTLASS ``fp8_blockwise_scaled_mm`` with its ``sgl_per_token_group_quant_fp8``
    (column-major activation scales, as it requires)."""
    import torch

    try:
        import sgl_kernel
    except Exception as e:  # noqa: BLE001
        raise PeerUnavailable(f"sgl_kernel not importable ({e})") from e
    M, K = x.shape
    N = w.shape[0]
    _need(N % 128 == 0 and K % 128 == 0, f"sgl-kernel needs N and K multiples of 128, got N={N}, K={K}")
    a = torch.empty(M, K, dtype=torch.float8_e4m3fn, device=x.device)
    sa = torch.empty(K // 128, M, dtype=torch.float32, device=x.device).t()   # (M, K/128) M-major
    _sgl_group_quant(sgl_kernel, x.contiguous(), a, sa)
    wp = w.reshape(N // 128, 128, K // 128, 128)
    sb = (wp.abs().amax(dim=(1, 3)) / 448.0).clamp_min(1e-12)
    b = (wp / sb[:, None, :, None]).reshape(N, K).to(torch.float8_e4m3fn)
    bt = b.t()                                                          # (K, N) column-major view
    sbt = sb.t()

    def call(st, _x, _o):
        return sgl_kernel.fp8_blockwise_scaled_mm(st[0], st[4], st[1], st[5], torch.bfloat16)

    def with_quant(st, x):
        m = x.shape[0]
        qa = torch.empty(m, K, dtype=torch.float8_e4m3fn, device=x.device)
        qs = torch.empty(K // 128, m, dtype=torch.float32, device=x.device).t()
        _sgl_group_quant(sgl_kernel, x, qa, qs)
        return sgl_kernel.fp8_blockwise_scaled_mm(qa, st[4], qs, st[5], torch.bfloat16)

    st = (a, sa, b, sb, bt, sbt)
    p = _blockwise_prepared(st, call, a, sa, b, sb, with_quant=with_quant)
    # copies keep the layouts the kernel needs: M-major activation scales, column-major B views
    p.clone = lambda s: (lambda b2, sb2: (s[0].clone(), s[1].t().clone().t(), b2, sb2, b2.t(), sb2.t()))(
        s[2].clone(), s[3].clone())
    return p


def _deepgemm_casts(dg):
    """DeepGEMM's own quantisers (per_token_cast_to_fp8, per_block_cast_to_fp8): deep_gemm.utils
    (2.x), else deep_gemm.utils.math; PeerUnavailable naming the version otherwise."""
    for mod in ("deep_gemm.utils", "deep_gemm.utils.math"):
        try:
            m = import_peer_module(mod)
            return m.per_token_cast_to_fp8, m.per_block_cast_to_fp8
        except (ImportError, AttributeError):
            continue
    raise PeerUnavailable(f"deep_gemm {getattr(dg, '__version__', '?')} has no per_token_cast_to_fp8 / "
                          "per_block_cast_to_fp8 in deep_gemm.utils")


def _deepgemm_build_note() -> str:
    """DeepGEMM's config column: which build ran when it is not the source as it is, and why."""
    from .discover import DEEPGEMM_CHOICE

    v = DEEPGEMM_CHOICE.get("variant", "as-is")
    what = {"deepbind": "imported with RTLD_DEEPBIND", "static-libstdcxx": "libstdc++ linked statically"}
    return "" if v == "as-is" else f"; build {v} ({what.get(v, v)}), probes: {DEEPGEMM_CHOICE.get('why', '')}"


def _strided_clone(t):
    """A copy with ``t``'s strides (clone() makes a padded, MN-major scale tensor row-major)."""
    import torch

    return torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=t.device).copy_(t)


def deepgemm_blockwise(x, w) -> Prepared:
    """DeepGEMM's ``fp8_gemm_nt(a=(codes, sfa), b=(codes, sfb), d)`` on Hopper: 1x128 activation and
    128x128 weight scales in fp32 (packed UE8M0 is its SM100 format, hence ``use_ue8m0=False``),
    operands from its own quantisers. It wants the activation scales MN-major and TMA-aligned and
    transposes row-major ones inside every call (a kernel of its own): they are laid out once
    here with its ``get_mn_major_tma_aligned_tensor``, as a caller that feeds it keeps them, and
    ``with_quant`` passes its quantiser's row-major scales, as its own tests do. Each (N, K) is
    compiled by its JIT (the box's nvcc) at the first call, the check, never in the timing."""
    import torch

    dg = discover.import_deepgemm()
    per_token, per_block = _deepgemm_casts(dg)
    M, K = x.shape
    N = w.shape[0]
    _need(K % 128 == 0 and N % 64 == 0, f"DeepGEMM is run here for K % 128 == 0 and N % 64 == 0 (its tests' "
                                        f"shapes), got N={N}, K={K}")
    gemm = getattr(dg, "fp8_gemm_nt", None) or getattr(dg, "gemm_fp8_fp8_bf16_nt", None)
    _need(gemm is not None, f"deep_gemm {getattr(dg, '__version__', '?')} has no fp8_gemm_nt")
    align = getattr(dg, "get_mn_major_tma_aligned_tensor", None) or getattr(dg, "get_col_major_tma_aligned_tensor",
                                                                            None)
    a, sa = per_token(x.contiguous(), use_ue8m0=False)
    b, sb = per_block(w.contiguous(), use_ue8m0=False)
    sa_k = align(sa) if align is not None else sa

    def call(st, _x, _o):
        out = torch.empty(st[0].shape[0], st[2].shape[0], dtype=torch.bfloat16, device=st[0].device)
        gemm((st[0], st[1]), (st[2], st[3]), out)
        return out

    def with_quant(st, x):
        qa, qs = per_token(x, use_ue8m0=False)
        return call((qa, qs, st[2], st[3]), None, None)

    how = "activation scales laid out MN-major, TMA-aligned once" if align is not None else \
        "activation scales row-major (transposed inside each call: no layout helper in this version)"
    p = _blockwise_prepared((a, sa_k, b, sb), call, a, sa, b, sb, with_quant=with_quant,
                            config=f"its JIT's kernel for this N, K; {how}{_deepgemm_build_note()}")
    p.clone = lambda s: tuple(_strided_clone(t) for t in s)
    return p


def _group_quant_1x128(x):
    """vLLM's per-token-group FP8 recipe (its ``per_token_group_quant_fp8``: scale = max(amax of
    the 128 elements, 1e-10) / 448, codes = x / scale saturated to e4m3), in torch ops: that
    quantiser is not in kernels-community's source copy. (M, K) e4m3 and (M, K/128) fp32."""
    import torch

    M, K = x.shape
    g = x.float().reshape(M, K // 128, 128)
    s = g.abs().amax(dim=2).clamp_min(1e-10) / 448.0
    q = (g / s[:, :, None]).clamp(-448.0, 448.0).reshape(M, K).to(torch.float8_e4m3fn)
    return q, s


def vllm_cutlass_blockwise(x, w) -> Prepared:
    """vLLM's CUTLASS blockwise FP8 GEMM for Hopper (``cutlass_scaled_mm_blockwise_sm90_fp8``, built
    from vLLM 0.34's source: fp8lab.peers.vllm_cutlass), called as vLLM 0.34's
    ``CutlassFp8BlockScaledMMKernel`` calls it: activations quantised per 1 x 128 with M-major scales
    (by vLLM's CUDA quantiser where it is built, fp8lab.peers.vllm_quant; else torch ops with its
    recipe), no padding of M (the kernel swaps the operands when M is not a multiple of 4), the
    (N, K) weight passed transposed (column-major) with its 128 x 128 scales transposed (K-major).
    The weights are quantised by 128 x 128 blocks (amax / 448, as vLLM's tests do)."""
    import torch

    from . import discover as _d, vllm_cutlass

    op = vllm_cutlass.ops().blockwise_sm90_fp8
    M, K = x.shape
    N = w.shape[0]
    _need(N % 128 == 0 and K % 128 == 0, f"vLLM's blockwise CUTLASS GEMM needs N and K multiples of 128 (one "
                                         f"scale per 128 x 128 block), got N={N}, K={K}")
    try:
        quant, qname = _vllm_cuda_quant(column_major=True), "vLLM's CUDA quantiser (built from its source)"
    except _d.PeerUnavailable as e:
        def quant(x_):
            q_, s_ = _group_quant_1x128(x_)
            return q_, s_.t().contiguous().t()                          # M-major, as vLLM's quantiser makes them
        qname = f"torch ops with vLLM's recipe (its CUDA quantiser: {str(e)[:80]})"
    a, sa = quant(x.contiguous())
    wp = w.float().reshape(N // 128, 128, K // 128, 128)
    sb = (wp.abs().amax(dim=(1, 3)) / 448.0).clamp_min(1e-12)          # (N/128, K/128) fp32
    b = (wp / sb[:, None, :, None]).reshape(N, K).to(torch.float8_e4m3fn).contiguous()

    def gemm(a_, s_a, bw, s_b):
        _need(a_.stride(1) == 1 and s_a.stride(0) == 1 and bw.stride(1) == 1,
              "vLLM's blockwise GEMM wants row-major activations, M-major activation scales, a row-major weight")
        out = torch.empty(a_.shape[0], bw.shape[0], dtype=torch.bfloat16, device=a_.device)
        op(out, a_, bw.t(), s_a, s_b.t())
        return out

    def with_quant(st, x_):
        qa, qs = quant(x_)
        return gemm(qa, qs, st[2], st[3])

    own = qname.startswith("vLLM's CUDA")        # timed with a quantiser only when it is vLLM's own
    p = _blockwise_prepared((a, sa, b, sb), lambda st, _x, _o: gemm(*st), a, sa, b, sb,
                            with_quant=with_quant if own else None,
                            config=f"no padding (vLLM 0.34 on sm_90; swap-AB when M % 4 != 0); activations: {qname}; "
                                   f"{vllm_cutlass.version()}")
    p.clone = lambda s: tuple(_strided_clone(t) for t in s)
    return p


def vllm_triton_blockwise(x, w) -> Prepared:
    """vLLM's Triton block-FP8 GEMM run from vLLM's source (fp8lab.peers.vllm_triton), launched as
    its ``w8a8_triton_block_scaled_mm`` launches it, with its tuned config for this device and
    (N, K) where vLLM ships one, else its default. Activations quantised by vLLM's own CUDA
    quantiser where it is built (fp8lab.peers.vllm_quant: what vLLM runs on CUDA), else by torch
    ops with its recipe; weights by 128 x 128 blocks (amax / 448, as vLLM's tests do)."""
    import torch

    from . import discover as _d, vllm_triton

    vllm_triton.kernel()
    M, K = x.shape
    N = w.shape[0]
    _need(N % 128 == 0 and K % 128 == 0, f"vLLM's block-FP8 weights are 128 x 128 blocks here: N and K multiples "
                                         f"of 128, got N={N}, K={K}")
    try:
        quant, qname = _vllm_cuda_quant(), "vLLM's CUDA quantiser (built from its source)"
    except _d.PeerUnavailable as e:
        quant, qname = _group_quant_1x128, f"torch ops with vLLM's recipe (its CUDA quantiser: {str(e)[:80]})"
    a, sa = quant(x.contiguous())
    wp = w.float().reshape(N // 128, 128, K // 128, 128)
    sb = (wp.abs().amax(dim=(1, 3)) / 448.0).clamp_min(1e-12)
    b = (wp / sb[:, None, :, None]).reshape(N, K).to(torch.float8_e4m3fn).contiguous()
    cfg, where = vllm_triton.pick_config(M, N, K, torch.cuda.get_device_name(x.device))

    def call(st, _x, _o):
        return vllm_triton.matmul(st[0], st[2], st[1], st[3], cfg)

    def with_quant(st, x):
        qa, qs = quant(x)
        return vllm_triton.matmul(qa, st[2], qs, st[3], cfg)

    own = qname.startswith("vLLM's CUDA")        # timed with a quantiser only when it is vLLM's own
    return _blockwise_prepared((a, sa, b, sb), call, a, sa, b, sb, with_quant=with_quant if own else None,
                               config=f"{where}; activations: {qname}; {vllm_triton.version()}")


BLOCKWISE = {
    "peer_torchao_blockwise": torchao_blockwise,
    "peer_vllm_blockwise": vllm_blockwise,
    "peer_sglang_blockwise": sglang_blockwise,
    "peer_deepgemm": deepgemm_blockwise,
    "peer_vllm_cutlass_blockwise": vllm_cutlass_blockwise,
    "peer_vllm_triton_blockwise": vllm_triton_blockwise,
}


# ------------------------------------------------------------------------------------------
# per-token-group quantisers: fn(x (M, K) bf16) -> (q (M, K) e4m3, s (M, K/128) fp32)
# ------------------------------------------------------------------------------------------
def vllm_quant_group():
    try:
        from vllm.model_executor.layers.quantization.utils.fp8_utils import per_token_group_quant_fp8
    except Exception as e:  # noqa: BLE001
        raise PeerUnavailable(f"vllm {_vllm_version()}: per_token_group_quant_fp8 not importable ({e})") from e
    return lambda x: per_token_group_quant_fp8(x, 128)


def sglang_quant_group():
    import torch

    try:
        import sgl_kernel
    except Exception as e:  # noqa: BLE001
        raise PeerUnavailable(f"sgl_kernel not importable ({e})") from e

    def fn(x):
        M, K = x.shape
        q = torch.empty(M, K, dtype=torch.float8_e4m3fn, device=x.device)
        s = torch.empty(M, K // 128, dtype=torch.float32, device=x.device)
        _sgl_group_quant(sgl_kernel, x, q, s)
        return q, s
    return fn


def torchao_quant_group():
    """torchao's Triton ``fp8_blockwise_act_quant``: e4m3 codes and one fp32 scale per 128 of a
    token (the quantiser its blockwise GEMM takes)."""
    try:
        bq = import_peer_module("torchao.kernel.blockwise_quantization")
    except Exception as e:  # noqa: BLE001
        raise PeerUnavailable(f"torchao.kernel.blockwise_quantization not importable ({e})") from e
    return lambda x: bq.fp8_blockwise_act_quant(x, 128)


def _vllm_cuda_quant(column_major: bool = False):
    """vLLM's CUDA per-token-group FP8 quantiser built here from vLLM's source
    (fp8lab.peers.vllm_quant), called as vLLM's ``per_token_group_quant_fp8`` calls it on CUDA:
    fresh (M, K) e4m3 codes and (M, K/128) fp32 scales, row-major or M-major (the kernel reads the
    layout from the strides), eps 1e-10, the e4m3 range +-448, no UE8M0 rounding."""
    import torch

    from . import vllm_quant

    op = vllm_quant.ops().per_token_group_fp8_quant

    def fn(x):
        M, K = x.shape
        q = torch.empty(M, K, dtype=torch.float8_e4m3fn, device=x.device)
        s = (torch.empty(K // 128, M, dtype=torch.float32, device=x.device).t() if column_major
             else torch.empty(M, K // 128, dtype=torch.float32, device=x.device))
        op(x, q, s, 128, 1e-10, -448.0, 448.0, False, column_major, False)
        return q, s
    return fn


def vllm_cuda_quant_group():
    """The 06b peer: vLLM's CUDA quantiser with row-major scales (as 06b compares them)."""
    return _vllm_cuda_quant(column_major=False)


def sglang_jit_quant_group():
    """SGLang's CUDA per-token-group quantiser built here from sglang's wheel (fp8lab.peers.sglang_quant),
    called as sglang's ``per_token_group_quant`` calls it for a flat (M, K) bf16 input: fresh (M, K)
    e4m3 codes and row-major (M, K/128) fp32 scales, no UE8M0 rounding, programmatic dependent
    launch on sm_90 and newer (sglang's is_arch_support_pdl)."""
    import torch

    from . import discover, sglang_quant

    fn_c = sglang_quant.ops()
    pdl = (discover._gpu_sm() or 0) >= 90

    def fn(x):
        M, K = x.shape
        q = torch.empty(M, K, dtype=torch.float8_e4m3fn, device=x.device)
        s = torch.empty(M, K // 128, dtype=torch.float32, device=x.device)
        sglang_quant.quantise(fn_c, x, q, s, pdl=pdl)
        return q, s
    return fn


QUANTISERS = {"peer_vllm_quant_group": vllm_quant_group, "peer_sglang_quant_group": sglang_quant_group,
              "peer_torchao_quant_group": torchao_quant_group, "peer_vllm_cuda_quant_group": vllm_cuda_quant_group,
              "peer_sglang_jit_quant_group": sglang_jit_quant_group}
