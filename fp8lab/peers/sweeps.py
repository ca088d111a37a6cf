"""The peers' sweeps, one per notebook, writing that notebook's table columns plus PEER_COLUMNS.

- :func:`decode` (notebook 08): every weight-only peer at every (shape, M), effective bandwidth
  from the bytes of the tensors the peer built, beside the copy bandwidth measured in the same
  run, CUDA-graph replay over rotated weight copies (decode.measure_decode's method).
- :func:`prefill` (notebook 11): the same peers at prefill M, CUDA events with L2 flushed,
  TFLOP/s per GHz from the NVML clock (prefill.measure_prefill's method).
- :func:`blockwise` (notebook 05): the W8A8 blockwise peers on blockwise.make_operands' activations
  and weights, each quantised by the peer, checked with blockwise.compare / passes.
- :func:`quantisers` (notebook 06b): the per-token-group quantisers, bit for bit against
  baselines.quant_act_reference.

A peer that is not available gives one ``not-run`` row per (shape, M) with the reason and its
install line, before torch is imported; a peer that fails its check or raises gives a
``failed-check`` / ``error`` row. Peers' rows live in their own table (``peers``) so the
notebooks' verdicts over fp8lab's arms read the tables they always read; figures draw both.
"""

from __future__ import annotations

import math
from typing import Callable, Optional, Sequence

import pandas as pd

from ..arms import peer_catalog, registry
from ..measure.progress import progress as track
from ..measure import harness as measure_harness
from . import discover, harness, report
from ..arms.peer_catalog import resolve  # noqa: F401 - the notebooks' peer_sweeps.resolve
from .harness import PEER_COLUMNS, act_dtype, error_text, status_row

__all__ = ["decode", "prefill", "blockwise", "quantisers", "columns", "resolve", "DEVICE", "QUANT_OWN"]

#: where operands live; the CPU tests set "cpu" (with fakes for timing) to run the sweeps' own logic
DEVICE = "cuda"


def _device_name() -> str:
    import torch

    return torch.cuda.get_device_properties(torch.cuda.current_device()).name


def _free() -> None:
    """Hand cached blocks back between peers (a peer's packed copies can be GBs)."""
    if DEVICE == "cuda":
        import torch

        torch.cuda.empty_cache()


def _sync() -> None:
    if DEVICE == "cuda":
        import torch

        torch.cuda.synchronize()


def _l2_bytes() -> int:
    from ..measure import bench

    return bench.device_l2_bytes()


def _time_events(fn, *, warmup_ms, rep_ms, sampler):
    """(Timing, clock columns) of ``fn`` with CUDA events and L2 flushed (prefill's method)."""
    return measure_harness.timed(fn, sampler=sampler, method="events", warmup_ms=warmup_ms, rep_ms=rep_ms)


def columns(host: Sequence[str]) -> list:
    """The notebook table's columns followed by the peer columns it lacks."""
    return list(host) + [c for c in PEER_COLUMNS if c not in host]


def _available(peers, avail: Optional[Callable]) -> dict:
    avail = avail or discover.availability
    return {p: avail(p) for p in peers}


# ------------------------------------------------------------------------------------------
# weight-only: notebook 08 (decode) and 11 (prefill)
# ------------------------------------------------------------------------------------------
def _byte_split(prep: harness.Prepared, N: int, K: int, peer: str) -> tuple[dict, str]:
    ts = [t for t in prep.weights(prep.state) if t is not None]
    total = harness.tensor_bytes(ts)
    codes = harness.tensor_bytes(ts[:1])
    fmt = registry.count(peer, N=N, K=K).weight_bytes
    note = "" if abs(total - fmt) <= 0.01 * fmt else f"tensors hold {total} B, the format {fmt} B"
    return {"weight_bytes": codes, "scale_bytes": total - codes, "stream_bytes": total}, note


