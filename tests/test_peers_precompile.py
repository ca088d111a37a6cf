"""fp8lab.peers.precompile: compiling an autotuned peer's configs ahead, on all cores.

CPU: the compile-only autotuner stand-in against a fake Autotuner (which configs, which
arguments, nothing launched), which peers it applies to, and that nothing starts for peers
that do not autotune. GPU: the stand-in on a real Triton autotuned kernel compiles its share of
the configs and launches nothing.
"""

from __future__ import annotations

import pytest

from fp8lab.arms import peer_catalog
from fp8lab.peers import precompile


class _Cfg:
    def __init__(self, i):
        self.i = i

    def all_kwargs(self):
        return {"BLOCK": 16 * (self.i + 1), "num_warps": 4}


class _Fn:
    def __init__(self):
        self.calls = []

    def run(self, *args, **kwargs):
        self.calls.append((args, kwargs))


def _fake_autotuner(prune=None):
    class Fake:
        arg_names = ["x", "n"]

        def __init__(self):
            self.configs = [_Cfg(i) for i in range(7)]
            self.fn = _Fn()
            self.nargs = None
            self.pruned_with = None

        def prune_configs(self, kwargs):
            self.pruned_with = (dict(self.nargs), dict(kwargs))
            return prune(self.configs) if prune else self.configs

        def run(self, *args, **kwargs):  # the real one benchmarks; replaced by compile_only
            raise AssertionError("the original run must not be called")

    return Fake


def test_compile_only_takes_its_share_of_the_pruned_configs_and_launches_nothing():
    Fake = _fake_autotuner(prune=lambda cs: cs[:5])          # the autotuner's own pruning first
    count = precompile.compile_only(1, 3, autotuner_cls=Fake)
    t = Fake()
    t.run("X", 9, grid="G", warmup=False)
    assert [kw["BLOCK"] for _, kw in t.fn.calls] == [32, 80]  # configs 1 and 4 of the 5 pruned
    assert all(kw["warmup"] is True and kw["grid"] == "G" for _, kw in t.fn.calls)
    assert all(args == ("X", 9) for args, _ in t.fn.calls)
    assert t.pruned_with[0] == {"x": "X", "n": 9}              # the pruner saw the named args
    assert t.nargs is None and count == [2]


def test_compile_only_covers_every_config_once_across_the_workers():
    seen = []
    for slot in range(4):
        Fake = _fake_autotuner()
        precompile.compile_only(slot, 4, autotuner_cls=Fake)
        t = Fake()
        t.run("X", 1, grid=(1,), warmup=False)
        seen += [kw["BLOCK"] for _, kw in t.fn.calls]
    assert sorted(seen) == [16 * (i + 1) for i in range(7)]


def test_only_triton_autotuned_peers_are_compiled_ahead():
    auto = precompile.autotuned(list(peer_catalog.PEERS))
    assert "peer_torchao_blockwise" in auto and "peer_gemlite_w8a16_fp8" in auto
    assert "peer_marlin_int4" not in auto and "peer_vllm_blockwise" not in auto and "peer_deepgemm" not in auto


def test_a_jit_peer_is_compiled_ahead_with_its_points_shared_out(monkeypatch):
    assert precompile.ahead_peers(list(peer_catalog.PEERS)) == [
        p for p in peer_catalog.PEERS if p in precompile.autotuned(list(peer_catalog.PEERS)) or p == "peer_deepgemm"]
    assert "peer_deepgemm" in precompile.ahead_peers(["peer_deepgemm", "peer_marlin_int4"])
    import sys
    import types

    calls = []
    monkeypatch.setattr(precompile, "compile_only", lambda slot, n: [0])
    monkeypatch.setattr(precompile, "_blockwise_point", lambda peer, *pt: calls.append((peer, pt)))
    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(synchronize=lambda: None, empty_cache=lambda: None))
    monkeypatch.setitem(sys.modules, "torch", fake)       # the worker's torch, without a GPU
    points = [("s", M, 0, True) for M in (1, 16, 128, 1024, 4096)]
    done = [precompile._worker(("blockwise", ["peer_deepgemm"], points, i, 2, 0)) for i in range(2)]
    assert [d[0] for d in done] == [3, 2] and [pt[1] for _, pt in calls] == [1, 128, 4096, 16, 1024]


