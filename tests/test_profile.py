"""ncu command lines (CPU), the report reader against a fake ncu_report context, and
the committed H200 fixture report when it exists."""

import math
import sys
from pathlib import Path

import pytest

from fp8lab.kernels import ncu_fixture
from fp8lab.toolchain import profile

FIXTURES = sorted((Path(__file__).parent / "fixtures" / "ncu").glob("*.ncu-rep"))


# ------------------------------------------------------------------ command line
def _opt(cmd, flag):
    """Values following each occurrence of ``flag``."""
    return [cmd[i + 1] for i, a in enumerate(cmd) if a == flag]


def test_default_command_leaves_clocks_alone():
    cmd = profile.ncu_command(["python", "x.py"], "out/rep.ncu-rep")
    assert cmd[0] == "ncu"
    assert _opt(cmd, "--clock-control") == ["none"]
    assert _opt(cmd, "--target-processes") == ["all"]
    assert _opt(cmd, "-o") == ["out/rep"]           # ncu appends .ncu-rep itself
    assert "--force-overwrite" in cmd
    assert _opt(cmd, "--section") == list(profile.DEFAULT_SECTIONS)
    assert _opt(cmd, "--metrics") == [",".join(profile.DEFAULT_METRICS)]
    assert cmd[-2:] == ["python", "x.py"]           # the target comes last
    assert "--nvtx" not in cmd and "--kernel-name" not in cmd


def test_default_metrics_cover_the_table():
    m = set(profile.DEFAULT_METRICS)
    for needed in ("dram__throughput.avg.pct_of_peak_sustained_elapsed", "dram__bytes.sum.per_second",
                   "launch__registers_per_thread", "sass__inst_executed_per_opcode",
                   "l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum",
                   "smsp__issue_active.avg.pct_of_peak_sustained_active"):
        assert needed in m


def test_filters_sections_and_metrics():
    cmd = profile.ncu_command(["./app"], "r", kernel_regex="gemv_.*nvfp4",
                              nvtx_include=["decode/", "dom@step"], sections=["SpeedOfLight"],
                              metrics=["dram__bytes.sum"], launch_skip=2, launch_count=5)
    assert _opt(cmd, "--kernel-name") == ["regex:gemv_.*nvfp4"]
    assert "--nvtx" in cmd and _opt(cmd, "--nvtx-include") == ["decode/", "dom@step"]
    assert _opt(cmd, "--section") == ["SpeedOfLight"]
    assert _opt(cmd, "--metrics") == ["dram__bytes.sum"]
    assert _opt(cmd, "--launch-skip") == ["2"] and _opt(cmd, "--launch-count") == ["5"]
    # a single string is one section / one range, not a list of characters
    cmd = profile.ncu_command(["./app"], "r", sections="LaunchStats", nvtx_include="a/", metrics=())
    assert _opt(cmd, "--section") == ["LaunchStats"] and _opt(cmd, "--nvtx-include") == ["a/"]
    assert "--metrics" not in cmd


def test_clock_control_opt_in_and_bad_values():
    assert _opt(profile.ncu_command(["a"], "r", clock_control="base"), "--clock-control") == ["base"]
    with pytest.raises(ValueError, match="clock_control must be one of"):
        profile.ncu_command(["a"], "r", clock_control="locked")
    with pytest.raises(ValueError, match="non-empty argv"):
        profile.ncu_command([], "r")
    with pytest.raises(ValueError, match="launch_count"):
        profile.ncu_command(["a"], "r", launch_count=0)
    with pytest.raises(ValueError, match="kernel_regex"):
        profile.ncu_command(["a"], "r", kernel_regex="")


def _module_level_fn():
    pass


def test_targets():
    assert profile._target_argv("fp8lab.kernels.ncu_fixture:fixture_workload") == [
        sys.executable, "-m", "fp8lab.toolchain.profile", "run", "fp8lab.kernels.ncu_fixture:fixture_workload"]
    argv = profile._target_argv(ncu_fixture.fixture_workload)
    assert argv[-1] == "fp8lab.kernels.ncu_fixture:fixture_workload"
    assert profile._target_argv(["./bin", "--n", 3]) == ["./bin", "--n", "3"]
    with pytest.raises(ValueError, match="importable"):
        profile._target_argv(lambda: None)
    with pytest.raises(ValueError, match="does not exist"):
        profile._target_argv("/no/such/script.py")
    with pytest.raises(ValueError, match="target must be"):
        profile._target_argv(42)
    assert profile._resolve("fp8lab.kernels.ncu_fixture:fixture_workload") is ncu_fixture.fixture_workload
    with pytest.raises(ValueError, match="module:function"):
        profile._resolve("fp8lab.toolchain.profile")


