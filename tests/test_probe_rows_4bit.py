"""scripts/probes/rows_4bit.py on the CPU: its arguments refused in one line, and its table (INT4 and
NVFP4 rows kernels at 4 and 8 rows per CTA, their patterns, split-K, cuBLAS BF16; NVFP4 over INT4 per
form and at each format's best; cuda8 over cuda) from a frame of measure_decode's columns."""

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

PROBE = Path(__file__).resolve().parents[1] / "scripts" / "probes" / "rows_4bit.py"


def _load():
    import importlib.util

    spec = importlib.util.spec_from_file_location("rows_4bit", PROBE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_table_puts_both_formats_and_forms_side_by_side():
    sh, nan = "qwen3-8b:gate_up", float("nan")
    v = {("int4", "cuda"): 0.80, ("int4", "cuda8"): 0.88, ("nvfp4", "cuda"): 0.60, ("nvfp4", "cuda8"): 0.72}
    rows = [dict(shape=sh, fmt=f, M=1, schedule="rows", grid=f"{k} (10, 1)", fraction_of_copy=x,
                 pattern_fraction_of_copy=0.95 if k == "cuda" else 0.9) for (f, k), x in v.items()]
    rows += [dict(shape=sh, fmt="int4", M=1, schedule="splitk", grid="(1, 2, 3)", fraction_of_copy=0.70,
                  pattern_fraction_of_copy=nan),
             dict(shape=sh, fmt="nvfp4", M=1, schedule="splitk", grid="(1, 2, 3)", fraction_of_copy=0.75,
                  pattern_fraction_of_copy=nan),
             dict(shape=sh, fmt="bf16", M=1, schedule="", grid="", fraction_of_copy=0.93, pattern_fraction_of_copy=nan)]
    t = _load().table(pd.DataFrame(rows)).iloc[0]
    assert t["int4_cuda8"] == 0.88 and t["nvfp4_splitk"] == 0.75 and t["cublas_bf16"] == 0.93
    assert t["int4_cuda_pattern"] == 0.95 and t["nvfp4_cuda8_pattern"] == 0.9
    assert t["nv_over_int4_cuda"] == pytest.approx(0.75) and t["nv_over_int4_cuda8"] == pytest.approx(0.72 / 0.88)
    assert t["nv_over_int4_best"] == pytest.approx(0.75 / 0.88)        # each format's fastest kernel
    assert t["int4_cuda8_over_cuda"] == pytest.approx(1.1)


@pytest.mark.parametrize("args, msg", [(["--ms", "1,x"], "--ms must be"), (["--ms", "0"], "--ms must be positive"),
                                       (["--shapes", "nope:x"], "unknown shape")])
def test_bad_arguments_are_one_line(args, msg):
    r = subprocess.run([sys.executable, str(PROBE), *args], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and msg in r.stderr.strip().splitlines()[-1]
    assert "Traceback" not in r.stderr
