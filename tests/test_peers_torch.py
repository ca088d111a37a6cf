"""fp8lab.peers' check path with torch on the CPU (skipped without torch): the poisoned check
of the harness, and the original Marlin's adapter from its own source against a CPU stand-in
for its kernel that unpacks Marlin's layout independently (the inverse of ``Layer.pack``), so a
reference that disagrees with what Marlin packed fails here, not on the GPU box."""

import types

import pytest

torch = pytest.importorskip("torch")

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