def decode(shape_names: Sequence[str], Ms: Sequence[int], peers: Sequence[str], *, copy: dict, rep_ms: float = 40,
           seed: int = 0, check_m: int = 4, sampler=None, same_copy: bool = True, avail=None,
           prepare: Optional[dict] = None, precompile_ahead: bool = True) -> pd.DataFrame:
    """One row per (shape, peer, M) in decode.COLUMNS + PEER_COLUMNS. ``copy``: the run's
    decode.measure_copy result. ``avail`` / ``prepare``: replace discovery / the adapters (tests).
    ``precompile_ahead``: compile the autotuned peers' Triton configs on all cores first."""
    from ..experiments import decode as dx

    peer_catalog.check_ids(peers, "08")
    cols = columns(dx.COLUMNS)
    av = _available(peers, avail)
    rows = []
    live = [p for p in peers if av[p].ok]
    for name in shape_names:
        sh = dx._shape(name)
        for p in peers:
            if av[p].ok:
                continue
            for M in Ms:
                rows.append(status_row(cols, dict(shape=name, N=sh.N, K=sh.K, M=M, arm=p, fmt=peer_catalog.get(p).fmt,
                                                  act=peer_catalog.get(p).act), p, av[p].status()))
    if not live:
        return pd.DataFrame(rows, columns=cols)

    if prepare is None and DEVICE == "cuda" and precompile_ahead:
        from . import precompile

        precompile.ensure(*precompile.decode_ahead(shape_names, Ms, seed=seed, check_m=check_m), peers=live)

    import torch

    from ..measure import bench
    from ..facts import devices
    from . import adapters

    prepare = prepare or adapters.WEIGHT_ONLY
    spec = devices.spec_for(_device_name())
    l2 = _l2_bytes()
    same: dict = {}

    def same_Bps(nbytes):
        if not same_copy:
            return math.nan
        if nbytes not in same:
            same[nbytes] = dx.same_size_copy(nbytes, l2, rep_ms=rep_ms)["Bps"]
        return same[nbytes]

    for name in track(shape_names, desc="peers decode", unit="shapes"):
        sh = dx._shape(name)
        N, K = sh.N, sh.K
        for p in track(live, desc="peer", unit="peers"):
            pe = peer_catalog.get(p)
            base = dict(shape=name, N=N, K=K, arm=p, fmt=pe.fmt, act=pe.act)
            try:
                prep = prepare[p](adapters.dense_weight(N, K, seed, device=DEVICE))
                tdt = act_dtype(prep.act)
                g = torch.Generator(device=DEVICE).manual_seed(seed + 1)
                xc = torch.randn(check_m, K, device=DEVICE, generator=g).to(tdt)
                err, nan_left = harness.check(prep, xc, rows=check_m)
            except discover.PeerUnavailable as e:
                rows += [status_row(cols, {**base, "M": M}, p, f"not-run: {e}", av[p].version) for M in Ms]
                continue
            except Exception as e:  # noqa: BLE001 - a peer failing must not stop the sweep
                rows += [status_row(cols, {**base, "M": M}, p, "error: " + error_text(e), av[p].version) for M in Ms]
                _free()
                continue
            if nan_left or not err < harness.CHECK_RELERR:
                st = f"failed-check: relerr {err:.3g} vs float64 of its own dequantised weights, NaNs {nan_left}"
                rows += [status_row(cols, {**base, "M": M, "check_relerr": err}, p, st, av[p].version) for M in Ms]
                continue
            b, note = _byte_split(prep, N, K, p)
            n_sets = bench.n_rotation_sets(b["stream_bytes"], l2)
            states = [prep.state] + [prep.clone(prep.state) for _ in range(n_sets - 1)]
            for M in Ms:
                try:
                    x = torch.randn(M, K, device=DEVICE).to(tdt)
                    # each M may take another kernel config (Marlin's m blocks, gemlite's GEMV / GEMM
                    # split): check this one too, on its first rows, before timing it
                    with discover.autotune_choices() as chosen:
                        err_m, nan_m = harness.check(prep, x, rows=check_m)
                    if nan_m or not err_m < harness.CHECK_RELERR:
                        rows.append(status_row(cols, {**base, "M": M, "check_relerr": err_m}, p,
                                               f"failed-check: relerr {err_m:.3g} at M={M}, NaNs {nan_m}",
                                               av[p].version))
                        continue
                    err = max(err, err_m)
                    outs = [torch.empty(M, N, dtype=tdt, device=DEVICE) for _ in states]
                    # a peer that allocates its output keeps one rotation cycle of them (measure.harness.holding):
                    # it writes fresh memory per set as the own arms and the peers given ``out`` do
                    call = measure_harness.holding(lambda s, o: prep.call(s, x, o if prep.takes_out else None),
                                                   len(states))
                    tm, clk, tnote = harness.time_rotated(call, list(zip(states, outs)), method="graph",
                                                          rep_ms=rep_ms, sampler=sampler)
                    r = dx._row(name, N, K, M, p, pe.fmt, prep.act, b, tm, clk, copy["rate_p50"], spec,
                                splits=math.nan, grid="", ctas=math.nan, err=err, schedule="",
                                same_Bps=same_Bps(b["stream_bytes"]))
                    r["config"] = discover.with_choices(prep.config, chosen)
                    r.update(harness.peer_columns(p, av[p].version, nbytes=registry.count(p, N=N, K=K).weight_bytes,
                                                  note="; ".join(x_ for x_ in (note, tnote) if x_)))
                    rows.append(r)
                    del outs
                except Exception as e:  # noqa: BLE001
                    rows.append(status_row(cols, {**base, "M": M, "check_relerr": err}, p,
                                           "error: timing: " + error_text(e), av[p].version))
            states = prep = None                 # free the packed copies before the next peer
            _free()
    return pd.DataFrame(rows, columns=cols)