def test_ahead_starts_nothing_without_an_autotuned_peer(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("no pool for peers that do not autotune")

    monkeypatch.setattr(precompile.mp, "get_context", boom)
    r = precompile.ahead("weight_only", ["peer_marlin_int4"], [(256, 256, [1], 0)], log=None)
    assert r == dict(compiled=0, workers=0, seconds=0.0, errors=[])


def test_worker_count_is_bounded():
    assert 1 <= precompile.worker_count() <= 16
    assert precompile.worker_count(n_configs_hint=2) <= 2


@pytest.mark.gpu
def test_compile_only_on_a_real_triton_autotuner_compiles_without_launching():
    import torch
    import triton
    import triton.language as tl
    from triton.runtime.autotuner import Autotuner

    configs = [triton.Config({"BLOCK": b}, num_warps=w) for b in (64, 128, 256) for w in (2, 4)]

    @triton.autotune(configs=configs, key=["n"])
    @triton.jit
    def fill(out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, 1.0, mask=offs < n)

    original = Autotuner.run
    try:
        count = precompile.compile_only(0, 2)
        out = torch.full((1000,), float("nan"), device="cuda")
        fill[lambda meta: (triton.cdiv(1000, meta["BLOCK"]),)](out, 1000)
        torch.cuda.synchronize()
        assert count == [3]                                    # configs 0, 2, 4 of 6
        assert torch.isnan(out).all()                          # nothing launched
    finally:
        Autotuner.run = original
    fill[lambda meta: (triton.cdiv(1000, meta["BLOCK"]),)](out, 1000)   # the real autotuner again
    torch.cuda.synchronize()
    assert (out == 1.0).all()


# ---------------------------------------------------------------------------------------------
# once per box, and planned by the build from the notebooks' own parameters
# ---------------------------------------------------------------------------------------------
def test_ensure_compiles_once_per_call_and_not_after_a_broken_pool(monkeypatch, tmp_path):
    monkeypatch.setenv("FP8LAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(precompile, "call_key", lambda kind, peers, points: f"{kind}-{len(points)}")
    calls = []

    def fake_ahead(kind, peers, points, **kw):
        calls.append((kind, list(peers), list(points)))
        return dict(compiled=5, workers=2, seconds=1.0, errors=errs)

    monkeypatch.setattr(precompile, "ahead", fake_ahead)
    errs = []
    lines = []
    peers = ["peer_gemlite_w8a16_fp8", "peer_marlin_int4"]       # Marlin does not autotune: left out
    precompile.ensure("weight_only", [(256, 256, [1], 0)], peers=peers, log=lines.append, by="the test")
    assert calls == [("weight_only", ["peer_gemlite_w8a16_fp8"], [(256, 256, [1], 0)])]
    precompile.ensure("weight_only", [(256, 256, [1], 0)], peers=peers, log=lines.append)
    assert len(calls) == 1 and "compiled ahead by the test (5 configs" in lines[-1]
    errs = ["stopped after 900 s: the sweep compiles the rest itself"]   # a pool cut short: no marker
    precompile.ensure("weight_only", [(256, 256, [1], 0), (512, 256, [1], 0)], peers=peers, log=None)
    precompile.ensure("weight_only", [(256, 256, [1], 0), (512, 256, [1], 0)], peers=peers, log=None)
    assert len(calls) == 3
    assert precompile.ensure("weight_only", [(256, 256, [1], 0)], peers=["peer_marlin_int4"], log=None)["workers"] == 0


@pytest.mark.parametrize("nb", precompile.NOTEBOOKS)
@pytest.mark.parametrize("smoke", [False, True])
def test_the_build_plans_what_the_notebooks_sweep_asks_for(monkeypatch, nb, smoke):
    """precompile.plan(nb, parameters) -- what ``fp8lab build`` compiles -- is the call the
    notebook's peer sweep makes with those parameters (run with every peer 'available' and the
    ensure call caught before anything is measured)."""
    import json
    import re
    from pathlib import Path

    from fp8lab.run import prebuild
    from fp8lab.peers import discover, sweeps

    params = json.loads(next(t for t in prebuild.with_params(prebuild.TARGETS, smoke=smoke)
                             if t.loader == prebuild.AHEAD_LOADER and t.args[0] == nb).args[1])
    seen = []

    class Caught(Exception):
        pass

    def catch(kind, points, *, peers, **kw):
        seen.append((kind, points, precompile.autotuned(peers)))
        raise Caught

    monkeypatch.setattr(precompile, "ensure", catch)
    monkeypatch.setattr(sweeps, "DEVICE", "cuda")
    ok = lambda p: discover.Availability(p, True, "1.0")  # noqa: E731
    ids = sweeps.resolve(params["peers"], nb)
    src = next((Path(__file__).parent.parent / "notebooks").glob(f"{nb}_*.py")).read_text()
    with pytest.raises(Caught):
        if nb == "05":
            assert re.search(r"peer_sweeps\.blockwise\(shapes, Ms, peer_ids, with_quant=with_quant,", src)
            sweeps.blockwise(params["shapes"], params["Ms"], ids, with_quant=params["with_quant"], avail=ok)
        elif nb == "08":
            assert re.search(r"peer_sweeps\.decode\(shape_names, Ms, peer_ids, [^)]*seed=seed", src)
            sweeps.decode(params["shape_names"], params["Ms"], ids, copy={"rate_p50": 1.0}, seed=params["seed"],
                          avail=ok)
        else:
            assert re.search(r"peer_sweeps\.prefill\(shape_name, Ms, peer_ids, [^)]*seed=seed", src)
            sweeps.prefill(params["shape_name"], params["Ms"], ids, seed=params["seed"], avail=ok)
    kind, points = precompile.plan(nb, params)
    assert seen == [(kind, points, precompile.autotuned(ids))] and seen[0][2]
