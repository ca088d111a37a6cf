"""scripts/probes/decode_pattern.py on the CPU: its arguments refused in one line, and its table (the
GEMV, its pattern at its own grid, the best pattern grid of the sweep) from a frame of its columns."""

import subprocess
import sys
from pathlib import Path

import pandas as pd

PROBE = Path(__file__).resolve().parents[1] / "scripts" / "probes" / "decode_pattern.py"


def _load():
    import importlib.util

    spec = importlib.util.spec_from_file_location("decode_pattern", PROBE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_summary_names_the_gemv_its_pattern_and_the_best_pattern_grid():
    rows = [dict(shape="qwen3-8b:gate_up", fmt="fp8", M=1, kind=k, order=od, splits=s, ctas_per_sm=o, gemv_splits=1,
                 gemv_ctas_per_sm=2, fraction_of_copy=f)
            for k, od, s, o, f in (("gemv splitk", "", 1, 2, 0.77), ("pattern@gemv splitk", "", 1, 2, 0.90),
                                   ("gemv streamk", "", -1, 2, 0.75), ("pattern@gemv streamk", "", -1, 2, 0.88),
                                   ("pattern splitk", "tile", 1, 1, 0.70), ("pattern splitk", "step", 2, 3, 0.95),
                                   ("pattern splitk", "tile", 4, 2, 0.93))]
    lines = _load().summary(pd.DataFrame(rows)).splitlines()
    assert len(lines) == 2
    assert lines[1].split() == ["qwen3-8b:gate_up", "fp8", "1", "0.770", "s1/2", "0.900", "0.750", "0.880",
                                "0.950", "s2/3", "step", "0.930", "s4/2"]


def test_bad_arguments_are_one_line():
    r = subprocess.run([sys.executable, str(PROBE), "--ms", "0"], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and r.stderr.strip().splitlines()[-1].startswith("--ms takes")
    assert "Traceback" not in r.stderr