def prefill(shape_name: str, Ms: Sequence[int], peers: Sequence[str], *, rep_ms: float = 100,
            warmup_ms: float = 25, check_rows: int = 4, seed: int = 0, sampler=None, avail=None,
            prepare: Optional[dict] = None, precompile_ahead: bool = True) -> pd.DataFrame:
    """One row per (M, peer) in prefill.COLUMNS + PEER_COLUMNS (CUDA events, L2 flushed).
    ``precompile_ahead``: compile the autotuned peers' Triton configs on all cores first."""
    from ..facts import shapes
    from ..experiments import prefill as px

    peer_catalog.check_ids(peers, "11")
    cols = columns(px.COLUMNS)
    sh = shapes.get(shape_name)
    N, K = sh.N, sh.K
    av = _available(peers, avail)
    rows = []
    for p in peers:
        if not av[p].ok:
            rows += [status_row(cols, dict(shape=shape_name, N=N, K=K, M=M, arm=p, scheme=registry.scheme(p),
                                           with_quant=False), p, av[p].status()) for M in Ms]
    live = [p for p in peers if av[p].ok]
    if not live:
        return pd.DataFrame(rows, columns=cols)

    if prepare is None and DEVICE == "cuda" and precompile_ahead:
        from . import precompile

        precompile.ensure(*precompile.prefill_ahead(shape_name, Ms, seed=seed), peers=live)

    import torch

    from ..facts import devices
    from . import adapters

    prepare = prepare or adapters.WEIGHT_ONLY
    spec = devices.spec_for(_device_name())
    spec_per_ghz = spec.peak_flops("bf16") / spec.clock_hz * 1e9 / 1e12 if spec else math.nan
    w = adapters.dense_weight(N, K, seed, device=DEVICE)
    for p in track(live, desc="peers prefill", unit="peers"):
        base = dict(shape=shape_name, N=N, K=K, arm=p, scheme=registry.scheme(p), with_quant=False)
        try:
            prep = prepare[p](w)
        except discover.PeerUnavailable as e:
            rows += [status_row(cols, {**base, "M": M}, p, f"not-run: {e}", av[p].version) for M in Ms]
            continue
        except Exception as e:  # noqa: BLE001
            rows += [status_row(cols, {**base, "M": M}, p, "error: " + error_text(e), av[p].version) for M in Ms]
            continue
        tdt = act_dtype(prep.act)
        g = torch.Generator(device=DEVICE).manual_seed(seed)
        for M in track(Ms, desc="M"):
            try:
                x = torch.randn(M, K, device=DEVICE, generator=g).to(tdt)
                with discover.autotune_choices() as chosen:
                    err, nan_left = harness.check(prep, x, rows=check_rows)
                if nan_left or not err < harness.CHECK_RELERR:
                    rows.append(status_row(cols, {**base, "M": M, "check_relerr": err}, p,
                                           f"failed-check: relerr {err:.3g}, NaNs {nan_left}", av[p].version))
                    continue
                out = torch.empty(M, N, dtype=tdt, device=DEVICE)
                fn = lambda: prep.call(prep.state, x, out if prep.takes_out else None)  # noqa: E731
                fn()
                tm, clk = _time_events(fn, warmup_ms=warmup_ms, rep_ms=rep_ms, sampler=sampler)
            except Exception as e:  # noqa: BLE001
                rows.append(status_row(cols, {**base, "M": M}, p, "error: " + error_text(e), av[p].version))
                continue
            flop = float(registry.count(p, M=M, N=N, K=K).flops)
            mhz = clk.get("sm_mhz_median", math.nan)
            tf = flop / tm.p50_s / 1e12
            r = {c: math.nan for c in cols}
            r.update(base, M=M, flop=flop, time_p20_s=tm.p20_s, time_p50_s=tm.p50_s, time_p80_s=tm.p80_s,
                     tflops_p20=flop / tm.p80_s / 1e12, tflops_p50=tf, tflops_p80=flop / tm.p20_s / 1e12,
                     quant_time_s=math.nan, tflops_per_ghz=tf / (mhz / 1e3) if mhz and mhz > 0 else math.nan,
                     spec_tflops_per_ghz=spec_per_ghz, check_relerr=err,
                     config=discover.with_choices(prep.config, chosen),
                     timing_method=tm.method, n_samples=tm.n, **clk)
            r.update(harness.peer_columns(p, av[p].version, nbytes=registry.count(p, N=N, K=K).weight_bytes))
            rows.append(r)
        prep = None
        _free()
    return pd.DataFrame(rows, columns=cols)


