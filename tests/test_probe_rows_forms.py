"""scripts/probes/rows_forms.py on the CPU: its arguments refused in one line, and its table (the
tensor-core rows form, its pattern, split-K and cuBLAS BF16 per (shape, format, M); the form over its
own M = 1 rate and over split-K) from a frame of measure_decode's columns."""

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

PROBE = Path(__file__).resolve().parents[1] / "scripts" / "probes" / "rows_forms.py"


def _load():
    import importlib.util

    spec = importlib.util.spec_from_file_location("rows_forms", PROBE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_table_puts_each_kernel_beside_the_form():
    sh = "qwen3-8b:gate_up"
    rows = []
    for M, mma, pat, sk, cb in ((1, 0.80, 0.90, 0.75, 0.95), (16, 0.72, 0.88, 0.60, 0.93)):
        rows += [dict(shape=sh, fmt="fp8", M=M, schedule="rows", grid=f"mma ({M}, 1)", fraction_of_copy=mma,
                      pattern_fraction_of_copy=pat),
                 dict(shape=sh, fmt="fp8", M=M, schedule="splitk", grid="(1, 2, 3)", fraction_of_copy=sk,
                      pattern_fraction_of_copy=float("nan")),
                 dict(shape=sh, fmt="bf16", M=M, schedule="", grid="", fraction_of_copy=cb,
                      pattern_fraction_of_copy=float("nan"))]
    t = _load().table(pd.DataFrame(rows)).set_index("M")
    assert list(t.index) == [1, 16]
    assert t.loc[16, "rows_mma"] == 0.72 and t.loc[16, "pattern"] == 0.88 and t.loc[16, "splitk"] == 0.60
    assert t.loc[16, "cublas_bf16"] == 0.93 and pd.isna(t.loc[16, "rows_cuda"])
    assert t.loc[16, "over_m1"] == pytest.approx(0.72 / 0.80) and t.loc[16, "over_splitk"] == pytest.approx(1.2)


@pytest.mark.parametrize("args, msg", [(["--ms", "1,x"], "--ms must be"), (["--ms", "0"], "--ms must be positive"),
                                       (["--fmts", "nvfp4"], "takes formats"), (["--shapes", "nope:x"], "unknown shape")])
def test_bad_arguments_are_one_line(args, msg):
    r = subprocess.run([sys.executable, str(PROBE), *args], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and msg in r.stderr.strip().splitlines()[-1]
    assert "Traceback" not in r.stderr


def test_table_puts_the_32_row_form_beside_the_16_row_one():
    sh = "qwen3-8b:gate_up"
    rows = []
    for M, mma, m32 in ((1, 0.80, 0.78), (16, 0.60, 0.75)):
        rows += [dict(shape=sh, fmt="int8", M=M, schedule="rows", grid=f"mma ({M}, 1)", fraction_of_copy=mma,
                      pattern_fraction_of_copy=0.9),
                 dict(shape=sh, fmt="int8", M=M, schedule="rows", grid=f"mma32 ({M}, 1)", fraction_of_copy=m32,
                      pattern_fraction_of_copy=0.95),
                 dict(shape=sh, fmt="int8", M=M, schedule="splitk", grid="(1, 2, 3)", fraction_of_copy=0.5,
                      pattern_fraction_of_copy=float("nan"))]
    t = _load().table(pd.DataFrame(rows)).set_index("M")
    assert t.loc[16, "rows_mma32"] == 0.75 and t.loc[16, "pattern32"] == 0.95 and t.loc[16, "pattern"] == 0.9
    assert t.loc[16, "mma32_over_mma"] == pytest.approx(1.25) and t.loc[1, "rows_mma"] == 0.80
