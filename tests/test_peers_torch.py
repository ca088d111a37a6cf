"""fp8lab.peers' check path with torch on the CPU (skipped without torch): the poisoned check
of the harness, and the original Marlin's adapter from its own source against a CPU stand-in
for its kernel that unpacks Marlin's layout independently (the inverse of ``Layer.pack``), so a
reference that disagrees with what Marlin packed fails here, not on the GPU box."""

import types

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch

from fp8lab.peers import adapters, build, discover, harness  # noqa: E402


def _prepared(call, w, takes_out):
    return harness.Prepared(None, call, lambda s: s, lambda s: (), w.double(), "bf16", takes_out=takes_out)


@pytest.mark.parametrize("takes_out", [True, False])
def test_check_passes_a_right_kernel(takes_out):
    g = torch.Generator().manual_seed(0)
    w = torch.randn(64, 128, generator=g)
    x = torch.randn(5, 128, generator=g).to(torch.bfloat16)

    def call(st, x, out):
        y = (x.float() @ w.t()).to(torch.bfloat16)
        if out is None:
            return y
        out.copy_(y)
        return out
    err, nan_left = harness.check(_prepared(call, w, takes_out), x, rows=5)
    assert nan_left == 0 and err < harness.CHECK_RELERR


def test_check_sees_an_output_left_unwritten():
    w = torch.randn(64, 128)
    x = torch.randn(3, 128).to(torch.bfloat16)

    def lazy(st, x, out):                   # writes all but the last column
        out[:, :-1] = (x.float() @ w[:-1].t()).to(out.dtype)
        return out
    err, nan_left = harness.check(_prepared(lazy, w, True), x)
    assert nan_left == 3 and err == float("inf")


def test_relerr_boundary():
    ref = torch.ones(4, 4, dtype=torch.float64)
    assert harness.relerr(ref * (1 + 0.5 * harness.CHECK_RELERR), ref) < harness.CHECK_RELERR
    assert harness.relerr(ref * (1 + 2 * harness.CHECK_RELERR), ref) > harness.CHECK_RELERR