# ------------------------------------------------------------------------------------------
# blockwise W8A8: notebook 05
# ------------------------------------------------------------------------------------------
#: the ``quant`` column of a peer row timed with its own activation quantiser inside the call (report.QUANT_OWN)
QUANT_OWN = report.QUANT_OWN


def blockwise(shapes, Ms: Sequence[int], peers: Sequence[str], *, with_quant: bool = True, seed: int = 0,
              warmup_ms: float = 10, rep_ms: float = 50, graph_threshold_s: float = 20e-6, graph_max_m: int = 64,
              max_sets: int = 16, sampler=None, avail=None, prepare: Optional[dict] = None, log=None,
              precompile_ahead: bool = True, notebook: str = "05") -> pd.DataFrame:
    """One row per (shape, M, peer) in blockwise.COLUMNS + PEER_COLUMNS, timed as
    blockwise.run_point times fp8lab's arms (graph replay up to ``graph_max_m``, else auto): on
    the activations the peer quantised beforehand (``quant`` = none), and, with ``with_quant``,
    again with the peer's own activation quantiser inside the timed call (``quant`` =
    QUANT_OWN; what seed 000 timed), checked against the same float64 reference. ``notebook``:
    the notebook whose peer list ``peers`` must come from (05 or 06)."""
    from ..experiments import blockwise as bw

    peer_catalog.check_ids(peers, notebook)
    cols = columns(bw.COLUMNS)
    shape_objs = bw.resolve_shapes(shapes)
    av = _available(peers, avail)

    def base(shape, M, p):
        return dict(shape=shape.name, model=shape.model, site=shape.site, M=M, N=shape.N, K=shape.K, arm=p,
                    variant="", path=peer_catalog.get(p).library, config="", quant="none", poison="",
                    weight_bytes=registry.count(p, M=M, N=shape.N, K=shape.K).weight_bytes)

    rows = []
    for shape in shape_objs:
        for M in Ms:
            rows += [status_row(cols, base(shape, M, p), p, av[p].status()) for p in peers if not av[p].ok]
    live = [p for p in peers if av[p].ok]
    if not live:
        return pd.DataFrame(rows, columns=cols)

    if prepare is None and DEVICE == "cuda" and precompile_ahead:
        from . import precompile

        precompile.ensure(*precompile.blockwise_ahead(shapes, Ms, seed=seed, with_quant=with_quant), peers=live,
                          log=log or print)

    import torch

    from ..measure import bench
    from . import adapters

    prepare = prepare or adapters.BLOCKWISE
    for shape in track(shape_objs, desc="peers blockwise", unit="shapes"):
        N, K = shape.N, shape.K
        for M in track(Ms, desc="M"):
            s0, w = harness.blockwise_operands(M, N, K, seed + M, device=DEVICE)
            rows_chk = bw.check_rows(M, seed=seed)
            method = "graph" if M <= graph_max_m else "auto"
            for p in live:
                b0 = base(shape, M, p)
                try:
                    prep = prepare[p](s0.x, w)
                    with discover.autotune_choices() as chosen:
                        got = harness.poisoned_call(prep, s0.x, M, N)
                    ref = prep.extra["ref_x"][torch.as_tensor(rows_chk, device=got.device)] @ prep.w_ref.t()
                    chk = bw.compare(got, ref, rows_chk)
                    del got
                except discover.PeerUnavailable as e:
                    rows.append(status_row(cols, b0, p, f"not-run: {e}", av[p].version))
                    continue
                except Exception as e:  # noqa: BLE001
                    rows.append(status_row(cols, b0, p, "error: " + error_text(e), av[p].version))
                    continue
                if not bw.passes(chk):
                    rows.append(status_row(cols, {**b0, **chk}, p, f"failed-check: relerr {chk['relerr']:.3g}, "
                                           f"calc_diff {chk['calc_diff']:.3g}, NaNs {chk['nan_left']}", av[p].version))
                    continue
                try:
                    per = harness.tensor_bytes(prep.state)
                    n_sets = min(max_sets, bench.n_rotation_sets(per, _l2_bytes(), max_sets=10**6))
                    states = [prep.state] + [prep.clone(prep.state) for _ in range(n_sets - 1)]
                    fn = bench.rotating(lambda st: prep.call(st, None, None), [(st,) for st in states])
                    for _ in range(n_sets):
                        fn()
                    _sync()
                    tm, clk = measure_harness.timed(fn, sampler=sampler, method=method, warmup_ms=warmup_ms,
                                                    rep_ms=rep_ms, graph_threshold_s=graph_threshold_s)
                except Exception as e:  # noqa: BLE001
                    rows.append(status_row(cols, {**b0, **chk}, p, "error: timing: " + error_text(e), av[p].version))
                    continue
                wb = harness.tensor_bytes(prep.weights(prep.state))
                cnt = registry.count(p, M=M, N=N, K=K)
                r = {c: math.nan for c in cols}
                r.update(b0, **chk, **bw.timing_cols(tm, cnt, weight_bytes=wb), **clk, weight_bytes=wb,
                         config=discover.with_choices(prep.config, chosen), poison="allocator",
                         min_bytes=cnt.bytes)
                r.update(harness.peer_columns(p, av[p].version, nbytes=cnt.weight_bytes))
                rows.append(r)
                if log:
                    log(f"{shape.name} M={M} {p}: {tm.p50_s * 1e6:.1f} us")
                if with_quant and prep.extra.get("with_quant") is not None:
                    rows.append(_with_quant_row(cols, b0, p, av[p].version, prep, states, s0.x, ref, rows_chk, cnt,
                                                wb, method, bw, warmup_ms=warmup_ms, rep_ms=rep_ms,
                                                graph_threshold_s=graph_threshold_s, sampler=sampler))
                    if log:
                        log(f"{shape.name} M={M} {p} + {QUANT_OWN}: {rows[-1]['status']}, "
                            f"{rows[-1]['time_p50_s'] * 1e6:.1f} us")
                states = prep = ref = None
            del s0, w
            _free()
    return pd.DataFrame(rows, columns=cols)


