"""fp8lab.arms.counts through the registry: every arm the experiments emit is counted by one
rule, the rules give the numbers worked out by hand below, and no experiment or notebook
re-derives FLOPs inline."""

import re

import pytest

from fp8lab import paths
from fp8lab.arms import counts, registry
from fp8lab.experiments import three_arms as ta
from fp8lab.kernels import quant_act as qa, weight_only as wo
from fp8lab.arms import peer_catalog

from test_registry import emitted

ROOT = paths.repo_root()
#: the kernels behind notebook 00's ceilings: each counts its own launch configuration
UNCOUNTED = {"copy_d2d", "fma_peak", "hmma_peak"}


def test_every_emitted_arm_has_a_count_rule():
    arms = emitted()["arm"]
    no_rule = sorted(a for a in arms if registry.entry(a).count is None)
    assert set(no_rule) == UNCOUNTED & arms, no_rule
    for a in arms - UNCOUNTED:
        rule, *_ = registry.entry(a).count
        assert rule in counts.RULES, (a, rule)


@pytest.mark.parametrize("arm", sorted(set(registry.ids("arm")) - UNCOUNTED))
def test_counts_add_up(arm):
    c = registry.count(arm, M=3, N=384, K=512)
    assert c.bytes == sum(c.parts.values()) > 0
    assert 0 <= c.weight_bytes <= c.bytes
    e = registry.entry(arm)
    gemm = e.count[0] not in ("quant_act", "dequant_w8")
    assert c.flops == (2 * 3 * 384 * 512 if gemm else 0)
    assert (c.weight_bytes > 0) == (e.count[0] != "quant_act")


def test_w8a8_blockwise():
    c = registry.count("mma_blockwise", M=4096, N=4096, K=4096)
    assert c.flops == 2 * 4096 ** 3
    assert c.bytes == 2 * 4096 * 4096 + 4 * (4096 * 32 + 32 * 32) + 2 * 4096 * 4096
    c1 = registry.count("cutlass_blockwise_sm90", M=1, N=136, K=256)     # a ragged N block has a scale
    assert c1.parts["act_scales"] + c1.parts["scales"] == 4 * (1 * 2 + 2 * 2)
    c7 = registry.count("triton_blockwise", M=7, N=576, K=1152)
    assert c7.bytes == 7 * 1152 + 576 * 1152 + 4 * (7 * 9 + 5 * 9) + 2 * 7 * 576
    assert c7.weight_bytes == 576 * 1152 + 4 * 5 * 9
    assert registry.count("peer_deepgemm", M=7, N=576, K=1152) == c7     # a peer of the same format


def test_baselines():
    assert registry.count("cublas_bf16", M=2, N=8, K=128).bytes == 2 * (2 * 128 + 8 * 128 + 2 * 8)
    t = registry.count("cublas_fp8_tensorwise", M=2, N=8, K=128)         # one fp32 scale per operand
    assert t.bytes == 2 * 128 + 8 * 128 + 2 * 8 * 2 + 8 and t.weight_bytes == 8 * 128 + 4


def test_seed001():
    c = registry.count("wmma_w8a16", M=256, N=7168, K=18432)
    assert c.flops == 2 * 256 * 7168 * 18432
    assert c.bytes == 2 * 256 * 18432 + 7168 * 18432 + 4 * 56 * 144 + 2 * 256 * 7168
    assert registry.count("scalar_tiled", M=1, N=200, K=128, out_bytes=4).parts["out"] == 4 * 200
    d = registry.count("dequant_w8_bf16", N=7168, K=18432)
    assert d.bytes == 7168 * 18432 * 3 + 4 * 56 * 144 and d.flops == 0
    # the seed's "12.7 GB per step": 4.238 G weights at 1 byte in + 2 bytes out
    assert 3 * ta.SEED["step_params"] / 1e9 == pytest.approx(12.7, abs=0.05)
    with pytest.raises(ValueError, match="out_bytes"):
        registry.count("wmma_w8a16", M=1, N=1, K=128, out_bytes=3)


def test_quantisers():
    for arm in ("quant_act_warp", "torch_reference", "traffic_copy", "peer_vllm_quant_group"):
        c = registry.count(arm, M=256, K=7168)
        assert c.bytes == 256 * 7168 * 3 + 4 * 256 * 56 and c.flops == 0 and c.weight_bytes == 0
    assert qa.NAIVE_BUSY_THREADS / qa.NAIVE_THREADS_PER_BLOCK == 1 / 32


