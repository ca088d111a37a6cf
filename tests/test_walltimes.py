"""make run's wall times: recorded from a run folder's run.json, rendered into the README."""

import json

import pytest

from fp8lab.run import cli
from fp8lab.report import walltimes


def _run_json(tmp_path, name, *, fresh, built, ok=True, **over):
    rj = {"run_id": name, "mode": "measure", "started": "2026-12-01T13:00:00+00:00", "wall_s": 400.0,
          "host": {"cpu_count": 16}, "gpu_names": ["NVIDIA H200"], "git": {"commit": "a" * 40},
          "make": {"setup_s": 20.0, "build_s": 100.0, "total_s": 520.0, "fresh_install": fresh,
                   "build": {"built": built, "cached": 9 - built}},
          "notebooks": [{"name": "00_environment", "ok": True, "seconds": 40.0},
                        {"name": "08_decode_bandwidth", "ok": ok, "seconds": 90.0}]}
    rj.update(over)
    d = tmp_path / name
    d.mkdir()
    (d / "run.json").write_text(json.dumps(rj))
    return d


def test_cold_and_warm_rows_and_the_readme_line(tmp_path, sandbox):
    cold = _run_json(tmp_path, "r1", fresh=True, built=9)
    warm = _run_json(tmp_path, "r2", fresh=False, built=0)
    assert cli.main(["walltimes", "record", str(cold)]) == 0
    assert cli.main(["walltimes", "record", str(warm)]) == 0
    assert cli.main(["walltimes", "record", str(cold)]) == 0          # replaces, not appends
    text = walltimes.render(f"x\n{walltimes.BEGIN}\nSTALE\n{walltimes.END}\ny")
    assert "STALE" not in text and text.startswith("x\n") and text.endswith("y")
    line = text.splitlines()[2]
    assert "NVIDIA H200 (16 CPU cores)" in line
    assert "cold (fresh box, install and kernel builds included) **8.7 min**" in line
    assert "9 targets built" in line and "slowest 08_decode_bandwidth 90 s" in line
    assert line.count("warm (") == 1 and line.count("cold (") == 1


@pytest.mark.parametrize("over, fresh, built, why", [
    ({"smoke": True}, True, 9, "only a full measure run"),
    ({"mode": "replot"}, True, 9, "only a full measure run"),
    ({}, True, 0, "neither cold nor warm"),
    ({"make": None}, True, 9, "no make times"),
])
def test_what_is_no_record(tmp_path, sandbox, capsys, over, fresh, built, why):
    d = _run_json(tmp_path, "r", fresh=fresh, built=built, **over)
    assert cli.main(["walltimes", "record", str(d)]) == 2
    err = capsys.readouterr().err
    assert why in err and err.count("\n") == 1


def test_a_failed_run_is_no_record(tmp_path, sandbox, capsys):
    d = _run_json(tmp_path, "r", fresh=True, built=9, ok=False)
    assert cli.main(["walltimes", "record", str(d)]) == 2
    assert "failed notebooks" in capsys.readouterr().err
    assert cli.main(["walltimes", "record", str(tmp_path / "nope")]) == 2


def test_the_slowest_notebook_is_timed_without_its_wait_for_the_gpu(tmp_path, sandbox):
    """Taking turns on one GPU, a notebook's seconds include the wait for its turn: the record's
    'slowest' is its own time."""
    nbs = [{"name": "05_arms_over_m", "ok": True, "seconds": 150.0, "gpu_wait_s": 100.0},
           {"name": "08_decode_bandwidth", "ok": True, "seconds": 90.0, "gpu_wait_s": 2.0}]
    d = _run_json(tmp_path, "r", fresh=True, built=9, notebooks=nbs)
    assert walltimes.row_from_run(json.loads((d / "run.json").read_text()))["slowest"] == "08_decode_bandwidth 88 s"
