"""The access pattern's ceiling (wo.pattern_stream, gemv_pattern.cuh) on the GPU: every thread of
the pattern kernel reads exactly the weight and scale words its GEMV thread reads, on the same grid
(split-K and stream-K, odd shapes, uneven splits, ranges that straddle tiles, several M blocks), at
the CTAs per SM asked for; it survives CUDA-graph capture; bad input is refused in one line.

What a thread reads is derived here independently of the kernel, from the packed layout of
weight_only.py (the words of 16-row tile t, 128-K step s), and checked through the pattern's one
store: the kernel XORs everything a thread loaded and stores it where it equals the key; with the key
set to one thread's expected XOR, exactly that thread's sink word (and no other, barring a 32-bit
coincidence) must hold it."""

import numpy as np
import pytest

from fp8lab.kernels import weight_only as wo

pytestmark = pytest.mark.gpu

SENTINEL = 0xFFFFFFFF


def _packed(fmt, N, K, seed=0):
    d = wo.generate(fmt, 1, N, K, act="bf16", seed=seed)
    return wo.pack_weights(fmt, d["codes"], d["scales"], act="bf16", global_scale=d["global_scale"]).to("cuda")


def _thread_words_xor(w, s, fmt, nt, steps, units, lane, order="tile", n_tiles16=None):
    """XOR of the words one GEMV thread loads: weight uint4 words and scale words of the (tile16, step)
    pairs in ``units`` (its warp's 16-row tile per unit), per the packed layout (weight_only.pack_*):
    weights [super-tile][step][4][32] uint4, a TM = 1 4-bit warp taking loads 2 sub, 2 sub + 1 of
    its super-tile; scales per (super-tile, step): 8-bit [g], int4 [g][tile], nvfp4 [g][q][tile].
    order 'step': the chunk of (super-tile, step) where a step-major packing would hold it."""
    bits = wo.BITS[fmt]
    tm = wo.tiles_per_warp(fmt, nt)
    per_super = 1 if bits == 8 else 2
    k_s = 64 if fmt == "nvfp4" else (8 if bits == 8 else 16)
    loads = tm * (16 if bits == 8 else 8) // 4
    w4 = w.reshape(-1, 4)
    g, q = lane // 4, lane % 4
    x = np.uint32(0)
    for t16, st in units:
        sup, sub = divmod(t16, per_super)
        sstep = sup * steps + st if order == "tile" else st * (n_tiles16 // per_super) + sup
        wp = sstep * 128 + (2 * sub if (bits == 4 and tm == 1) else 0) * 32 + lane
        for i in range(loads):
            for v in w4[wp + 32 * i]:
                x ^= v
        if bits == 8:
            sp = g
        elif fmt == "int4":
            sp = 2 * g + (sub if tm == 1 else 0)
        else:
            sp = 2 * (4 * g + q) + (sub if tm == 1 else 0)
        for t in range(2 if tm == 2 else 1):
            x ^= s[sstep * k_s + sp + t]
    return int(x)


def _splitk_units(pw, nt, splits, cx, y, warp):
    tm = wo.tiles_per_warp(pw.fmt, nt)
    sps = -(-pw.steps // splits)
    tile16 = (cx * wo.WARPS + warp) * tm
    if tile16 >= pw.n_tiles16:
        return None
    return [(tile16, st) for st in range(y * sps, min(pw.steps, (y + 1) * sps))]


def _streamk_units(pw, M, nt, ctas, c, warp):
    tm = wo.tiles_per_warp(pw.fmt, nt)
    plan = wo.streamk_plan(pw.fmt, M, pw.N, pw.K, ctas)
    u0 = c * plan["units_per_cta"]
    u1 = min(plan["units"], u0 + plan["units_per_cta"])
    out = []
    for u in range(u0, u1):
        cx, st = divmod(u, pw.steps)
        tile16 = (cx * wo.WARPS + warp) * tm
        if tile16 < pw.n_tiles16:
            out.append((tile16, st))
    return out


def _one_thread(pw, M, schedule, launch_kw, cta, warp, lane, expected):
    """Run the pattern with the key = expected; the sink words that hold it."""
    import torch
    g = wo.pattern_geometry(pw.fmt, M, pw.N, pw.K, schedule=schedule,
                            **{k: v for k, v in launch_kw.items() if k != "order"})
    sink = torch.full((g["threads"],), -1, dtype=torch.int32, device="cuda")     # every word SENTINEL
    occ = wo.pattern_stream(pw, M, schedule=schedule, sink=sink, key=expected, **launch_kw)
    torch.cuda.synchronize()
    got = sink.cpu().numpy().view(np.uint32)
    idx = cta * wo.THREADS + 32 * warp + lane
    return got, idx, occ


@pytest.mark.parametrize("fmt", wo.FORMATS)
@pytest.mark.parametrize("M", [1, 16, 83])
# N = 200 / 328: a partial last CTA tile; 7 and 13 steps; 3 splits of 7 (uneven), 5 of 13
@pytest.mark.parametrize("N,K,splits", [(200, 896, 3), (328, 1664, 5)])
@pytest.mark.parametrize("order", wo.PATTERN_ORDERS)
def test_splitk_pattern_threads_read_their_gemv_threads_words(fmt, M, N, K, splits, order):
    """order 'tile': the GEMV's own words; 'step' (the probes' what-if): the same chunks where a
    step-major packing would hold them."""
    pw = _packed(fmt, N, K, seed=M + N)
    w = pw.w.cpu().numpy().view(np.uint32)
    s = pw.s.cpu().numpy().view(np.uint32)
    nt = wo.n_tiles(M)
    g = wo.pattern_geometry(fmt, M, N, K, schedule="splitk", splits=splits)
    gx, gy, gz = g["grid"]
    rng = np.random.default_rng(M + N)
    # the last CTA along N (partial), the last split (short), the last M block, and random threads
    picks = [(gx - 1, gy - 1, gz - 1, 0, 31), (0, 0, 0, 7, 5)]
    picks += [(int(rng.integers(gx)), int(rng.integers(gy)), int(rng.integers(gz)), int(rng.integers(8)),
               int(rng.integers(32))) for _ in range(3)]
    for cx, y, z, warp, lane in picks:
        units = _splitk_units(pw, nt, g["splits"], cx, y, warp)
        if units is None:
            continue                                                 # a warp past N loads nothing
        exp = _thread_words_xor(w, s, fmt, nt, pw.steps, units, lane, order, pw.n_tiles16)
        cta = (z * gy + y) * gx + cx
        got, idx, occ = _one_thread(pw, M, "splitk", dict(splits=splits, order=order), cta, warp, lane, exp)
        assert got[idx] == exp, (cx, y, z, warp, lane)
        assert set(np.unique(got).tolist()) <= {exp, SENTINEL}
        assert occ == wo.launch_config(pw, M)["ctas_per_sm"]


@pytest.mark.parametrize("fmt", wo.FORMATS)
@pytest.mark.parametrize("M", [1, 16])
# 3 and 5 CTAs: ranges start mid-tile and run into the next; 1000: one unit each
@pytest.mark.parametrize("ctas", [3, 5, 1000])
def test_streamk_pattern_threads_read_their_gemv_threads_words(fmt, M, ctas):
    N, K = 328, 1664
    pw = _packed(fmt, N, K, seed=ctas)
    w = pw.w.cpu().numpy().view(np.uint32)
    s = pw.s.cpu().numpy().view(np.uint32)
    nt = wo.n_tiles(M)
    g = wo.pattern_geometry(fmt, M, N, K, schedule="streamk", ctas=ctas)
    gx = g["grid"][0]
    rng = np.random.default_rng(ctas)
    picks = [(gx - 1, 7, 3), (0, 0, 0)] + [(int(rng.integers(gx)), int(rng.integers(8)), int(rng.integers(32)))
                                           for _ in range(3)]
    for c, warp, lane in picks:
        units = _streamk_units(pw, M, nt, ctas, c, warp)
        if not units:
            continue
        exp = _thread_words_xor(w, s, fmt, nt, pw.steps, units, lane)
        got, idx, _ = _one_thread(pw, M, "streamk", dict(ctas=ctas), c, warp, lane, exp)
        assert got[idx] == exp, (c, warp, lane)
        assert set(np.unique(got).tolist()) <= {exp, SENTINEL}


@pytest.mark.parametrize("ctas_per_sm", [1, 2, 3])
def test_pattern_runs_at_the_occupancy_asked_for(ctas_per_sm):
    pw = _packed("fp8", 4096, 1024)
    assert wo.pattern_stream(pw, 1, splits=2, ctas_per_sm=ctas_per_sm) == ctas_per_sm
    assert wo.pattern_stream(pw, 1, schedule="streamk", ctas=200, ctas_per_sm=ctas_per_sm) == ctas_per_sm


def test_pattern_defaults_are_the_gemv_launch_and_survive_graph_capture():
    import torch
    pw = _packed("int4", 2048, 2048)
    cfg = wo.launch_config(pw, 1)
    assert wo.pattern_stream(pw, 1) == cfg["ctas_per_sm"]
    sink = wo.pattern_sink(pw.w.device, 1 << 20)
    # once eagerly first, as a timing's warm-up does: the occupancy queries and the kernel attributes
    # are set outside the capture, which then only records launches
    wo.pattern_stream(pw, 16, schedule="streamk", sink=sink)
    torch.cuda.synchronize()
    gr = torch.cuda.CUDAGraph()
    with torch.cuda.graph(gr):
        wo.pattern_stream(pw, 1, sink=sink)
        wo.pattern_stream(pw, 16, schedule="streamk", sink=sink)
    for _ in range(3):
        gr.replay()
    torch.cuda.synchronize()


def test_pattern_rejects_bad_input():
    import torch
    pw = _packed("fp8", 64, 256)
    for kw, msg in ((dict(schedule="bulk"), "copy engine"), (dict(ctas=4), "ctas applies"),
                    (dict(schedule="streamk", splits=2), "takes no splits"), (dict(splits=3), "splits must be"),
                    (dict(ctas_per_sm=0), "ctas_per_sm must be"), (dict(key=2**32), "key must be"),
                    (dict(order="row"), "order must be"), (dict(schedule="streamk", order="step"), "split-K what-if")):
        with pytest.raises(ValueError, match=msg) as e:
            wo.pattern_stream(pw, 1, **kw)
        assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="sink must be"):
        wo.pattern_stream(pw, 1, sink=torch.zeros(4, dtype=torch.int32, device="cuda"))
    with pytest.raises(ValueError, match="CUDA tensor"):
        wo.pattern_stream(pw.numpy(), 1)
