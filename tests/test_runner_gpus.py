"""The multi-GPU runner on CPU: fake GPU ids, host fixture notebooks built here."""

import json

import nbformat
import pytest
import yaml

from fp8lab.run import cli, notebooks, runner
from nb_fixture import make_notebook, write_manifest


def _nb(*cells: str):
    return make_notebook(*cells, params='mode = "auto"\nn = 3')


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
    manifest = write_manifest(nbdir, nbs, kind=lambda name: "gpu" if name == "21_rec" else "host")
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
            return notebooks.Outcome(spec.name, False, 0.1, out_dir / spec.path.name, error=error)
        if spec.name == "29_fail":
            return notebooks.Outcome(spec.name, False, 0.1, out_dir / spec.path.name, cell=1,
                                  error="AssertionError: n must be 4")
        return notebooks.Outcome(spec.name, True, 0.1, out_dir / spec.path.name)
    return fake


def test_port_clash_is_retried_on_the_same_worker(gpu_manifest, no_gpu, monkeypatch):
    manifest, tmp, _ = gpu_manifest
    calls = []
    monkeypatch.setattr(notebooks, "execute_one", _fake_execute(calls))
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
            return notebooks.Outcome(spec.name, False, 0.1, out_dir / spec.path.name,
                                  error="RuntimeError: Kernel died before replying to kernel_info")
        return notebooks.Outcome(spec.name, False, 0.1, out_dir / spec.path.name, cell=1,
                              error="ZMQError: Address already in use")   # in a cell: a real failure
    monkeypatch.setattr(notebooks, "execute_one", always_clash)
    rc = runner.run(only=["20", "22"], manifest=manifest, run_dir=tmp / "r", progress=False,
                    echo=lambda s: None, gpus="0", stagger_s=0)
    assert rc == 1
    assert calls.count("20_rec") == 1 + notebooks.PORT_RETRIES and calls.count("22_rec") == 1


def test_gpu_ids_are_validated(no_gpu):
    assert runner.parse_gpus(None) is None
    assert runner.parse_gpus("0, 3") == ["0", "3"] and runner.parse_gpus([1]) == ["1"]
    for bad, msg in [("0,0", "twice"), ("a", "non-negative integer"), ("-1", "non-negative"),
                     ("", "non-negative integer"), ([], "at least one id")]:
        with pytest.raises(notebooks.UsageError, match=msg):
            runner.parse_gpus(bad)
    with pytest.raises(notebooks.UsageError, match="NVML sees none"):
        runner.parse_gpus("all")


def test_cli_gpus(gpu_manifest, no_gpu, monkeypatch, capsys):
    manifest, tmp, _ = gpu_manifest
    monkeypatch.setattr(notebooks, "manifest_path", lambda: manifest)
    calls = []
    monkeypatch.setattr(notebooks, "execute_one", _fake_execute(calls, clash_once=()))
    assert cli.main(["run", "--gpus", "--no-progress", "--out", str(tmp / "c")]) == 2
    assert "--gpus all needs an NVIDIA GPU" in capsys.readouterr().err
    assert not calls
    assert cli.main(["run", "--gpus", "0,1", "--stagger", "0", "--only", "20,21,22",
                     "--no-progress", "--out", str(tmp / "c")]) == 0
    assert sorted(c[0] for c in calls) == ["20_rec", "21_rec", "22_rec"]
    assert {c[2] for c in calls} <= {"gpu0", "gpu1"}
    from fp8lab.report import provenance
    monkeypatch.setattr(provenance, "gpu_count", lambda: 3)
    assert runner.parse_gpus("all") == ["0", "1", "2"]


def test_every_smoke_parameter_is_declared_by_its_notebook():
    """make smoke runs on a GPU only: its parameters are checked here, on CPU, against every
    notebook's parameters cell (name and type), so a renamed parameter fails CI, not the GPU."""
    specs = notebooks.load_manifest()
    per_nb = notebooks.resolve_parameters(specs, runner.smoke_pairs(specs))
    assert all(s.smoke is not None for s in specs)
    gpu_nbs = [s for s in specs if s.kind == "gpu" and s.name != "07_roofline"]
    assert all(per_nb[s.name] for s in gpu_nbs), "every measuring notebook has a smaller smoke sweep"


def test_smoke_needs_a_gpu_and_no_replot(gpu_manifest, no_gpu):
    manifest, tmp, _ = gpu_manifest
    with pytest.raises(notebooks.UsageError, match="--smoke measures on a GPU"):
        runner.run(manifest=manifest, run_dir=tmp / "run", progress=False, echo=lambda *_: None,
                   smoke=True)
    with pytest.raises(notebooks.UsageError, match="does not go with --mode replot"):
        runner.run(manifest=manifest, run_dir=tmp / "run", progress=False, echo=lambda *_: None,
                   smoke=True, mode="replot")