# ------------------------------------------------------------------ reader, fake report
class FakeMetric:
    def __init__(self, value=None, instances=None):
        self._v, self._inst = value, instances    # instances: list of (label, value)

    def value(self, i=None):
        return self._v if i is None else self._inst[i][1]

    def num_instances(self):
        return len(self._inst or [])

    def has_correlation_ids(self):
        return bool(self._inst)

    def correlation_ids(self):
        return FakeMetric(instances=[(lab, lab) for lab, _ in self._inst])


class FakeAction:
    NameBase_MANGLED = 2

    def __init__(self, name, metrics):
        self._name, self._m = name, metrics

    def name(self, base=None):
        return "_Z" + self._name if base == self.NameBase_MANGLED else self._name

    def metric_by_name(self, n):
        return self._m.get(n)


def _fake_seq(count_name, item_name):
    """A class of ncu_report's shape for a list: count_name() is its length, item_name(i) an item
    (IRange holds actions: num_actions / action_by_idx; IContext ranges: num_ranges /
    range_by_idx)."""
    return type(f"Fake_{count_name}", (), {
        "__init__": lambda self, items: setattr(self, "_items", items),
        count_name: lambda self: len(self._items),
        item_name: lambda self, i: self._items[i],
    })


FakeRange = _fake_seq("num_actions", "action_by_idx")
FakeContext = _fake_seq("num_ranges", "range_by_idx")


def _fake_report():
    full = {
        "dram__throughput.avg.pct_of_peak_sustained_elapsed": FakeMetric(91.5),
        "dram__bytes.sum.per_second": FakeMetric(4.1e12),
        "dram__bytes_read.sum": FakeMetric(2.0e9),
        "dram__bytes_write.sum": FakeMetric(1.0e6),
        "smsp__issue_active.avg.pct_of_peak_sustained_active": FakeMetric(31.0),
        "sm__inst_issued.avg.pct_of_peak_sustained_active": FakeMetric(30.5),
        "launch__registers_per_thread": FakeMetric(96),
        "l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum": FakeMetric(10),
        "l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum": FakeMetric(6),
        "smsp__inst_executed.sum": FakeMetric(1.2e7),
        "gpu__time_duration.sum": FakeMetric(500_000.0),           # ns
        "sm__cycles_elapsed.avg.per_second": FakeMetric(1.98e9),
        "device__attribute_display_name": FakeMetric("NVIDIA H200"),
        "sass__inst_executed_per_opcode": FakeMetric(
            1.2e7, [("LOP3", 4e6), ("HMMA", 1e6), ("LDG", 7e6)]),
        "sass__thread_inst_executed_true_per_opcode": FakeMetric(
            3.8e8, [("LOP3", 1.28e8), ("HMMA", 3.2e7), ("LDG", 2.2e8)]),
    }
    full[profile.stall_metric("long_scoreboard")] = FakeMetric(5.2)
    full[profile.stall_metric("barrier")] = FakeMetric(2.0)
    sparse = {"gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed": FakeMetric(12.0),
              "launch__registers_per_thread": FakeMetric(32)}
    return FakeContext([FakeRange([FakeAction("gemv_w4a16_nvfp4", full)]),
                        FakeRange([FakeAction("other", sparse)])])


def test_read_report_from_a_fake_context(monkeypatch):
    monkeypatch.setattr(profile, "load_report", lambda p: _fake_report())
    df = profile.read_report("x.ncu-rep")
    assert list(df["kernel"]) == ["gemv_w4a16_nvfp4", "other"]
    r = df.iloc[0]
    assert r["dram_pct"] == 91.5 and r["issue_active_pct"] == 31.0 and r["registers"] == 96
    assert r["local_bytes"] == 16 * 32                     # sectors are 32 bytes
    assert r["duration_s"] == pytest.approx(5e-4)          # ncu reports ns
    assert r["dram_bytes"] == pytest.approx(2.001e9)
    assert r["device"] == "NVIDIA H200" and r["kernel_mangled"] == "_Zgemv_w4a16_nvfp4"
    assert r["missing"] == "grid_size,block_size"
    o = df.iloc[1]
    assert o["dram_pct"] == 12.0                            # the SpeedOfLight fallback
    assert math.isnan(o["local_bytes"]) and "local_bytes" in o["missing"]
    # stall reasons: read where present, NaN where not, never listed as missing
    assert r["stall_long_scoreboard"] == 5.2 and r["stall_barrier"] == 2.0 and math.isnan(r["stall_wait"])
    assert math.isnan(o["stall_long_scoreboard"]) and "stall" not in o["missing"]


def test_stall_metric_names():
    assert profile.stall_metric("long_scoreboard") == \
        "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio"
    assert len(set(profile.STALL_METRICS)) == len(profile.STALL_REASONS)
    with pytest.raises(ValueError, match="unknown stall reason"):
        profile.stall_metric("coffee_break")


