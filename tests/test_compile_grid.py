"""The compile grid: parsers on real tool output, config validation before nvcc, one real
compile, and the cache."""

from pathlib import Path

import pytest

from fp8lab.experiments import compile_grid as cg
from fp8lab.toolchain import resources, tools
from fp8lab.kernels import mma_blockwise as mb

FIX = Path(__file__).parent / "fixtures" / "compile_grid"
SEED_SLICE = "_ZN6fp8lab20mma_blockwise_kernelINS_10TileConfigILi64ELi128ELi64ELi64ELi3EEELi0ELi0EEEvNS_9MmaParamsE"
SMALL_BLOCK = "_ZN6fp8lab20mma_blockwise_kernelINS_10TileConfigILi16ELi64ELi16ELi32ELi4EEELi1ELi0EEEvNS_9MmaParamsE"


# --------------------------------------------------------------------------- parsers
def test_ptxas_parser_spilling_kernel_sm89():
    got = resources.parse_ptxas_v((FIX / "ptxas_v_sm89_seed_per_slice.txt").read_text())
    assert list(got) == [SEED_SLICE]
    r = got[SEED_SLICE]
    assert (r["arch"], r["registers"], r["stack_bytes"], r["spill_store_bytes"], r["spill_load_bytes"]) == \
        ("sm_89", 255, 264, 260, 260)
    assert (r["static_smem_bytes"], r["cmem0_bytes"], r["barriers"], r["cumulative_stack_bytes"]) == (0, 440, 1, 264)


def test_ptxas_parser_sm90_without_cmem_and_static_smem():
    r = resources.parse_ptxas_v((FIX / "ptxas_v_sm90_small_per_block.txt").read_text())[SMALL_BLOCK]
    assert (r["arch"], r["registers"], r["stack_bytes"], r["spill_store_bytes"]) == ("sm_90", 137, 0, 0)
    assert r["cmem0_bytes"] == 0  # sm_90's ptxas prints no cmem[0]: absent means 0
    tiny = resources.parse_ptxas_v((FIX / "ptxas_v_sm89_static_smem.txt").read_text())["_Z9tiny_smemPfPKf"]
    assert (tiny["registers"], tiny["static_smem_bytes"], tiny["cmem0_bytes"]) == (12, 1024, 368)


def test_ptxas_parser_three_functions():
    got = resources.parse_ptxas_v((FIX / "ptxas_v_sm90_seed_three_variants.txt").read_text())
    assert len(got) == 3
    by_variant = {name.split("EEELi")[1][0]: rec for name, rec in got.items()}  # ...EEELi<variant>ELi0...
    assert by_variant["1"]["stack_bytes"] == 760 and by_variant["1"]["spill_load_bytes"] == 1992
    assert by_variant["0"]["spill_store_bytes"] == 276 and by_variant["2"]["spill_load_bytes"] == 300
    assert all(r["registers"] == 255 and r["arch"] == "sm_90" for r in got.values())


def test_ptxas_parser_refuses_truncated_output():
    text = (FIX / "ptxas_v_sm89_seed_per_slice.txt").read_text()
    cut = "\n".join(l for l in text.splitlines() if "Used" not in l)
    with pytest.raises(ValueError, match="Used N registers"):
        resources.parse_ptxas_v(cut)


def test_res_usage_parser():
    r = resources.parse_res_usage((FIX / "res_usage_sm89_seed_per_slice.txt").read_text())[SEED_SLICE]
    assert (r["REG"], r["STACK"], r["SHARED"], r["LOCAL"], r["CONSTANT[0]"]) == (255, 264, 0, 0, 440)
    s90 = resources.parse_res_usage((FIX / "res_usage_sm90_small_per_block.txt").read_text())[SMALL_BLOCK]
    assert (s90["REG"], s90["STACK"], s90["SHARED"]) == (137, 0, 1024)  # sm_90: 1 KB reserved smem
    three = resources.parse_res_usage((FIX / "res_usage_sm90_seed_three_variants.txt").read_text())
    assert sorted(r["STACK"] for r in three.values()) == [272, 296, 760]
    with pytest.raises(ValueError, match="no REG"):
        resources.parse_res_usage(" Function f:\n  STACK:0\n")