def test_weight_only():
    b = registry.count("gemv_w8a16_fp8", N=4096, K=4096)
    assert (b.parts["codes"], b.parts["scales"], b.weight_bytes) == (4096 * 4096, 4096 * 32 * 2,
                                                                     4096 * 4096 + 4096 * 64)
    n = registry.count("gemv_w4a16_nvfp4", N=4096, K=4096)
    assert n.parts["codes"] == 4096 * 2048 and n.parts["scales"] == 4096 * 256 + 4
    assert registry.count("gemv_w8a16_int8", N=96, K=384) == registry.count("gemv_w8a16_fp8", N=96, K=384)
    assert wo.bytes_per_element("int4") == 0.5 + 2 / 128
    f = registry.count("gemv_w4a16_int4", M=3, N=256, K=512)
    assert f.flops == 2 * 3 * 256 * 512 and f.bytes == f.weight_bytes + 3 * 512 * 2 + 3 * 256 * 2
    # notebook 08's format comparison: the same shape read as every format
    assert [registry.count(wo.ARMS[fmt], N=4096, K=4096).weight_bytes for fmt in wo.FORMATS] == [
        4096 * 4096 + 4096 * 64, 4096 * 4096 + 4096 * 64, 4096 * 2048 + 4096 * 256 + 4, 4096 * 2048 + 4096 * 64]


@pytest.mark.parametrize("pid", [p for p in registry.ids("arm") if registry.is_peer(p)
                                 and peer_catalog.get(p).kind != "quantiser"])
def test_a_peers_weight_stream_is_its_formats(pid):
    assert registry.count(pid, N=256, K=384).weight_bytes == peer_catalog.weight_stream_bytes(pid, 256, 384)


@pytest.mark.parametrize("arm, kw, msg", [
    ("mma_blockwise", dict(M=1, N=1, K=200), "multiple of 128"),
    ("gemv_w8a16_fp8", dict(M=1, N=16, K=100), "multiple of 128"),
    ("quant_act_warp", dict(M=1, K=100), "multiple of 128"),
    ("mma_blockwise", dict(M=0, N=1, K=128), "positive integer"),
    ("cublas_bf16", dict(M=1, K=128), "N must be a positive integer, got None"),
    ("gemv_w8a16_fp8", dict(M=2.5, N=16, K=128), "positive integer"),
    ("cublas_bf16", dict(M=True, N=16, K=128), "positive integer"),
])
def test_bad_shapes_get_one_line(arm, kw, msg):
    with pytest.raises(ValueError, match=msg) as e:
        registry.count(arm, **kw)
    assert "\n" not in str(e.value)


def test_table_cells_count():
    np = pytest.importorskip("numpy")
    want = registry.count("cublas_bf16", M=4, N=16, K=128)
    assert registry.count("cublas_bf16", M=np.int64(4), N=16.0, K=np.float32(128)) == want


def test_uncounted_and_unknown_ids_name_the_registry():
    for bad in ("fma_peak", "not_an_arm"):
        with pytest.raises(registry.UnknownId, match="fp8lab/arms/registry.py"):
            registry.count(bad, M=1, N=128, K=128)


#: FLOPs written out by hand: 2 * M * N * K in any spelling (a shape's .N / .K included)
INLINE_FLOPS = re.compile(r"\b2(?:\.0)?\s*\*\s*(?:[A-Za-z_][\w.]*\.)?M\s*\*\s*(?:[A-Za-z_][\w.]*\.)?N\s*\*"
                          r"\s*(?:[A-Za-z_][\w.]*\.)?K\b")


@pytest.mark.parametrize("src, hit", [("flop = 2.0 * M * N * K", True), ("2 * M * shape.N * shape.K", True),
                                      ("2*M*N*K", True), ("2 * M * K", False), ("per_set = 2 * N * K", False)])
def test_the_inline_flop_scan(src, hit):
    assert bool(INLINE_FLOPS.search(src)) is hit


def test_no_experiment_or_notebook_counts_flops_itself():
    """Rates come from registry.count; a FLOP count typed into an experiment drifts from it."""
    files = sorted((ROOT / "fp8lab").rglob("*.py")) + sorted((ROOT / "notebooks").glob("*.py"))
    bad = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}" for p in files if p.name != "counts.py"
           for i, line in enumerate(p.read_text().splitlines(), 1) if INLINE_FLOPS.search(line)]
    assert not bad, "count FLOPs with fp8lab.arms.registry.count:\n" + "\n".join(bad)