def _with_quant_row(cols, b0, p, version, prep, states, x, ref, rows_chk, cnt, wb, method, bw, **timing) -> dict:
    """The row of one blockwise peer timed with its own activation quantiser inside the call."""
    qcall = prep.extra["with_quant"]
    base = {**b0, "quant": QUANT_OWN}
    M, N = x.shape[0], prep.w_ref.shape[0]
    try:
        measure_harness.poison_allocator((M, N), device=x.device)
        with discover.autotune_choices() as chosen:
            got = qcall(prep.state, x)
        _sync()
        chk = bw.compare(got, ref, rows_chk)
        del got
    except Exception as e:  # noqa: BLE001
        return status_row(cols, base, p, "error: " + error_text(e), version)
    if not bw.passes(chk):
        return status_row(cols, {**base, **chk}, p, f"failed-check: relerr {chk['relerr']:.3g}", version)
    try:
        from ..measure import bench

        xs = [x] + [x.clone() for _ in range(len(states) - 1)]
        fn = bench.rotating(qcall, list(zip(states, xs)))
        for _ in range(len(states)):
            fn()
        _sync()
        tm, clk = measure_harness.timed(fn, method=method, **timing)
    except Exception as e:  # noqa: BLE001
        return status_row(cols, {**base, **chk}, p, "error: timing: " + error_text(e), version)
    r = {c: math.nan for c in cols}
    r.update(base, **chk, **bw.timing_cols(tm, cnt, weight_bytes=wb), **clk, weight_bytes=wb,
             config=discover.with_choices(prep.config, chosen), poison="allocator", min_bytes=cnt.bytes)
    r.update(harness.peer_columns(p, version, nbytes=cnt.weight_bytes))
    return r


# ------------------------------------------------------------------------------------------
# per-token-group quantisers: notebook 06b
# ------------------------------------------------------------------------------------------
#: what the quantiser peers' table adds to notebook 06b's columns: their codes and scales against
#: the true-division rule too (baselines.quant_act_true_division), and what they write for the
#: input's all-zero group (group 0 of row 0; fp8lab's reference: scale 1, codes 0)
QUANTISER_CHECK_COLUMNS = ["codes_vs_true_division", "scales_vs_true_division", "zero_group_scale",
                           "zero_group_nan_codes"]