def test_ptxas_and_res_usage_fixtures_agree():
    """The cross-check the grid applies, on the captured pairs."""
    for ptx_name, res_name in [("ptxas_v_sm89_seed_per_slice.txt", "res_usage_sm89_seed_per_slice.txt"),
                               ("ptxas_v_sm90_small_per_block.txt", "res_usage_sm90_small_per_block.txt"),
                               ("ptxas_v_sm89_static_smem.txt", "res_usage_sm89_static_smem.txt")]:
        p = resources.parse_ptxas_v((FIX / ptx_name).read_text())
        r = resources.parse_res_usage((FIX / res_name).read_text())
        assert p.keys() == r.keys()
        for k in p:
            assert p[k]["registers"] == r[k]["REG"] and p[k]["stack_bytes"] == r[k]["STACK"]


# --------------------------------------------------------------------------- configs
def test_config_list_is_the_grid():
    cfgs = mb.configs()
    assert len(cfgs) == 16 and len({c.name for c in cfgs}) == 16
    assert mb.SEED_CONFIG in cfgs
    assert mb.SEED_CONFIG.warps == 2 and mb.SEED_CONFIG.smem_bytes == 72 * 1024  # the seed's "about 72 KB"
    for c in cfgs:
        for arch in cg.ARCHS:
            c.validate(arch)
    jobs = cg.grid_jobs()
    assert len(jobs) == 96 and len(set(jobs)) == 96