def test_smoke_writes_into_the_run_folder_only(tmp_path, monkeypatch):
    """--smoke: measure mode, the manifest's smoke parameters injected (a -p overrides one),
    FP8LAB_DATA_DIR / FP8LAB_FIGURES_DIR pointing into the run folder."""
    nbdir = tmp_path / "notebooks"
    nbdir.mkdir()
    out = tmp_path / "seen.json"
    nb = _nb("import json, os\n"
             f"json.dump(dict(mode=mode, n=n, data=os.environ['FP8LAB_DATA_DIR'], "
             f"figs=os.environ['FP8LAB_FIGURES_DIR']), open({str(out)!r}, 'w'))")
    nbformat.write(nb, nbdir / "20_x.ipynb")
    (nbdir / "manifest.yaml").write_text(yaml.safe_dump({"notebooks": [
        {"id": "20", "name": "20_x", "title": "x", "kind": "gpu", "timeout": 120, "smoke": {"n": 1}}]}))
    from fp8lab.report import provenance
    monkeypatch.setattr(provenance, "gpu_present", lambda: True)
    monkeypatch.setattr(provenance, "gpu_count", lambda: 1)
    rc = runner.run(manifest=nbdir / "manifest.yaml", run_dir=tmp_path / "run", progress=False,
                    echo=lambda *_: None, smoke=True)
    assert rc == 0
    seen = json.loads(out.read_text())
    assert seen == {"mode": "measure", "n": 1, "data": str(tmp_path / "run" / "data"),
                    "figs": str(tmp_path / "run" / "figures")}
    rc = runner.run(manifest=nbdir / "manifest.yaml", run_dir=tmp_path / "run2", progress=False,
                    echo=lambda *_: None, smoke=True, params=[("n", "5")])
    assert rc == 0 and json.loads(out.read_text())["n"] == 5
    assert json.loads((tmp_path / "run" / "run.json").read_text())["smoke"] is True


def test_host_notebooks_run_beside_gpu_notebooks_on_one_gpu(gpu_manifest, monkeypatch):
    """One GPU, measure mode: a host lane takes the host notebooks while the GPU lane runs
    the GPU one; nothing is pinned, every notebook runs once, outcomes in manifest order."""
    manifest, tmp, seen = gpu_manifest
    from fp8lab.report import provenance
    monkeypatch.setattr(provenance, "gpu_present", lambda: True)
    monkeypatch.setattr(provenance, "gpu_count", lambda: 1)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    lines = []
    rc = runner.run(manifest=manifest, run_dir=tmp / "run", progress=False, echo=lines.append,
                    mode="measure", stagger_s=0.1)
    assert rc == 1
    assert any("two lanes" in ln for ln in lines)
    ran = {f.stem: f.read_text().split() for f in seen.glob("*.txt")}
    assert sorted(ran) == ["20_rec", "21_rec", "22_rec"] and all(v == ["<unset>"] for v in ran.values())
    summary = json.loads((tmp / "run" / "run.json").read_text())
    assert [o["name"] for o in summary["notebooks"]] == ["20_rec", "21_rec", "22_rec", "29_fail"]
    assert "gpu" not in summary["notebooks"][0]


def test_run_folders_started_in_the_same_second_differ(tmp_path, monkeypatch):
    monkeypatch.setenv("FP8LAB_ROOT", str(tmp_path))
    a, b = runner.default_run_dir("measure"), runner.default_run_dir("measure")
    assert a != b and a.is_dir() and b.is_dir()


def test_run_json_records_where_and_how_long(tmp_path, monkeypatch):
    """run.json carries the wall times (make's install and prebuild too, when make passes
    them), the host's cores and the commit: what a README timing line is generated from."""
    import time as _time
    t = _time.time()
    monkeypatch.setenv("FP8LAB_MAKE_TIMES", f"{t - 30} {t - 20} {t - 5}")
    rec = runner.run_record("2026-12-01T00:00:00+00:00", t, t + 100)
    assert rec["wall_s"] == 100 and rec["make"] == {"setup_s": 10.0, "build_s": 15.0, "total_s": 130.0,
                                                  "fresh_install": False}
    assert rec["sources"]["sha256"]
    assert rec["host"]["cpu_count"] >= 1 and "commit" in rec["git"]
    monkeypatch.setenv("FP8LAB_MAKE_TIMES", "garbage")
    assert "make" not in runner.run_record("x", t, t + 1)


def test_a_smoke_run_that_writes_into_data_fails(tmp_path, monkeypatch):
    """The smoke's promise (nothing under data/ or figures/ changes) is checked, not assumed."""
    nbdir = tmp_path / "notebooks"
    nbdir.mkdir()
    data = tmp_path / "data"
    (data / "h200").mkdir(parents=True)
    monkeypatch.setenv("FP8LAB_DATA_DIR", str(data))
    monkeypatch.setenv("FP8LAB_FIGURES_DIR", str(tmp_path / "figures"))
    # a notebook that ignores the redirect and writes the committed folder
    nbformat.write(_nb(f"open({str(data / 'h200' / 'x.csv')!r}, 'w').write('a')"), nbdir / "20_x.ipynb")
    (nbdir / "manifest.yaml").write_text(yaml.safe_dump({"notebooks": [
        {"id": "20", "name": "20_x", "title": "x", "kind": "gpu", "timeout": 120}]}))
    from fp8lab.report import provenance
    monkeypatch.setattr(provenance, "gpu_present", lambda: True)
    monkeypatch.setattr(provenance, "gpu_count", lambda: 1)
    lines = []
    rc = runner.run(manifest=nbdir / "manifest.yaml", run_dir=tmp_path / "run", progress=False,
                    echo=lines.append, smoke=True)
    assert rc == 1 and any("changed 1 file(s) under data/ or figures/" in ln for ln in lines)