# ------------------------------------------------------------------------------ Marlin on CPU
def _marlin_module(monkeypatch, wrong_scales=False):
    """Marlin's Python package from its source, with a CPU stand-in for its CUDA extension."""
    try:
        src = build.source_files()[0].parent.parent
    except FileNotFoundError as e:
        pytest.skip(str(e))
    import importlib
    import sys

    fake = types.ModuleType("marlin_cuda")
    holder = {}

    def mul(A, B, C, s, workspace, thread_k, thread_n, sms, max_par):
        m = holder["marlin"]
        K, N = A.shape[1], C.shape[1]
        perm = m._perm
        # unpack 8 codes per int32 (code i of a word sits at bits 4i), then undo the permutation
        q = B.to(torch.int64) & 0xFFFFFFFF
        res = torch.empty(B.shape[0], B.shape[1] * 8, dtype=torch.int64)
        for i in range(8):
            res[:, i::8] = (q >> (4 * i)) & 15
        flat = res.reshape(-1, perm.numel())
        orig = torch.empty_like(flat)
        orig[:, perm] = flat
        codes = orig.reshape(K // 16, N // 16, 16, 16).permute(0, 2, 1, 3).reshape(K, N)
        sp = torch.as_tensor(m._scale_perm)
        s2 = s.reshape(-1, sp.numel())
        so = torch.empty_like(s2)
        so[:, sp] = s2
        if wrong_scales:
            so = s2                                 # a kernel that forgot the scale permutation
        so = so.reshape(-1, N).float()
        W = (codes - 8).float() * so.repeat_interleave(K // so.shape[0], 0)
        C.copy_((A.float() @ W).to(C.dtype))

    fake.mul = mul
    monkeypatch.setitem(sys.modules, "marlin_cuda", fake)
    monkeypatch.syspath_prepend(str(src))
    monkeypatch.delitem(sys.modules, "marlin", raising=False)
    marlin = importlib.import_module("marlin")
    holder["marlin"] = marlin
    monkeypatch.setattr(adapters, "import_marlin", lambda: marlin)
    return marlin


def test_marlin_reference_is_what_marlin_packed(monkeypatch):
    _marlin_module(monkeypatch)
    w = 0.02 * torch.randn(256, 256, generator=torch.Generator().manual_seed(1))
    prep = adapters.marlin_int4(w)
    assert prep.act == "fp16" and prep.takes_out
    assert harness.tensor_bytes(prep.weights(prep.state)) == 256 * 256 // 2 + 2 * 256 * 2
    x = torch.randn(3, 256, generator=torch.Generator().manual_seed(2)).half()
    err, nan_left = harness.check(prep, x, rows=3)
    assert nan_left == 0 and err < 2e-3, err
    # the codes span the 4-bit range around 8 (Marlin's test recipe: max |w| of a group / 7.5)
    assert float(prep.w_ref.abs().max()) > 0


def test_marlin_check_fails_a_wrong_scale_layout(monkeypatch):
    _marlin_module(monkeypatch, wrong_scales=True)
    w = 0.02 * torch.randn(256, 256, generator=torch.Generator().manual_seed(1))
    w[:, :128] *= 8                                   # groups of different size: a misplaced scale shows
    prep = adapters.marlin_int4(w)
    x = torch.randn(3, 256, generator=torch.Generator().manual_seed(2)).half()
    err, _ = harness.check(prep, x, rows=3)
    assert err > harness.CHECK_RELERR


def test_marlin_refuses_shapes_it_does_not_take(monkeypatch):
    _marlin_module(monkeypatch)
    with pytest.raises(discover.PeerUnavailable, match="N % 256"):
        adapters.marlin_int4(torch.randn(128, 256))


# ------------------------------------------------------------------ the sweeps' own logic on CPU
import math  # noqa: E402

import numpy as np  # noqa: E402

from fp8lab.measure import bench, clocks  # noqa: E402
from fp8lab.experiments import decode as dx  # noqa: E402
from fp8lab.experiments import prefill as px  # noqa: E402
from fp8lab.arms import peer_catalog
from fp8lab.peers import sweeps  # noqa: E402

T = 1e-5   # every fake call takes 10 us


def _timing(method="graph"):
    return bench.Timing(np.full(8, T), method=method, rotation_sets=1)


@pytest.fixture
def cpu_sweeps(monkeypatch):
    monkeypatch.setattr(sweeps, "DEVICE", "cpu")
    monkeypatch.setattr(sweeps, "_device_name", lambda: "NVIDIA H200")
    monkeypatch.setattr(sweeps, "_l2_bytes", lambda: 1 << 20)
    monkeypatch.setattr(harness, "time_rotated",
                        lambda fn, sets, **kw: (fn(*sets[0]), None) and (_timing(kw["method"]),
                                                                         clocks.row_clocks(None, None, None), ""))
    monkeypatch.setattr(sweeps, "_time_events",
                        lambda fn, **kw: (fn(), None) and (_timing("events"), clocks.row_clocks(None, None, None)))


def _ok(peer):
    return discover.Availability(peer, True, version="9.9")


def _w8(w, scale_by=1.0):
    """A stand-in peer: int8 codes with one fp32 scale per row (N*K + 4N bytes), bf16 out."""
    s = w.abs().amax(1) / 127
    q = torch.round(w / s[:, None]).to(torch.int8)
    ref = q.double() * s.double()[:, None]

    def call(st, x, out):
        return (scale_by * (x.float() @ (st[0].float() * st[1][:, None]).t())).to(torch.bfloat16)
    return harness.Prepared((q, s), call, lambda st: (st[0].clone(), st[1].clone()), lambda st: st, ref, "bf16")


def _unavailable(w):
    raise discover.PeerUnavailable("needs N % 256 == 0 (fake)")


def _broken(w):
    raise RuntimeError("kernel exploded (fake)")


FAKES = {"peer_gemlite_w8a16_fp8": _w8, "peer_gemlite_w8a16_int8": lambda w: _w8(w, 2.0),
         "peer_marlin_int4": _unavailable, "peer_gemlite_w4a16_int4": _broken}


def test_decode_sweep_rows_for_every_outcome(cpu_sweeps):
    peers_ = list(FAKES)
    df = sweeps.decode(["qwen3-8b:o_proj"], [1, 16], peers_, copy={"rate_p50": 4e12}, same_copy=False,
                       avail=_ok, prepare=FAKES)
    assert list(df.columns) == sweeps.columns(dx.COLUMNS) and len(df) == 2 * len(peers_)
    st = df.groupby("arm")["status"].first()
    assert st["peer_gemlite_w8a16_fp8"] == "measured"
    assert st["peer_gemlite_w8a16_int8"].startswith("failed-check: relerr")
    assert st["peer_marlin_int4"] == "not-run: needs N % 256 == 0 (fake)"
    assert st["peer_gemlite_w4a16_int4"] == "error: RuntimeError: kernel exploded (fake)"
    m = df[df["status"] == "measured"]
    N = K = 4096
    assert (m["stream_bytes"] == N * K + 4 * N).all() and (m["weight_bytes"] == N * K).all()
    assert np.allclose(m["bw_p50"], (N * K + 4 * N) / T) and np.allclose(m["fraction_of_copy"], m["bw_p50"] / 4e12)
    assert (m["check_relerr"] < harness.CHECK_RELERR).all() and (m["bytes_note"] == "").all()
    assert (m["version"] == "9.9").all() and (m["format_bytes"] == peer_catalog.weight_stream_bytes(
        "peer_gemlite_w8a16_fp8", N, K)).all()
    assert (m["timing_method"] == "graph").all() and set(m["M"]) == {1, 16}


def test_decode_sweep_notes_bytes_that_differ_from_the_format(cpu_sweeps):
    # an INT4 peer whose tensors hold 8-bit codes: its bandwidth counts what it really read, noted
    df = sweeps.decode(["qwen3-8b:o_proj"], [1], ["peer_gemlite_w4a16_int4"], copy={"rate_p50": 4e12},
                       same_copy=False, avail=_ok, prepare={"peer_gemlite_w4a16_int4": _w8})
    r = df.iloc[0]
    assert r["status"] == "measured" and r["stream_bytes"] == 4096 * 4096 + 4 * 4096
    assert r["bytes_note"].startswith("tensors hold 16793600 B, the format")


def test_prefill_sweep(cpu_sweeps):
    df = sweeps.prefill("qwen3-8b:o_proj", [1, 64], ["peer_gemlite_w8a16_fp8", "peer_marlin_int4"], avail=_ok,
                        prepare=FAKES)
    assert list(df.columns) == sweeps.columns(px.COLUMNS)
    m = df[df["status"] == "measured"]
    assert len(m) == 2 and (m["scheme"] == "W8A16").all() and not m["with_quant"].any()
    assert np.allclose(m["tflops_p50"], 2.0 * m["M"] * 4096 * 4096 / T / 1e12)
    assert math.isnan(m["tflops_per_ghz"].iloc[0])            # no sampler: no clock, no per-GHz figure
    assert (df[df["arm"] == "peer_marlin_int4"]["status"] == "not-run: needs N % 256 == 0 (fake)").all()


def test_blockwise_sweep_checks_against_the_peers_own_operands(cpu_sweeps, monkeypatch):
    from fp8lab.experiments import blockwise as bw
    from fp8lab.kernels import baselines

    monkeypatch.setattr(sweeps.measure_harness, "timed", lambda fn, **kw: (fn(), None) and (
        _timing("events"), clocks.row_clocks(None, None, None)))

    def peer(x, w, wrong=False, wrong_quant=False):
        a, sa = baselines.quant_act_reference(x)                 # stand-in for the peer's quantisers
        b, sb = baselines.quant_weight_reference(w)

        def call(st, _x, _o):
            A = st[0].float() * st[1].repeat_interleave(128, 1)
            B = st[2].float() * st[3].repeat_interleave(128, 0)[: st[2].shape[0]].repeat_interleave(128, 1)
            return ((A @ B.t()) * (1.01 if wrong else 1.0)).to(torch.bfloat16)

        def with_quant(st, x):
            qa, qs = baselines.quant_act_reference(x)
            return call((qa, qs * (1.02 if wrong_quant else 1.0), st[2], st[3]), None, None)
        from fp8lab.peers.adapters import _blockwise_prepared
        return _blockwise_prepared((a, sa, b, sb), call, a, sa, b, sb, with_quant=with_quant)

    fakes = {"peer_torchao_blockwise": peer, "peer_vllm_blockwise": lambda x, w: peer(x, w, wrong=True),
             "peer_sglang_blockwise": lambda x, w: peer(x, w, wrong_quant=True)}
    df = sweeps.blockwise([(256, 384)], [1, 7], list(fakes), avail=_ok, prepare=fakes)
    assert list(df.columns) == sweeps.columns(bw.COLUMNS)
    ok = df[df["arm"] == "peer_torchao_blockwise"]
    assert list(ok["quant"]) == ["none", sweeps.QUANT_OWN] * 2
    assert (ok["status"] == "measured").all() and (ok["relerr"] < bw.CHECK_RELERR).all()
    assert (ok["weight_bytes"] == 256 * 384 + 4 * 2 * 3).all() and (ok["nan_left"] == 0).all()
    bad = df[df["arm"] == "peer_vllm_blockwise"]
    assert len(bad) == 2 and bad["status"].str.startswith("failed-check: relerr").all()   # 1% off: caught, not timed
    q = df[df["arm"] == "peer_sglang_blockwise"].set_index(["M", "quant"])["status"]
    assert (q.xs("none", level="quant") == "measured").all()
    assert q.xs(sweeps.QUANT_OWN, level="quant").str.startswith("failed-check").all()   # its quantiser is off
    # without with_quant: one row per point
    df1 = sweeps.blockwise([(256, 384)], [7], ["peer_torchao_blockwise"], with_quant=False, avail=_ok, prepare=fakes)
    assert list(df1["quant"]) == ["none"]


def test_quantiser_sweep_counts_differences_without_failing(cpu_sweeps):
    from fp8lab.kernels import baselines

    def exact():
        return baselines.quant_act_reference

    def other_rounding():
        def fn(x):
            q, s = baselines.quant_act_reference(x)
            return q, s * (1 + 2**-20)
        return fn

    df = sweeps.quantisers([1, 16], [256], ["peer_vllm_quant_group", "peer_sglang_quant_group"], avail=_ok,
                           make={"peer_vllm_quant_group": exact, "peer_sglang_quant_group": other_rounding})
    assert (df["status"] == "measured").all()
    v = df[df["arm"] == "peer_vllm_quant_group"]
    s = df[df["arm"] == "peer_sglang_quant_group"]
    assert v["bitwise_ok"].all() and (v["codes_differing"] == 0).all()
    assert not s["bitwise_ok"].any() and (s["scales_differing"] > 0).all()


def test_the_compile_check_uses_torchs_nvcc_flags():
    """The CPU compile check of Marlin's kernel passes nvcc what torch's extension builder will
    on the GPU box; the list kept for machines without torch must not fall behind torch's."""
    from torch.utils import cpp_extension

    assert set(cpp_extension.COMMON_NVCC_FLAGS) <= set(build.NVCC_FLAGS)
    assert set(cpp_extension.COMMON_NVCC_FLAGS) <= set(build.nvcc_flags())


def test_decode_checks_every_m(cpu_sweeps):
    """A kernel right at M = 4 (the first check) but wrong at M = 16 is not timed at M = 16."""
    def wrong_above_8(w):
        p = _w8(w)
        good = p.call
        p.call = lambda st, x, out: good(st, x, out) * (1.0 if x.shape[0] <= 8 else 1.5)
        return p

    df = sweeps.decode(["qwen3-8b:o_proj"], [1, 16], ["peer_gemlite_w8a16_fp8"], copy={"rate_p50": 4e12},
                       same_copy=False, avail=_ok, prepare={"peer_gemlite_w8a16_fp8": wrong_above_8})
    st = df.set_index("M")["status"]
    assert st[1] == "measured" and st[16].startswith("failed-check: relerr") and "at M=16" in st[16]


def test_quantiser_sweep_tells_rounding_rules_and_the_zero_group_apart(cpu_sweeps):
    from fp8lab.experiments import quantisers as qx
    from fp8lab.kernels import baselines

    def unguarded(x):             # amax / 448 with no zero guard: an all-zero group gives 0 / 0
        M, K = x.shape
        g = x.float().view(M, K // 128, 128)
        s = g.abs().amax(-1) / torch.full((M, K // 128), 448.0)
        return (g / s[..., None]).to(torch.float8_e4m3fn).view(M, K), s

    def off_by_an_ulp(x):
        q, s = baselines.quant_act_true_division(x)
        return q, torch.nextafter(s, torch.full_like(s, float("inf")))

    make = {"peer_vllm_cuda_quant_group": lambda: baselines.quant_act_true_division,
            "peer_torchao_quant_group": lambda: unguarded, "peer_vllm_quant_group": lambda: off_by_an_ulp}
    df = sweeps.quantisers([3], [512], list(make), avail=_ok, make=make).set_index("arm")
    assert list(df.reset_index().columns) == sweeps.quantiser_columns()
    td = df.loc["peer_vllm_cuda_quant_group"]
    assert td["codes_vs_true_division"] == 0 and td["scales_vs_true_division"] == 0
    assert td["zero_group_scale"] == 1.0 and td["zero_group_nan_codes"] == 0
    z = df.loc["peer_torchao_quant_group"]
    assert z["zero_group_scale"] == 0.0 and z["zero_group_nan_codes"] == 128
    assert z["codes_vs_true_division"] == 128 and z["scales_vs_true_division"] == 1
    u = df.loc["peer_vllm_quant_group"]
    assert u["scales_vs_true_division"] == 3 * 4 and u["scales_differing"] >= 3 * 4 - 1
    assert (df["status"] == "measured").all() and df.index.map(qx.registry.is_peer).all()


def test_quantiser_sweep_rotates_the_peers_outputs(cpu_sweeps, monkeypatch):
    """A peer's fresh outputs are held for one rotation cycle while it is timed (the own arms write
    to one preallocated output per input set): the timed callable holds as many results as sets."""
    from fp8lab.kernels import baselines

    seen = []

    def fake_time_rotated(fn, sets, **kw):
        seen.append((getattr(fn, "holds", None), len(sets)))
        for x in sets * 2:
            fn(*x)
        return _timing(kw["method"]), clocks.row_clocks(None, None, None), ""

    monkeypatch.setattr(harness, "time_rotated", fake_time_rotated)
    df = sweeps.quantisers([1, 16], [256], ["peer_vllm_quant_group"], avail=_ok,
                           make={"peer_vllm_quant_group": lambda: baselines.quant_act_reference})
    assert (df["status"] == "measured").all()
    assert seen and all(h == n for h, n in seen) and max(n for _, n in seen) > 1
