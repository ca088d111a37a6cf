"""CPU tests of quant_act_warp_ilp_persistent and the groups_per_warp='auto' rule (issue 6 item 5):
the grid the launcher computes (mirrored in quant_act.persistent_launch), its balance, the rule's
choices from the launch shape, argument checks, and the binding's variant numbers."""
import pytest

from fp8lab.experiments import quantisers as qx
from fp8lab.kernels import quant_act as qa


@pytest.mark.parametrize("M,K", [(1, 128), (7, 384), (83, 7168), (1024, 7168), (4097, 7168), (8192, 7168)])
@pytest.mark.parametrize("gpw", [2, 4, 8])
@pytest.mark.parametrize("sms,bps", [(1, 4), (3, 5), (132, 4), (132, 5), (132, 6), (132, 8)])
def test_persistent_grid_covers_every_group_once_and_is_balanced(M, K, gpw, sms, bps):
    c = qa.persistent_launch(M, K, gpw, sms, bps)
    groups = M * (K // 128)
    warps = c["blocks"] * 8                       # the grid's warps (the last block may have spare ones)
    assert c["blocks"] <= sms * bps               # never more than is resident at once
    assert c["warps"] <= warps < c["warps"] + 8
    # simulate the kernel's walk: warp w owns chunks w, w + W, ... (W = all warps of the grid)
    chunks_of = [len(range(w, c["chunks"], warps)) for w in range(warps)]
    # the walks are disjoint by construction, so this says every chunk (every group) is done exactly once
    assert sum(chunks_of) == c["chunks"] == -(-groups // gpw)
    busy = [n for n in chunks_of if n]
    assert max(busy) - min(busy) <= 1             # no tail: every working warp within one chunk of the rest
    assert max(busy) == c["sweeps"] == c["max_chunks_per_warp"]


def test_persistent_grid_numbers_at_the_target_shape():
    c = qa.persistent_launch(1024, 7168, 4, 132, 5)    # 57344 groups, 14336 chunks, 5280 warp slots
    assert (c["chunks"], c["max_warps"], c["sweeps"], c["warps"], c["blocks"]) == (14336, 5280, 3, 4779, 598)
    assert (c["min_chunks_per_warp"], c["max_chunks_per_warp"]) == (2, 3)
    # at one sweep the grid is the one-chunk-per-warp grid
    assert qa.persistent_launch(83, 384, 2, 132, 8)["blocks"] == qa.ilp_launch(83, 384, 2)["blocks"]


def test_auto_rule_from_the_launch_shape():
    pick = lambda M, sms=132: (lambda a: (a["persistent"], a["groups_per_warp"]))(qa.auto_launch(M, 7168, sms))
    # grid kernels only; the largest groups per warp whose grid still has >= 3 waves of the
    # 132 x 8 = 1056 resident blocks (3168 blocks), else 2
    assert pick(1) == pick(256) == pick(1024) == (False, 2)
    assert pick(1809) == (False, 2) and pick(1810) == (False, 4)   # 101360 groups / 32 per block = 3168 blocks
    assert pick(2048) == (False, 4)
    assert pick(3619) == (False, 4) and pick(3620) == (False, 8)   # 202720 groups / 64 = 3168 blocks (rounded up)
    assert pick(4096) == pick(8192) == (False, 8)
    assert pick(256, sms=16) == (False, 4)             # a small GPU: 448 blocks of g4 >= 3 x 128
    for M in (1, 256, 1024, 8192):
        a = qa.auto_launch(M, 7168, 132)
        ids = qa._PERSISTENT_IDS if a["persistent"] else qa._ILP_IDS
        assert a["variant_id"] == ids[a["groups_per_warp"]]
    with pytest.raises(ValueError, match="sms must be a positive integer"):
        qa.auto_launch(8, 128, 0)
    with pytest.raises(ValueError, match="blocks_per_sm"):
        qa.persistent_launch(8, 128, 4, 132, 0)
    with pytest.raises(ValueError, match="groups_per_warp"):
        qa.persistent_launch(8, 128, 16, 132, 8)


def test_persistent_and_auto_arguments():
    assert qa.ILP_DEFAULT_GROUPS_PER_WARP == "auto"
    assert qa._variant_id("quant_act_warp_ilp", None) is None
    assert qa._variant_id("quant_act_warp_ilp", "auto") is None
    assert [qa._variant_id("quant_act_warp_ilp", g, True) for g in (2, 4, 8)] == [6, 7, 8]
    assert [qa._variant_id("quant_act_warp_ilp", g, False) for g in (2, 4, 8)] == [4, 3, 5]
    ids = [*qa._VARIANT_IDS.values(), *qa._ILP_IDS.values(), *qa._PERSISTENT_IDS.values(), qa._TRAFFIC_COPY_ID]
    assert len(set(ids)) == len(ids)
    with pytest.raises(ValueError, match="persistent must be None with groups_per_warp='auto'"):
        qa.quant_act(None, "quant_act_warp_ilp", persistent=True)
    with pytest.raises(ValueError, match="persistent applies to quant_act_warp_ilp only"):
        qa.quant_act(None, "quant_act_warp", persistent=True)
    with pytest.raises(ValueError, match="persistent must be None, True or False"):
        qa.quant_act(None, "quant_act_warp_ilp", groups_per_warp=4, persistent="yes")
    with pytest.raises(ValueError, match="or 'auto'"):
        qa.quant_act(None, "quant_act_warp_ilp", groups_per_warp="fast")
    with pytest.raises(ValueError, match="CUDA"):
        qa.quant_act([[0.0]], "quant_act_warp_ilp")       # auto needs the device: refused, no crash
    with pytest.raises(ValueError, match="persistent"):
        qx.measure(groups_per_warp="auto", persistent=False)


def test_source_matches_the_python_mirror():
    text = open(qa.__file__[:-3] + ".cu").read()
    assert "variant == 6   ? launch_ilp_persistent<kScaleMulRecip, 1>" in text
    assert "variant == 7 ? launch_ilp_persistent<kScaleMulRecip, 2>" in text
    assert ": launch_ilp_persistent<kScaleMulRecip, 4>" in text
    assert "const long long sweeps = (chunks + max_warps - 1) / max_warps;" in text
    assert "const long long warps = (chunks + sweeps - 1) / sweeps;" in text
    assert "cudaOccupancyMaxActiveBlocksPerMultiprocessor" in text