def _three_gpu_notebooks(tmp_path, monkeypatch, cell: str, prefix: str):
    """Three GPU-kind notebooks ``<prefix>0_g``.. running ``cell`` (formatted with its name and a
    stamp path), on one fake GPU; returns (manifest, stamps folder)."""
    nbdir = tmp_path / "notebooks"
    nbdir.mkdir()
    stamps = tmp_path / "stamps"
    stamps.mkdir()
    entries = []
    for i in range(3):
        name = f"{prefix}{i}_g"
        nbformat.write(_nb(cell.format(name=name, p=str(stamps / f"{prefix}{i}"))), nbdir / f"{name}.ipynb")
        entries.append({"id": f"{prefix}{i}", "name": name, "title": "g", "kind": "gpu", "timeout": 120})
    (nbdir / "manifest.yaml").write_text(yaml.safe_dump({"notebooks": entries}))
    from fp8lab.report import provenance
    monkeypatch.setattr(provenance, "gpu_present", lambda: True)
    monkeypatch.setattr(provenance, "gpu_count", lambda: 1)
    return nbdir / "manifest.yaml", stamps


def test_a_smoke_runs_two_gpu_notebooks_at_once_on_one_gpu(tmp_path, monkeypatch):
    """--smoke on one GPU: two GPU lanes share it (the smoke checks the path, not numbers), so
    two GPU notebooks overlap in time; a measure run never shares the GPU."""
    cell = ("import time, pathlib\nt0 = time.time(); time.sleep(1.5)\n"
            "pathlib.Path({p!r}).write_text(f'{{t0}} {{time.time()}}')")
    manifest, stamps = _three_gpu_notebooks(tmp_path, monkeypatch, cell, "3")
    lines = []
    rc = runner.run(manifest=manifest, run_dir=tmp_path / "run", progress=False,
                    echo=lines.append, smoke=True, stagger_s=0.1)
    assert rc == 0, lines
    assert any("2 GPU notebooks at a time" in ln for ln in lines)
    spans = sorted(tuple(map(float, f.read_text().split())) for f in stamps.iterdir())
    # two lanes: some notebook started while another ran (which pair depends on how fast each
    # kernel starts: under CPU load the first can finish before the second has started)
    assert len(spans) == 3 and any(b[0] < a[1] for a, b in zip(spans, spans[1:])), spans
    with pytest.raises(notebooks.UsageError, match="only a smoke"):
        runner.run(manifest=manifest, run_dir=tmp_path / "r2", progress=False,
                   echo=lines.append, mode="measure", gpu_slots=2)
    with pytest.raises(notebooks.UsageError, match="whole number"):
        runner.run(manifest=manifest, run_dir=tmp_path / "r3", progress=False,
                   echo=lines.append, smoke=True, gpu_slots=0)


def test_gpu_notebooks_take_turns_in_a_measure_run(tmp_path, monkeypatch):
    """A measure run on one GPU starts the next GPU notebook while one runs, but the second
    reaches its GPU work (results.start_run) only after the first has ended; the wait is in
    run.json and the notebook's log says so."""
    cell = ("import time, pathlib\nfrom fp8lab.report import results\n"
            "started = time.time()\nresults.take_gpu_turn({name!r})\nt0 = time.time(); time.sleep(1.5)\n"
            "pathlib.Path({p!r}).write_text(f'{{started}} {{t0}} {{time.time()}}')")
    manifest, stamps = _three_gpu_notebooks(tmp_path, monkeypatch, cell, "4")
    lines = []
    rc = runner.run(manifest=manifest, run_dir=tmp_path / "run", progress=False,
                    echo=lines.append, mode="measure", stagger_s=0.1)
    assert rc == 0, lines
    assert any("take turns" in ln for ln in lines)
    spans = [tuple(map(float, (stamps / f"4{i}").read_text().split())) for i in range(3)]
    turns = sorted(spans, key=lambda s: s[1])
    for a, b in zip(turns, turns[1:]):
        assert b[1] >= a[2]                     # one at a time on the GPU
    assert any(b[0] < a[2] for a, b in zip(turns, turns[1:]))   # the next started while one measured
    rows = json.loads((tmp_path / "run" / "run.json").read_text())["notebooks"]
    assert sum(r.get("gpu_wait_s", 0) > 0.5 for r in rows) >= 1
    # without the runner's lock there is no turn to take
    from fp8lab.report import results
    monkeypatch.delenv(results.GPU_TURN_ENV, raising=False)
    assert results.take_gpu_turn("x") is None