@pytest.mark.parametrize("cfg, arch, match", [
    (mb.MMAConfig(64, 128, 48, 64, 3), "sm_89", "must divide the threadblock"),
    (mb.MMAConfig(64, 128, 64, 64, 3, bk=64), "sm_89", "BK must be 128"),
    (mb.MMAConfig(24, 64, 24, 32, 3), "sm_89", "multiple of the mma M"),
    (mb.MMAConfig(64, 96, 32, 24, 3), "sm_89", "multiple of 16"),
    (mb.MMAConfig(64, 192, 32, 48, 3), "sm_89", "must divide 128"),
    (mb.MMAConfig(64, 256, 64, 256, 2), "sm_89", "must divide 128"),
    (mb.MMAConfig(64, 128, 64, 64, 1), "sm_89", "STAGES must be >= 2"),
    (mb.MMAConfig(256, 256, 16, 32, 2), "sm_90", "threads per block"),
    (mb.MMAConfig(128, 256, 64, 64, 3), "sm_89", "exceeds the sm_89 per-block limit"),
    (mb.MMAConfig(256, 256, 64, 64, 4), "sm_90", "exceeds the sm_90 per-block limit"),
    (mb.MMAConfig(64, 128, 64, 64, 3), "sm_80", "arch must be one of"),
    (mb.MMAConfig(0, 128, 64, 64, 3), "sm_89", "positive integer"),
])
def test_bad_configs_raise_before_nvcc(cfg, arch, match, monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(cg, "_run_nvcc", lambda args: calls.append(args))
    with pytest.raises(ValueError, match=match):
        cfg.validate(arch)
    with pytest.raises(ValueError, match=match if arch != "sm_80" else "arch must be one of"):
        # a good config first: validation of the whole grid happens before any compile
        cg.build_grid([mb.SEED_CONFIG, cfg], variants=["per_block"], archs=[arch], cache_dir=tmp_path)
    assert calls == []


def test_same_config_legal_on_sm90_only():
    big = mb.MMAConfig(128, 256, 64, 64, 3)  # 144 KB
    big.validate("sm_90")
    with pytest.raises(ValueError, match="sm_89"):
        big.validate("sm_89")


def test_bad_variant_and_arch_raise(monkeypatch, tmp_path):
    monkeypatch.setattr(cg, "_run_nvcc", lambda args: pytest.fail("nvcc must not run"))
    with pytest.raises(ValueError, match="variant must be one of"):
        cg.build_grid("all", variants=["per_tile"], cache_dir=tmp_path)
    with pytest.raises(ValueError, match="arch must be one of"):
        cg.build_grid("all", archs=["sm_100"], cache_dir=tmp_path)
    with pytest.raises(ValueError, match="unknown config name"):
        cg.build_grid(["64x64"], cache_dir=tmp_path)


def test_cache_key_depends_on_every_input():
    base = cg.Job(mb.SEED_CONFIG, "per_block", "sm_89")
    kw = dict(sources={"a": "1"}, nvcc_version="13.0.88", cuobjdump_version="13.5.37")
    k0 = cg.cache_key(base, **kw)
    assert k0 == cg.cache_key(cg.Job(mb.SEED_CONFIG, "per_block", "sm_89"), **kw)
    others = [
        cg.cache_key(cg.Job(mb.SEED_CONFIG, "per_slice", "sm_89"), **kw),
        cg.cache_key(cg.Job(mb.SEED_CONFIG, "per_block", "sm_90"), **kw),
        cg.cache_key(cg.Job(mb.MMAConfig(64, 128, 32, 64, 3), "per_block", "sm_89"), **kw),
        cg.cache_key(cg.Job(mb.SEED_CONFIG, "per_block", "sm_89", "per_cta"), **kw),
        cg.cache_key(base, **{**kw, "sources": {"a": "2"}}),
        cg.cache_key(base, **{**kw, "nvcc_version": "12.9.0"}),
    ]
    assert len({k0, *others}) == 1 + len(others)


# --------------------------------------------------------------------------- real nvcc
needs_nvcc = pytest.mark.skipif(not (tools.have_tool("nvcc") and tools.have_tool("cuobjdump")),
                                reason="needs nvcc and cuobjdump")


@needs_nvcc
def test_real_compile_then_cache_hit(monkeypatch, tmp_path):
    small = mb.MMAConfig(16, 64, 16, 32, 4)
    calls = []
    real = cg._run_nvcc
    monkeypatch.setattr(cg, "_run_nvcc", lambda args: calls.append(args) or real(args))
    df = cg.build_grid([small], variants=["per_block"], archs=["sm_89"], cache_dir=tmp_path)
    assert len(calls) == 1 and len(df) == 1
    row = df.iloc[0]
    assert row["config"] == "16x64x128_w16x32_s4" and row["variant"] == "per_block" and row["arch"] == "sm_89"
    assert 0 < row["registers"] <= 255 and row["res_reg"] == row["registers"]
    assert row["stack_bytes"] == row["res_stack"]
    assert row["dynamic_smem_bytes"] == 4 * (16 + 64) * 128 and row["smem_bytes"] >= row["dynamic_smem_bytes"]
    assert row["warps"] == 2 and row["threads"] == 64
    # sm_89 has a native FP8 tensor instruction: 4 slices x 1 m16 tile x 4 n8 tiles per 128-wide block
    assert row["sass_mma_opcodes"] == "QMMA.16832.F32.E4M3.E4M3" and row["sass_qmma"] == 16
    assert row["sass_loop_instructions"] > 0
    assert not row["cached"] and df.attrs["n_compiled"] == 1

    # Rebuild: nvcc must not run, the row is the same.
    monkeypatch.setattr(cg, "_run_nvcc", lambda args: pytest.fail("cache miss: nvcc ran again"))
    again = cg.build_grid([small], variants=["per_block"], archs=["sm_89"], cache_dir=tmp_path)
    assert bool(again.iloc[0]["cached"]) and again.attrs["n_cached"] == 1
    cols = ["registers", "stack_bytes", "spill_store_bytes", "spill_load_bytes", "smem_bytes", "kernel"]
    assert again[cols].equals(df[cols])
    assert len(list(tmp_path.rglob("*.json"))) == 1 and len(list(tmp_path.rglob("*.cubin"))) == 1
    assert not list(tmp_path.rglob("*.tmp"))


# --------------------------------------------------------------------------- verdict rules
def _table(per_slice, per_block, inplace=(200, 0, 0, 0), arch="sm_89", n_other=0):
    """Rows for the seed config: (registers, stack, spill stores, spill loads) per variant."""
    from fp8lab.experiments import spills
    rows = []
    for variant, (reg, stack, st, ld) in zip(mb.VARIANTS, (per_slice, per_block, inplace)):
        rows.append(dict(arm=spills.ARM, config=mb.SEED_CONFIG.name, variant=variant, arch=arch, registers=reg,
                         stack_bytes=stack, spill_store_bytes=st, spill_load_bytes=ld, smem_bytes=73728,
                         res_reg=reg, res_stack=stack, compile_s=1.0, build_s=1.2, spills=bool(stack or st or ld),
                         nvcc_version="13.0.88"))
    import pandas as pd
    return pd.DataFrame(rows)


def test_verdict_a1_rules():
    from fp8lab.experiments.spills import verdict_a1
    v = verdict_a1(_table((255, 600, 596, 620), (230, 0, 0, 0)))
    assert v.verdict == "holds" and "STACK 600 B" in v.our_figure
    assert v.subject == "analogue" and "240 registers" in v.rule and "300-1200 B" in v.rule
    v = verdict_a1(_table((255, 64, 60, 60), (230, 0, 0, 0)))
    assert v.verdict == "holds-in-kind" and "64 B vs the seed's 600 B" in v.reason
    v = verdict_a1(_table((255, 264, 260, 260), (255, 376, 484, 592), (255, 0, 0, 0)))
    assert v.verdict == "differs" and "per_block spills too" in v.reason and "256 fp32 registers" in v.reason
    assert "per_block_inplace variant is the one that compiles clean" in v.reason
    v = verdict_a1(_table((180, 0, 0, 0), (170, 0, 0, 0)))
    assert v.verdict == "differs" and "per_slice does not spill" in v.reason
    v = verdict_a1(_table((200, 8, 4, 4), (170, 0, 0, 0)))   # a spill far from the cap is not the seed's
    assert v.verdict == "differs"
    with pytest.raises(ValueError, match="expected one row"):
        verdict_a1(_table((255, 600, 1, 1), (200, 0, 0, 0), arch="sm_90"))


@pytest.mark.parametrize("reg, stack, want", [(240, 600, "holds"), (239, 600, "differs"), (255, 300, "holds"),
                                              (255, 299, "holds-in-kind"), (255, 1200, "holds"),
                                              (255, 1201, "holds-in-kind")])
def test_verdict_a1_boundaries(reg, stack, want):
    from fp8lab.experiments import spills
    assert spills.verdict_a1(_table((reg, stack, 8, 8), (230, 0, 0, 0))).verdict == want
    ex = dict(_EXAMPLE, registers=reg, stack_bytes=stack)
    assert spills.verdict_a1_seed(ex).verdict == want


_EXAMPLE = dict(source="/x/cutlass", commit="7107b05535f8", example="ex94", arch="sm_89", bm=64, bn=128, bk=128,
                wm=64, wn=64, stages=3, kernel="k", registers=255, stack_bytes=576, spill_store_bytes=1616,
                spill_load_bytes=1088, res_reg=255, res_stack=576, nvcc_version="13.0.88", compile_s=4.0,
                status="measured")


def test_verdict_a1_seed_row():
    from fp8lab.experiments import spills
    v = spills.verdict_a1_seed(_EXAMPLE)
    assert (v.claim, v.subject, v.verdict) == ("A1", "seed", "holds")
    assert "REG 255 / STACK 576 B" in v.our_figure and "@7107b05535" in v.our_figure
    assert "per-block fix" in v.reason                      # the caveat of a holds row
    # no spill at all: differs
    clean = dict(_EXAMPLE, registers=168, stack_bytes=0, spill_store_bytes=0, spill_load_bytes=0)
    assert spills.verdict_a1_seed(clean).verdict == "differs"
    # without a checkout: not-run, saying how to enable it
    v = spills.verdict_a1_seed(None)
    assert v.verdict == "not-run" and spills.CUTLASS_ENV in v.reason and v.subject == "seed"
    # a failed build or another tile in the source is not a verdict on the seed's kernel
    assert spills.verdict_a1_seed(dict(_EXAMPLE, status="error: nvcc failed")).verdict == "not-run"
    v = spills.verdict_a1_seed(dict(_EXAMPLE, wn=32))
    assert v.verdict == "not-run" and "no longer builds the seed's tile" in v.reason


def test_example_tile_and_cutlass_src(tmp_path, monkeypatch):
    from fp8lab.experiments import spills
    src = ("using Gemm = cutlass::gemm::device::GemmBlockwise<\n  cutlass::gemm::GemmShape<64, 128, 128>,\n"
           "  cutlass::gemm::GemmShape<64, 64, 128>, cutlass::gemm::GemmShape<16, 8, 32>, X>;\n"
           "static int const Stages = 3;\n")
    assert spills.example_tile(src) == dict(bm=64, bn=128, bk=128, wm=64, wn=64, stages=3)
    with pytest.raises(ValueError, match="GemmShape"):
        spills.example_tile("int x;")
    monkeypatch.delenv(spills.CUTLASS_ENV, raising=False)
    assert spills.cutlass_src() is None
    with pytest.raises(ValueError, match="not a CUTLASS source checkout: missing examples/94"):
        spills.cutlass_src(tmp_path)
    for d in spills.CUTLASS_INCLUDES:
        (tmp_path / d).mkdir(parents=True)
    (tmp_path / spills.CUTLASS_EXAMPLE).parent.mkdir(parents=True)
    (tmp_path / spills.CUTLASS_EXAMPLE).write_text(src)
    monkeypatch.setenv(spills.CUTLASS_ENV, str(tmp_path))
    assert spills.cutlass_src() == tmp_path


def test_compile_cutlass_example_parses_ptxas_and_cuobjdump(tmp_path, monkeypatch):
    """The build reads the GEMM kernel out of several; tools are faked (the real build: notebook 02)."""
    import subprocess

    from fp8lab.toolchain import tools
    from fp8lab.experiments import spills
    (tmp_path / spills.CUTLASS_EXAMPLE).parent.mkdir(parents=True)
    (tmp_path / spills.CUTLASS_EXAMPLE).write_text("GemmShape<64, 128, 128> GemmShape<64, 64, 128> Stages = 3;")
    (tmp_path / "COMMIT").write_text("abc123\n")
    k = "_ZN7cutlass6KernelINS_4gemm6kernel22GemmUniversalBlockwiseIfEEvT_"
    ptxas = (f"ptxas info    : Compiling entry function 'fill' for 'sm_89'\n"
             f"ptxas info    : Function properties for fill\n"
             f"    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
             f"ptxas info    : Used 12 registers, used 0 barriers\n"
             f"ptxas info    : Compiling entry function '{k}' for 'sm_89'\n"
             f"ptxas info    : Function properties for {k}\n"
             f"    576 bytes stack frame, 1616 bytes spill stores, 1088 bytes spill loads\n"
             f"ptxas info    : Used 255 registers, used 1 barriers, 576 bytes cumulative stack size\n")
    res = f"Fatbin elf code:\n  Function {k}:\n    REG:255 STACK:576 SHARED:0 LOCAL:0\n  Function fill:\n    REG:12 STACK:0\n"

    monkeypatch.setenv("FP8LAB_CACHE_DIR", str(tmp_path / "cache"))
    calls = []

    def nvcc(cmd):                 # the cubin cache's runner: writes the -o file, prints ptxas -v
        calls.append(cmd)
        Path(cmd[cmd.index("-o") + 1]).write_bytes(b"cubin")
        return 0, "", ptxas

    def cuobjdump(name, args, timeout=600, cwd=None):
        assert name == "cuobjdump"
        return subprocess.CompletedProcess(args, 0, stdout=res, stderr="")
    monkeypatch.setattr(tools, "run_tool", cuobjdump)
    row = spills.compile_cutlass_example(tmp_path, runner=nvcc)
    assert row["status"] == "measured" and row["kernel"] == k and row["commit"] == "abc123"
    assert (row["registers"], row["stack_bytes"], row["spill_store_bytes"], row["res_stack"]) == (255, 576, 1616, 576)
    assert spills.verdict_a1_seed(row).verdict == "holds"
    again = spills.compile_cutlass_example(tmp_path, runner=nvcc)   # the same checkout: from the cache
    assert len(calls) == 1 and again == row

    def broken(cmd):
        return 1, "", "fatal error: cutlass/cutlass.h: No such file"
    (tmp_path / "COMMIT").write_text("def456\n")                      # another checkout: compiled again
    row = spills.compile_cutlass_example(tmp_path, runner=broken)
    assert row["status"].startswith("error: RuntimeError: nvcc failed (exit 1)") and "cutlass.h" in row["status"]
    assert spills.verdict_a1_seed(row).verdict == "not-run"


def test_verdict_a2_rules():
    from fp8lab.experiments.spills import verdict_a2
    t = _table((255, 600, 596, 620), (230, 0, 0, 0))
    attrs = dict(wall_s=1.5, n_compiled=3, n_cached=0, workers=2)
    v = verdict_a2(t, attrs, expected_kernels=3)
    assert v.verdict == "holds" and v.our_figure.startswith("3/3 kernels") and "1.5 s wall" in v.our_figure
    assert v.subject == "analogue" and "all 3 kernels" in v.rule
    assert verdict_a2(t, attrs, expected_kernels=96).verdict == "differs"
    bad = t.copy()
    bad.loc[0, "res_reg"] = 254
    assert verdict_a2(bad, attrs, expected_kernels=3).reason == "ptxas and cuobjdump disagree"
    empty = t.copy()
    empty.loc[1, "stack_bytes"] = float("nan")
    assert verdict_a2(empty, attrs, expected_kernels=3).reason == "the table is incomplete"
    with pytest.raises(ValueError, match="grid's attrs"):
        verdict_a2(t, {}, expected_kernels=3)


def test_a_killed_grid_leaves_no_temp_folder_behind(monkeypatch, tmp_path):
    # A notebook killed in the middle of a compile (timeout, Ctrl-C) runs no cleanup; its
    # temp folder is removed by the next grid.
    import os
    import signal
    import subprocess
    import sys

    from fp8lab.toolchain import procs
    child = subprocess.Popen(
        [sys.executable, "-c",
         "import time\nfrom fp8lab.experiments import compile_grid as cg\n"
         "def slow(args):\n    print('compiling', flush=True)\n    time.sleep(60)\n"
         "cg._run_nvcc = slow\n"
         "cg._compile_fresh(cg.grid_jobs('all', 'per_slice', 'sm_90')[0], 'k' * 64, "
         f"cg.Path({str(tmp_path / 'cache')!r}))"],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": str(tmp_path)})
    try:
        assert child.stdout.readline().strip() == "compiling"
        left = list(tmp_path.glob("fp8lab_grid_*"))
        assert len(left) == 1 and left[0].name.startswith(f"fp8lab_grid_{child.pid}-")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert left[0].is_dir()                                    # SIGKILL: nothing cleaned up
    mine = tmp_path / f"fp8lab_grid_{os.getpid()}-{procs.start_time(os.getpid())}-x"
    mine.mkdir()                                               # a live owner's folder stays
    # the next grid (here: its first job, whose nvcc fails) sweeps before it compiles
    monkeypatch.setattr(procs.tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(procs, "_SWEPT", set())

    def fails(args):
        raise RuntimeError("nvcc stand-in")
    monkeypatch.setattr(cg, "_run_nvcc", fails)
    with pytest.raises(RuntimeError, match="nvcc stand-in"):
        cg._compile_fresh(cg.grid_jobs("all", "per_slice", "sm_90")[0], "k" * 64, tmp_path / "cache")
    assert not left[0].exists() and mine.is_dir()
    assert [p.name for p in tmp_path.glob("fp8lab_grid_*")] == [mine.name]
