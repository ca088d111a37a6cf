"""1x128 per-token activation quantisers (claim B6): bf16 (M, K) -> e4m3 (M, K) + fp32 (M, K/128).

Three CUDA kernels (``quant_act.cu``), one arithmetic:

- ``quant_act_naive``: the seed's launch: a 32 x 32 = 1024-thread block per 128-group, of which
  32 threads work, and max |x| found by 128 ``atomicMax`` calls on one shared address.
- ``quant_act_warp``: one warp per group, 4 values per lane (8-byte loads), shuffle reduction.
- ``quant_act_16t``: 16 threads per group, 8 values per lane (16-byte loads), shuffle reduction
  inside each half-warp. (One warp per group with 16-byte loads would leave half the warp idle:
  the 16-byte-load variant is this one.)
- ``quant_act_warp_ilp``: the warp kernel built for bandwidth: 16-byte loads (one warp load = two
  groups), ``groups_per_warp`` (2 / 4 / 8) groups per warp with every load issued before the first
  reduction, both groups of a load reduced by the whole warp in one 5-step xor butterfly on packed
  15-bit maxima, and one reciprocal per group (3 FFMA per element, the IEEE quotient: see the
  comment at ``div_by_scale`` in the .cu) instead of a full division per element.
  ``persistent=True`` runs ``quant_act_warp_ilp_persistent``: the same per-chunk work (a chunk =
  ``groups_per_warp`` groups) on a grid no larger than what is resident at once (the launcher asks
  the CUDA occupancy API), each warp walking chunks with a grid stride and loading its next chunk
  before working on the current one, the grid sized so every warp gets the same number of chunks
  to within one (no tail wave). ``groups_per_warp='auto'`` (the default) picks the kernel and
  ``groups_per_warp`` from the launch shape: see :func:`auto_launch`. ``pdl=True`` (sm_90 and
  newer; the grid kernel, not the persistent one) launches it as a programmatic dependent launch:
  it may start while the kernel before it in the stream runs, waits for that kernel's results
  before its first load (``griddepcontrol.wait``) and at once lets the next kernel start
  launching, so back-to-back launches overlap their launch latency (what vLLM's quantiser does).

- ``quant_act_subwarp``: 8 lanes per group, 32 bytes (two 16-byte loads) per lane, four groups per
  warp reduced by one 3-step xor max inside each 8-lane segment, 16-byte code stores, a flat grid
  of one group per 8 lanes; ``quant_act_warp_ilp``'s per-element arithmetic (so its outputs, bit
  for bit). The work split of SGLang's per-token-group quantiser, which notebook 06b measured
  ahead of ``quant_act_warp_ilp`` at M >= 256 on the H200 (2026-12-04). ``pdl=True`` (sm_90+): a
  programmatic dependent launch that waits before its loads and by default releases the next
  kernel right after that wait (``pdl_release``). ``subwarp_form`` (issue 22's probe of what still separates it from SGLang's kernel;
  outputs bit for bit the same in all three): 'ef' (evict-first loads and stores, as every other
  kernel here), 'plain' (no evict-first hint: loads through the read-only path, where SGLang's
  are plain ld.global; stores with the default cache policy, as SGLang's), 'plain16' (the
  default: those, and one reciprocal per lane instead of one per 16-byte half, code signs
  restored on the packed codes). 'plain16' is the default because
  scripts/probes/quant.py timed it the fastest of the three, or within 2% of the fastest, at every
  M it timed (1 to 8192, K = 7168) on the H200, plain and as a programmatic dependent launch
  (2026-12-04).

``traffic_copy`` is a diagnostic, not a quantiser: ``quant_act_warp_ilp``'s loads and stores with
no arithmetic (codes = the high bytes of x, scales = 1), the ceiling of this launch shape; with
``pdl=True`` the same copy as a programmatic dependent launch (the ceiling of a PDL quantiser).

``pdl_release`` (with ``pdl=True``): where a PDL kernel lets the next kernel in the stream launch,
'after_wait' (before its loads: the default of all three; ``quant_act_warp_ilp`` has no other) or
'after_stores' (as SGLang's quantiser). The next kernel launches once every block of this one has
released or exited: released after the wait, that is as soon as the last block has started, so
the next kernel's blocks are resident and waiting when this one ends. Outputs do not depend on it
(every PDL kernel waits before it reads). Why 'after_wait' is the default:
scripts/probes/quant_pdl_overlap.py at 339820a (H200, K = 7168, CUDA-graph replay of back-to-back
launches, inputs rotated) timed subwarp releasing after the wait at 0.88 / 0.84 / 1.00 / 0.99 /
1.00 of its time releasing after the stores at M = 1 / 16 / 256 / 1024 / 4096 (1.03 against
1.17 us at M = 1), and the copy at 0.85 / 0.90 / 1.03 / 1.01 / 1.00.

Their output is the output of ``fp8lab.kernels.baselines.quant_act_reference`` run by torch on a
GPU, bit for bit: scale = amax * fp32(1/448) (torch's CUDA division by a Python scalar multiplies
by the reciprocal), q = e4m3(x / scale) with an IEEE division, round to nearest even, non-saturating.
``scale_rule='true_division'`` computes amax / 448 instead (what torch does on a CPU), kept to show
that the choice matters: the two scales differ in the last bit for about half of all groups.

:func:`quant_act_emulate` is the same computation in numpy + ml_dtypes (an independent CPU model).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

GROUP = 128
FP8_MAX = 448.0
VARIANTS = ("quant_act_naive", "quant_act_warp", "quant_act_16t", "quant_act_warp_ilp", "quant_act_subwarp")
THREADS = 256                           # warp, 16t and warp_ilp blocks (8 warps)
ILP_GROUPS_PER_WARP = (2, 4, 8)
ILP_DEFAULT_GROUPS_PER_WARP = "auto"   # quant_act_warp_ilp's default: auto_launch picks
RESIDENT_BLOCKS_PER_SM = 2048 // THREADS   # 8: threads bound the grid kernels' residency on sm_80..sm_90
# the binding's variant numbers (quant_act.cu, fp8lab_quant_act_launch)
_VARIANT_IDS = {"quant_act_naive": 0, "quant_act_warp": 1, "quant_act_16t": 2, "quant_act_subwarp": 12}
_ILP_IDS = {4: 3, 2: 4, 8: 5}
_PERSISTENT_IDS = {2: 6, 4: 7, 8: 8}
_TRAFFIC_COPY_ID = 9
SUBWARP_FORMS = ("ef", "plain", "plain16")
SUBWARP_DEFAULT_FORM = "plain16"
_SUBWARP_IDS = {"ef": 10, "plain": 11, "plain16": 12}
_PDL_FLAG = 0x100                       # quant_act.cu's kPdlFlag: the ilp grid kernels and subwarp with PDL
PDL_VARIANTS = ("quant_act_warp_ilp", "quant_act_subwarp")   # pdl=True applies to these (ilp: grid kernel only)
PDL_MIN_CAPABILITY = (9, 0)             # griddepcontrol and the launch attribute: sm_90 and newer
_EARLY_RELEASE_FLAG = 0x200             # quant_act.cu's kEarlyReleaseFlag (with _PDL_FLAG; subwarp and traffic_copy)
#: where a programmatic dependent launch lets the next kernel launch (``pdl_release``): right after
#: its wait, before its loads, or after its stores
PDL_RELEASES = ("after_wait", "after_stores")
#: each PDL kernel's release when ``pdl_release`` is None (see the module's text), and the releases it can do
PDL_DEFAULT_RELEASE = {"quant_act_warp_ilp": "after_wait", "quant_act_subwarp": "after_wait",
                       "traffic_copy": "after_wait"}
PDL_RELEASE_CHOICES = {"quant_act_warp_ilp": ("after_wait",), "quant_act_subwarp": PDL_RELEASES,
                       "traffic_copy": PDL_RELEASES}
SCALE_RULES = ("torch_cuda", "true_division")
SCALE_LAYOUTS = ("row", "m_major")
# Launch facts of the naive kernel (seed 001: "32 of 1024 threads do work", 128 atomics per group)
NAIVE_THREADS_PER_BLOCK = 1024
NAIVE_BUSY_THREADS = 32
NAIVE_ATOMICS_PER_GROUP = GROUP


def _need(cond, msg):
    if not cond:
        raise ValueError(msg)


def check_shape(M: int, K: int) -> None:
    """ValueError unless (M, K) is a shape the quantisers take (its bytes: ``arms.registry.count``)."""
    for name, v in (("M", M), ("K", K)):
        _need(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 1,
              f"{name} must be a positive integer, got {v!r}")
    _need(K % GROUP == 0, f"K must be a multiple of {GROUP}, got K={K}")


def ilp_launch(M: int, K: int, groups_per_warp: int = 4) -> dict:
    """Launch shape of quant_act_warp_ilp (what quant_act.cu's launch_ilp computes): one 256-thread
    block per 8 * groups_per_warp groups; bytes_in_flight_per_warp = 16 B x 32 lanes x loads."""
    check_shape(M, K)
    _need(groups_per_warp in ILP_GROUPS_PER_WARP,
          f"groups_per_warp must be one of {ILP_GROUPS_PER_WARP}, got {groups_per_warp!r}")
    groups = M * (K // GROUP)
    per_block = (THREADS // 32) * groups_per_warp
    blocks = -(-groups // per_block)
    _need(blocks <= 0x7FFFFFFF, f"grid of {blocks} blocks exceeds 2^31 - 1 (M * K too large)")
    return {"groups": groups, "threads": THREADS, "groups_per_block": per_block, "blocks": blocks,
            "loads_per_lane": groups_per_warp // 2, "bytes_in_flight_per_warp": 16 * 32 * (groups_per_warp // 2),
            "idle_warp_slots": blocks * (THREADS // 32) * groups_per_warp - groups}


def _positive_int(name, v):
    _need(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 1,
          f"{name} must be a positive integer, got {v!r}")


def persistent_launch(M: int, K: int, groups_per_warp: int, sms: int, blocks_per_sm: int) -> dict:
    """Grid of quant_act_warp_ilp_persistent (what quant_act.cu's persistent_blocks computes): C chunks
    of groups_per_warp groups over at most Wmax = sms x blocks_per_sm x 8 warps; sweeps
    n = ceil(C / Wmax); warps W = ceil(C / n), so every warp gets n or n - 1 chunks;
    blocks = ceil(W / 8). blocks_per_sm: resident blocks of that kernel (the launcher asks
    cudaOccupancyMaxActiveBlocksPerMultiprocessor; ptxas' register counts make it 4 to 6 on sm_90)."""
    check_shape(M, K)
    _need(groups_per_warp in ILP_GROUPS_PER_WARP,
          f"groups_per_warp must be one of {ILP_GROUPS_PER_WARP}, got {groups_per_warp!r}")
    _positive_int("sms", sms)
    _positive_int("blocks_per_sm", blocks_per_sm)
    groups = M * (K // GROUP)
    chunks = -(-groups // groups_per_warp)
    max_warps = sms * blocks_per_sm * (THREADS // 32)
    sweeps = -(-chunks // max_warps)
    warps = -(-chunks // sweeps)
    blocks = -(-warps // (THREADS // 32))
    return {"groups": groups, "chunks": chunks, "max_warps": max_warps, "sweeps": sweeps, "warps": warps,
            "blocks": blocks, "min_chunks_per_warp": chunks // warps, "max_chunks_per_warp": -(-chunks // warps)}


AUTO_MIN_WAVES = 3   # see auto_launch


def auto_launch(M: int, K: int, sms: int, blocks_per_sm: int = RESIDENT_BLOCKS_PER_SM) -> dict:
    """The kernel groups_per_warp='auto' runs, from the launch shape alone: the grid kernel
    quant_act_warp_ilp with the largest groups_per_warp in (8, 4, 2) whose grid still fills at
    least AUTO_MIN_WAVES waves of resident blocks (sms x blocks_per_sm); 2 when none does (small M:
    the most warps and the shortest chain per warp).

    Why this rule (H200, K = 7168, two probe runs, 2026-11-29, graph timing, fraction of the
    same-traffic copy): more groups per warp wins only once the grid has several waves, so a
    partly filled last wave costs little (M = 4096 / 8192: g8 0.83 / 0.85, g2 0.77 / 0.76);
    below that the grid with the most warps wins (M = 256: g2 0.76-0.86, g8 0.67; M = 1024:
    g2 0.79-0.80 at 3.4 waves, g4 0.79 at 1.7). The persistent kernels (next chunk's loads in
    flight, no partial wave) measured no better than the best grid kernel at any M and hold
    fewer blocks per SM, so 'auto' never picks them; they stay selectable (persistent=True).
    blocks_per_sm: resident 256-thread blocks of the grid kernel (8 on sm_80..sm_90). On an
    H200 (132 SMs) at K = 7168: M <= 1024 -> g2; M = 2048 -> g4; M >= 4096 -> g8 (3.4 waves at 4096).
    Returns {"persistent": bool, "groups_per_warp": int, "variant_id": int}."""
    check_shape(M, K)
    _positive_int("sms", sms)
    _positive_int("blocks_per_sm", blocks_per_sm)
    groups = M * (K // GROUP)
    slots = sms * blocks_per_sm
    warps_per_block = THREADS // 32
    persistent = False
    gpw = next((g for g in (8, 4) if -(-groups // (g * warps_per_block)) >= AUTO_MIN_WAVES * slots), 2)
    return {"persistent": persistent, "groups_per_warp": gpw,
            "variant_id": (_PERSISTENT_IDS if persistent else _ILP_IDS)[gpw]}


def quant_act_emulate(x, scale_rule: str = "torch_cuda") -> tuple[np.ndarray, np.ndarray]:
    """numpy model of the quantisers: x (M, K) bf16 values (ml_dtypes.bfloat16 or any float array
    holding bf16 values) -> (q (M, K) ml_dtypes.float8_e4m3fn, s (M, K/128) float32, row-major).

    Every step is fp32 as on the GPU: amax exact, s = amax * fp32(1/448) ('torch_cuda') or
    amax / 448 ('true_division'), q = RN_e4m3(fp32(x / s)) (ml_dtypes rounds to nearest even
    and, like torch, turns |v| > 464 into NaN keeping the sign; a NaN from the division is the GPU's
    canonical +NaN).
    """
    import ml_dtypes

    _need(scale_rule in SCALE_RULES, f"scale_rule must be one of {SCALE_RULES}, got {scale_rule!r}")
    x = np.asarray(x)
    _need(x.ndim == 2, f"x must be 2-D (M, K), got shape {x.shape}")
    M, K = x.shape
    _need(K % GROUP == 0, f"K must be a multiple of {GROUP}, got K={K}")
    g = x.astype(np.float32).reshape(M, K // GROUP, GROUP)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        amax = np.abs(g).max(axis=-1)                      # NaN propagates, as torch.amax
        if scale_rule == "torch_cuda":
            s = amax * (np.float32(1) / np.float32(FP8_MAX))
        else:
            s = amax / np.float32(FP8_MAX)
        s = np.where(amax > 0, s, np.float32(1)).astype(np.float32)
        v = (g / s[..., None]).astype(np.float32)
        # A GPU's fp32 division returns the canonical NaN (0x7FFFFFFF, positive) for inf/inf or a
        # NaN operand; x86 returns a negative one. Model the GPU: every NaN code is then 0x7F.
        v = np.where(np.isnan(v), np.float32(np.nan), v)
        q = v.reshape(M, K).astype(ml_dtypes.float8_e4m3fn)
    return q, s


def quant_act(x, variant: str = "quant_act_warp", *, scale_layout: str = "row", scale_rule: str = "torch_cuda",
              q_out=None, s_out=None, groups_per_warp=None, persistent: Optional[bool] = None, pdl: bool = False,
              subwarp_form: Optional[str] = None, pdl_release: Optional[str] = None):
    """x (M, K) bf16 CUDA tensor -> (q (M, K) float8_e4m3fn, s (M, K/128) float32).

    scale_layout 'row' gives s row-major (as quant_act_reference); 'm_major' gives strides (1, M),
    the layout cuBLASLt's blockwise GEMM wants (so no transposing copy is needed after). q_out /
    s_out: preallocated outputs (s_out of any strides). groups_per_warp: quant_act_warp_ilp only
    (2, 4, 8 or 'auto' = None, the default: :func:`auto_launch` picks kernel and count);
    persistent: quant_act_warp_ilp with a number of groups_per_warp only: True runs the
    persistent grid-stride kernel, False / None the one-chunk-per-warp grid. pdl: quant_act_warp_ilp's
    grid kernel and quant_act_subwarp, sm_90 and newer: a programmatic dependent launch (see the module's text).
    subwarp_form: quant_act_subwarp only, one of SUBWARP_FORMS (None: SUBWARP_DEFAULT_FORM, 'plain16'; see the module's text).
    pdl_release: with pdl=True, where the kernel lets the next one launch: 'after_wait' (at once, before
    its loads) or 'after_stores' (quant_act_subwarp only); None: PDL_DEFAULT_RELEASE, 'after_wait'
    for both. Outputs are the same.
    """
    _need(variant in VARIANTS, f"variant must be one of {VARIANTS}, got {variant!r}")
    vid = _variant_id(variant, groups_per_warp, persistent, subwarp_form)
    _need(pdl in (True, False), f"pdl must be True or False, got {pdl!r}")
    if pdl:
        _need(variant in PDL_VARIANTS and not persistent,
              f"pdl applies to quant_act_warp_ilp's grid kernel and quant_act_subwarp only, not {variant}"
              + (" with persistent=True" if persistent else ""))
    early = _early_release(variant, pdl, pdl_release)
    if vid is None:   # auto: needs the device's SM count
        _need(_is_cuda_tensor(x), "x must be a CUDA torch.Tensor")
        _need(x.dim() == 2, f"x must be 2-D (M, K), got shape {tuple(x.shape)}")
        M, K = x.shape
        _need(M >= 1 and K >= GROUP and K % GROUP == 0, f"K must be a positive multiple of {GROUP}, got K={K} (M={M})")
        vid = auto_launch(int(M), int(K), _sm_count(x.device.index))["variant_id"]
    if pdl:
        _need(_is_cuda_tensor(x), "x must be a CUDA torch.Tensor")
        cap = _capability(x.device.index)
        _need(cap >= PDL_MIN_CAPABILITY, f"pdl needs sm_90 or newer (programmatic dependent launch); this GPU "
                                         f"is sm_{cap[0]}{cap[1]}")
        vid |= _PDL_FLAG | (_EARLY_RELEASE_FLAG if early else 0)
    return _launch(x, vid, scale_layout, scale_rule, q_out, s_out)


def _early_release(kernel: str, pdl: bool, pdl_release) -> bool:
    """Whether ``kernel`` launched with ``pdl`` and ``pdl_release`` needs the early-release bit
    (ValueError for a release it cannot do, or a release without pdl=True)."""
    if pdl_release is not None:
        _need(isinstance(pdl_release, str) and pdl_release in PDL_RELEASES,
              f"pdl_release must be one of {PDL_RELEASES} or None, got {pdl_release!r}")
        _need(pdl, "pdl_release applies with pdl=True only")
        _need(pdl_release in PDL_RELEASE_CHOICES[kernel],
              f"{kernel} releases the next kernel {' or '.join(PDL_RELEASE_CHOICES[kernel])} only, not {pdl_release}")
    if not pdl:
        return False
    release = PDL_DEFAULT_RELEASE[kernel] if pdl_release is None else pdl_release
    return kernel != "quant_act_warp_ilp" and release == "after_wait"


def pdl_supported(device=None) -> bool:
    """Whether ``pdl=True`` runs on this CUDA device (sm_90 and newer)."""
    import torch

    return torch.cuda.is_available() and _capability(device) >= PDL_MIN_CAPABILITY


_CAPS: dict = {}


def _capability(index) -> tuple:
    import torch

    i = torch.cuda.current_device() if index is None else index
    if i not in _CAPS:
        _CAPS[i] = tuple(torch.cuda.get_device_capability(i))
    return _CAPS[i]


def _is_cuda_tensor(x) -> bool:
    try:
        import torch
    except ImportError:
        return False
    return isinstance(x, torch.Tensor) and x.is_cuda


_SMS: dict = {}


def _sm_count(index) -> int:
    import torch

    i = torch.cuda.current_device() if index is None else index
    if i not in _SMS:
        _SMS[i] = int(torch.cuda.get_device_properties(i).multi_processor_count)
    return _SMS[i]


def traffic_copy(x, *, q_out=None, s_out=None, pdl: bool = False, pdl_release: Optional[str] = None):
    """Diagnostic: quant_act_warp_ilp's memory traffic with no arithmetic. Writes the high byte of
    every bf16 of x as its 'code' and 1.0 as every scale (not a quantisation). pdl (sm_90+) and
    pdl_release as for quant_act: the same copy as a programmatic dependent launch, waiting before
    its loads and releasing the next kernel right after the wait (the default) or after its
    stores: the yardstick of a quantiser launched that way."""
    _need(pdl in (True, False), f"pdl must be True or False, got {pdl!r}")
    vid = _TRAFFIC_COPY_ID
    if pdl or pdl_release is not None:
        early = _early_release("traffic_copy", pdl, pdl_release)
        _need(_is_cuda_tensor(x), "x must be a CUDA torch.Tensor")
        cap = _capability(x.device.index)
        _need(cap >= PDL_MIN_CAPABILITY, f"pdl needs sm_90 or newer (programmatic dependent launch); this GPU "
                                         f"is sm_{cap[0]}{cap[1]}")
        vid |= _PDL_FLAG | (_EARLY_RELEASE_FLAG if early else 0)
    return _launch(x, vid, "row", "torch_cuda", q_out, s_out)


def _variant_id(variant: str, groups_per_warp, persistent=None, subwarp_form=None) -> Optional[int]:
    """The binding's variant number; None for quant_act_warp_ilp with groups_per_warp 'auto'."""
    if variant != "quant_act_subwarp":
        _need(subwarp_form is None, f"subwarp_form applies to quant_act_subwarp only, not {variant}")
    if variant != "quant_act_warp_ilp":
        _need(groups_per_warp is None, f"groups_per_warp applies to quant_act_warp_ilp only, not {variant}")
        _need(persistent is None, f"persistent applies to quant_act_warp_ilp only, not {variant}")
        if variant != "quant_act_subwarp":
            return _VARIANT_IDS[variant]
        form = SUBWARP_DEFAULT_FORM if subwarp_form is None else subwarp_form
        _need(isinstance(form, str) and form in SUBWARP_FORMS,
              f"subwarp_form must be one of {SUBWARP_FORMS}, got {subwarp_form!r}")
        return _SUBWARP_IDS[form]
    _need(persistent in (None, True, False), f"persistent must be None, True or False, got {persistent!r}")
    gpw = ILP_DEFAULT_GROUPS_PER_WARP if groups_per_warp is None else groups_per_warp
    if isinstance(gpw, str) and gpw == "auto":
        _need(persistent is None, "persistent must be None with groups_per_warp='auto' (the rule picks it)")
        return None
    _need(gpw in ILP_GROUPS_PER_WARP and not isinstance(gpw, bool),
          f"groups_per_warp must be one of {ILP_GROUPS_PER_WARP} or 'auto', got {gpw!r}")
    return (_PERSISTENT_IDS if persistent else _ILP_IDS)[gpw]


def _check_s_out(s_out, x, M: int, kb: int, torch) -> None:
    """s_out: an (M, K/128) float32 tensor on x's device, of any strides under which no two
    scales share an address (a stride of 0, as ``expand`` makes, has every warp write one
    float: a race whose survivor is the only scale left)."""
    _need(isinstance(s_out, torch.Tensor) and s_out.dtype == torch.float32 and tuple(s_out.shape) == (M, kb)
          and s_out.device == x.device,
          f"s_out must be an (M, K/128) = {(M, kb)} float32 tensor on x's device")
    dims = sorted((st, n) for st, n in zip(s_out.stride(), s_out.shape) if n > 1)
    ok = all(st >= 1 for st, _ in dims) and (len(dims) < 2 or dims[1][0] >= dims[0][0] * dims[0][1])
    _need(ok, f"s_out's strides {tuple(s_out.stride())} make scales share an address (a stride "
              "of 0, or rows that overlap): give each of its (M, K/128) scales its own float")


def _launch(x, variant_id: int, scale_layout: str, scale_rule: str, q_out, s_out):
    import torch

    from .seed001 import load_extension

    _need(scale_rule in SCALE_RULES, f"scale_rule must be one of {SCALE_RULES}, got {scale_rule!r}")
    _need(scale_layout in SCALE_LAYOUTS, f"scale_layout must be one of {SCALE_LAYOUTS}, got {scale_layout!r}")
    _need(isinstance(x, torch.Tensor), f"x must be a torch.Tensor, got {type(x).__name__}")
    _need(x.dtype == torch.bfloat16, f"x must be torch.bfloat16, got {x.dtype}")
    _need(x.dim() == 2, f"x must be 2-D (M, K), got shape {tuple(x.shape)}")
    _need(x.is_cuda, f"x must be on a CUDA device, got {x.device}")
    _need(x.is_contiguous(), "x must be contiguous (row-major)")
    _need(x.data_ptr() % 16 == 0, f"x must be 16-byte aligned (16-byte loads; data_ptr % 16 = {x.data_ptr() % 16})")
    M, K = x.shape
    _need(M >= 1 and K >= GROUP and K % GROUP == 0, f"K must be a positive multiple of {GROUP}, got K={K} (M={M})")
    kb = K // GROUP
    if q_out is None:
        q_out = torch.empty((M, K), dtype=torch.float8_e4m3fn, device=x.device)
    _need(isinstance(q_out, torch.Tensor) and q_out.dtype == torch.float8_e4m3fn and tuple(q_out.shape) == (M, K)
          and q_out.is_contiguous() and q_out.device == x.device and q_out.data_ptr() % 16 == 0,
          "q_out must be a contiguous, 16-byte aligned (M, K) float8_e4m3fn tensor on x's device")
    if s_out is None:
        s_out = (torch.empty((M, kb), dtype=torch.float32, device=x.device) if scale_layout == "row"
                 else torch.empty((kb, M), dtype=torch.float32, device=x.device).t())
    _check_s_out(s_out, x, M, kb, torch)
    load_extension().quant_act(x, q_out, s_out, variant_id, int(scale_rule == "torch_cuda"))
    return q_out, s_out