def test_read_opcodes_from_a_fake_context(monkeypatch):
    monkeypatch.setattr(profile, "load_report", lambda p: _fake_report())
    ops = profile.read_opcodes("x.ncu-rep")
    g = ops[ops["kernel"] == "gemv_w4a16_nvfp4"]
    assert list(g["opcode"]) == ["LDG", "LOP3", "HMMA"]      # most executed first
    assert g.set_index("opcode").loc["HMMA", "thread_inst"] == 3.2e7
    assert (ops["kernel"] == "other").sum() == 0


def test_load_report_missing_file():
    with pytest.raises(ValueError, match="does not exist"):
        profile.load_report("/no/such/report.ncu-rep")


# ------------------------------------------------------------------ the committed fixture
@pytest.mark.skipif(not FIXTURES, reason=(
    "ncu fixture missing: tests/fixtures/ncu/*.ncu-rep is made on a GPU box with "
    "`python -m fp8lab.kernels.ncu_fixture tests/fixtures/ncu/h200_small.ncu-rep`"))
@pytest.mark.parametrize("path", FIXTURES, ids=[p.name for p in FIXTURES])
def test_fixture_report(path):
    pytest.importorskip("ncu_report")
    assert path.stat().st_size < 1_000_000, "fixture reports must stay small"
    df = profile.read_report(path)
    ops = profile.read_opcodes(path)
    assert len(df) >= 3, df["kernel"].tolist()
    for _, r in df.iterrows():
        assert 0 <= r["dram_pct"] <= 100, r["kernel"]
        assert r["registers"] > 0, r["kernel"]
        assert r["duration_s"] > 0 and r["sm_clock_hz"] > 1e8
        assert len(ops[ops["action"].eq(r["action"]) & ops["range"].eq(r["range"])]) > 0
    # the elementwise scale reads its 256 MiB input once from DRAM (ncu flushes caches
    # between passes) and is DRAM-bound
    ew = df[df["kernel"].str.contains("fixture_scale")]
    assert len(ew) == 1
    ew = ew.iloc[0]
    assert ew["dram_read_bytes"] == pytest.approx(ncu_fixture.FIXTURE_SCALE_ELEMENTS * 4, rel=0.1)
    assert ew["dram_pct"] > 50
    # the FMA kernel is FFMA and nothing much else, with no local memory
    fma = df[df["kernel"].str.contains("fma_peak")].iloc[0]
    fma_ops = ops[(ops["range"] == fma["range"]) & (ops["action"] == fma["action"])]
    assert fma_ops.iloc[0]["opcode"] == "FFMA"
    assert fma_ops.iloc[0]["warp_inst"] > 0.8 * fma_ops["warp_inst"].sum()
    assert fma["local_bytes"] == 0
    # the bf16 GEMM runs on tensor cores (HGMMA on sm_90, HMMA elsewhere)
    dot = df[df["kernel"].str.contains("fixture_dot")].iloc[0]
    dot_ops = ops[(ops["range"] == dot["range"]) & (ops["action"] == dot["action"])]
    assert dot_ops["opcode"].str.contains("MMA").any()


# ------------------------------------------------------------------ the subprocess plumbing
FAKE_NCU = r'''#!{python}
import json, subprocess, sys
argv = sys.argv[1:]
out = argv[argv.index("-o") + 1]
start = argv.index({python!r})          # the profiled program starts at the interpreter
child = subprocess.run(argv[start:], capture_output=True, text=True)
json.dump({{"argv": argv, "child_rc": child.returncode, "child_err": child.stderr}},
          open({log!r}, "w"))
open(out + ".ncu-rep", "wb").write(b"fake report")
sys.exit(child.returncode)
'''


def test_profile_runs_the_target_under_ncu(tmp_path, monkeypatch):
    from fp8lab.toolchain import tools

    log = tmp_path / "ncu.json"
    fake = tmp_path / "ncu"
    fake.write_text(FAKE_NCU.format(python=sys.executable, log=str(log)))
    fake.chmod(0o755)
    monkeypatch.setenv("FP8LAB_NCU", str(fake))
    tools.find_tool.cache_clear()
    try:
        out = profile.profile("fp8lab.facts.devices:spec_table", tmp_path / "rep", kernel_regex="fma")
        import json
        rec = json.loads(log.read_text())
        assert out == tmp_path / "rep.ncu-rep" and out.read_bytes() == b"fake report"
        assert rec["child_rc"] == 0, rec["child_err"]       # the child imported fp8lab and ran it
        assert rec["argv"][rec["argv"].index("--clock-control") + 1] == "none"
        assert rec["argv"][-2:] == ["run", "fp8lab.facts.devices:spec_table"]
        # a failing target surfaces as an error with ncu's output
        with pytest.raises(RuntimeError, match="ncu failed"):
            profile.profile("fp8lab.facts.devices:no_such_function", tmp_path / "bad")
    finally:
        tools.find_tool.cache_clear()