def quantiser_columns() -> list:
    from ..experiments import quantisers as qx

    return columns(qx.COLUMNS) + QUANTISER_CHECK_COLUMNS


def quantisers(Ms: Sequence[int], Ks: Sequence[int], peers: Sequence[str], *, rep_ms: float = 40,
               warmup_ms: float = 10, seed: int = 0, sampler=None, avail=None,
               make: Optional[dict] = None) -> pd.DataFrame:
    """One row per (peer, M, K) in :func:`quantiser_columns`: codes and scales compared bit for bit
    with baselines.quant_act_reference and with its true-division twin (the count of differing ones
    recorded; a peer that rounds differently is reported, not failed), what it wrote for the
    all-zero group, then timed on rotated inputs, each call's fresh outputs held for one rotation
    cycle so that they rotate too (:func:`fp8lab.measure.harness.holding`; 06b's own arms write to
    one preallocated output per input set)."""
    from ..experiments import quantisers as qx

    peer_catalog.check_ids(peers, "06b")
    cols = quantiser_columns()
    av = _available(peers, avail)
    rows = []
    for K in Ks:
        for M in Ms:
            rows += [status_row(cols, dict(arm=p, M=M, K=K), p, av[p].status()) for p in peers if not av[p].ok]
    live = [p for p in peers if av[p].ok]
    if not live:
        return pd.DataFrame(rows, columns=cols)

    import torch

    from ..kernels import baselines
    from . import adapters

    make = make or adapters.QUANTISERS
    l2 = _l2_bytes()
    for p in track(live, desc="peer quantisers", unit="peers"):
        try:
            fn = make[p]()
        except Exception as e:  # noqa: BLE001
            st = f"not-run: {e}" if isinstance(e, discover.PeerUnavailable) else "error: " + error_text(e)
            rows += [status_row(cols, dict(arm=p, M=M, K=K), p, st, av[p].version) for K in Ks for M in Ms]
            continue
        for K in Ks:
            for M in Ms:
                b0 = dict(arm=p, M=M, K=K)
                try:
                    nbytes = registry.count(p, M=M, K=K).bytes
                    n_sets, resident = qx._n_sets(nbytes, l2)
                    xs = [qx.make_input(M, K, seed=seed + M, device=DEVICE)]
                    xs += [xs[0].clone() for _ in range(n_sets - 1)]
                    rq, rs = baselines.quant_act_reference(xs[0])
                    tq, ts = baselines.quant_act_true_division(xs[0])
                    q, s = fn(xs[0])
                    _sync()
                    qb, sf = q.view(torch.uint8), s.float().reshape(M, -1)
                    codes = int((qb != rq.view(torch.uint8)).sum().item())
                    scales = int((sf != rs).sum().item())
                    checks = dict(codes_vs_true_division=int((qb != tq.view(torch.uint8)).sum().item()),
                                  scales_vs_true_division=int((sf != ts).sum().item()),
                                  zero_group_scale=float(sf[0, 0].item()),
                                  zero_group_nan_codes=int(((qb.reshape(M, -1)[0, :baselines.GROUP] & 0x7F) == 0x7F)
                                                           .sum().item()))
                    # outputs rotate with the inputs, as the own arms' preallocated ones do (measure.harness.holding)
                    tm, clk, tnote = harness.time_rotated(measure_harness.holding(fn, n_sets), [(x,) for x in xs],
                                                          method="graph", rep_ms=rep_ms, warmup_ms=warmup_ms,
                                                          sampler=sampler)
                except Exception as e:  # noqa: BLE001
                    rows.append(status_row(cols, b0, p, "error: " + error_text(e), av[p].version))
                    continue
                r = {c: math.nan for c in cols}
                r.update(b0, bytes=float(nbytes), time_p20_s=tm.p20_s, time_p50_s=tm.p50_s, time_p80_s=tm.p80_s,
                         gbps_p50=nbytes / tm.p50_s / 1e9, bitwise_ok=codes == 0 and scales == 0,
                         codes_differing=codes, scales_differing=scales, **checks, l2_resident=resident,
                         timing_method=tm.method, rotation_sets=tm.rotation_sets, n_samples=tm.n, **clk)
                r.update(harness.peer_columns(p, av[p].version, note=tnote))
                rows.append(r)
    return pd.DataFrame(rows, columns=cols)
