"""The multi-GPU runner on CPU: fake GPU ids, host fixture notebooks built here."""

import json

import nbformat
import pytest
import yaml

from fp8lab import cli, runner


def _nb(*cells: str):
    nb = nbformat.v4.new_notebook()
    p = nbformat.v4.new_code_cell('mode = "auto"\nn = 3')
    p.metadata["tags"] = ["parameters"]
    nb.cells = [p] + [nbformat.v4.new_code_cell(c) for c in cells]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


@pytest.fixture
def gpu_manifest(tmp_path):
    """Three notebooks that append their CUDA_VISIBLE_DEVICES to a file, and one that fails."""
    nbdir = tmp_path / "notebooks"
    nbdir.mkdir()
    seen = tmp_path / "seen"
    seen.mkdir()
    record = ("import os, time\n"
              "time.sleep(1.0)  # long enough that the other worker takes the next notebook\n"
              "open({path!r}, 'a').write(os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>') + '\\n')")
    nbs = {f"2{i}_rec": _nb(record.format(path=str(seen / f"2{i}_rec.txt"))) for i in range(3)}
    nbs["29_fail"] = _nb("assert n == 4, 'n must be 4'")
    entries = []
    for name, nb in nbs.items():
        nbformat.write(nb, nbdir / f"{name}.ipynb")
        entries.append({"id": name[:2], "name": name, "title": name,
                        "kind": "gpu" if name == "21_rec" else "host", "timeout": 120})
    manifest = nbdir / "manifest.yaml"
    manifest.write_text(yaml.safe_dump({"notebooks": entries}))
    return manifest, tmp_path, seen


def test_two_fake_gpus_share_the_queue(gpu_manifest, no_gpu):
    manifest, tmp, seen = gpu_manifest
    lines = []
    rc = runner.run(manifest=manifest, run_dir=tmp / "run", progress=False, echo=lines.append,
                    gpus="0,1", stagger_s=0.2)
    assert rc == 1                                   # 29_fail failed; the others still ran
    ran = {f.stem: f.read_text().split() for f in seen.glob("*.txt")}
    assert sorted(ran) == ["20_rec", "21_rec", "22_rec"]
    assert all(len(v) == 1 for v in ran.values())    # each exactly once
    used = {v[0] for v in ran.values()}
    assert used == {"0", "1"}                        # both workers took notebooks
    summary = json.loads((tmp / "run" / "run.json").read_text())
    assert summary["gpus"] == ["0", "1"]
    rows = {o["name"]: o for o in summary["notebooks"]}
    assert list(rows) == ["20_rec", "21_rec", "22_rec", "29_fail"]       # manifest order
    for name, v in ran.items():
        assert rows[name]["ok"] and rows[name]["gpu"] == v[0]
        assert rows[name]["output"] == str(tmp / "run" / f"gpu{v[0]}" / f"{name}.ipynb")
        assert (tmp / "run" / f"gpu{v[0]}" / f"{name}.ipynb").is_file()
    assert not rows["29_fail"]["ok"] and "n must be 4" in rows["29_fail"]["error"]
    text = "\n".join(lines)
    assert "2 worker(s), one per GPU: 0, 1" in text
    assert "3 passed, 1 failed" in text and "FAIL  29_fail on gpu" in text


def _fake_execute(calls, clash_once=("20_rec",), error="ZMQError: Address already in use"):
    def fake(spec, params, out_dir, *, timeout=None, kernel="python3", env=None):
        calls.append((spec.name, env["CUDA_VISIBLE_DEVICES"], out_dir.name))
        if spec.name in clash_once and sum(c[0] == spec.name for c in calls) == 1:
            return runner.Outcome(spec.name, False, 0.1, out_dir / spec.path.name, error=error)
        if spec.name == "29_fail":
            return runner.Outcome(spec.name, False, 0.1, out_dir / spec.path.name, cell=1,
                                  error="AssertionError: n must be 4")
        return runner.Outcome(spec.name, True, 0.1, out_dir / spec.path.name)
    return fake


def test_port_clash_is_retried_on_the_same_worker(gpu_manifest, no_gpu, monkeypatch):
    manifest, tmp, _ = gpu_manifest
    calls = []
    monkeypatch.setattr(runner, "execute_one", _fake_execute(calls))
    rc = runner.run(only=["20", "21"], manifest=manifest, run_dir=tmp / "r", progress=False,
                    echo=lambda s: None, gpus=[0, 1], stagger_s=0)
    assert rc == 0
    first = [c for c in calls if c[0] == "20_rec"]
    assert len(first) == 2 and first[0][1:] == first[1][1:]      # same worker, same folder
    rows = {o["name"]: o for o in json.loads((tmp / "r" / "run.json").read_text())["notebooks"]}
    assert rows["20_rec"]["attempts"] == 2 and rows["21_rec"]["attempts"] == 1


def test_port_clash_gives_up_and_other_errors_are_not_retried(gpu_manifest, no_gpu, monkeypatch):
    manifest, tmp, _ = gpu_manifest
    calls = []

    def always_clash(spec, params, out_dir, **kw):
        calls.append(spec.name)
        if spec.name == "20_rec":
            return runner.Outcome(spec.name, False, 0.1, out_dir / spec.path.name,
                                  error="RuntimeError: Kernel died before replying to kernel_info")
        return runner.Outcome(spec.name, False, 0.1, out_dir / spec.path.name, cell=1,
                              error="ZMQError: Address already in use")   # in a cell: a real failure
    monkeypatch.setattr(runner, "execute_one", always_clash)
    rc = runner.run(only=["20", "22"], manifest=manifest, run_dir=tmp / "r", progress=False,
                    echo=lambda s: None, gpus="0", stagger_s=0)
    assert rc == 1
    assert calls.count("20_rec") == 1 + runner.PORT_RETRIES and calls.count("22_rec") == 1


def test_gpu_ids_are_validated(no_gpu):
    assert runner.parse_gpus(None) is None
    assert runner.parse_gpus("0, 3") == ["0", "3"] and runner.parse_gpus([1]) == ["1"]
    for bad, msg in [("0,0", "twice"), ("a", "non-negative integer"), ("-1", "non-negative"),
                     ("", "non-negative integer"), ([], "at least one id")]:
        with pytest.raises(runner.UsageError, match=msg):
            runner.parse_gpus(bad)
    with pytest.raises(runner.UsageError, match="NVML sees none"):
        runner.parse_gpus("all")


def test_cli_gpus(gpu_manifest, no_gpu, monkeypatch, capsys):
    manifest, tmp, _ = gpu_manifest
    monkeypatch.setattr(runner, "manifest_path", lambda: manifest)
    calls = []
    monkeypatch.setattr(runner, "execute_one", _fake_execute(calls, clash_once=()))
    assert cli.main(["run", "--gpus", "--no-progress", "--out", str(tmp / "c")]) == 2
    assert "--gpus all needs an NVIDIA GPU" in capsys.readouterr().err
    assert not calls
    assert cli.main(["run", "--gpus", "0,1", "--stagger", "0", "--only", "20,21,22",
                     "--no-progress", "--out", str(tmp / "c")]) == 0
    assert sorted(c[0] for c in calls) == ["20_rec", "21_rec", "22_rec"]
    assert {c[2] for c in calls} <= {"gpu0", "gpu1"}
    from fp8lab import provenance
    monkeypatch.setattr(provenance, "gpu_count", lambda: 3)
    assert runner.parse_gpus("all") == ["0", "1", "2"]
