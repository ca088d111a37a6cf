"""The runner on small fixture notebooks (built here, executed for real with papermill)."""

import json

import nbformat
import pytest
import yaml

from fp8lab.run import notebooks, runner
from nb_fixture import make_notebook, write_manifest


def _nb(params_src: str, *cells: str):
    return make_notebook(*cells, params=params_src, title="# fixture")


@pytest.fixture
def fixture_manifest(tmp_path):
    nbdir = tmp_path / "notebooks"
    nbdir.mkdir()
    out = tmp_path / "echo.json"
    nbs = {
        "10_ok": _nb('mode = "auto"\nn = 3  # rows; M = N = K >= 1\nname: str = "x"',
                     f"import json\njson.dump({{'mode': mode, 'n': n, 'name': name}}, open({str(out)!r}, 'w'))"),
        "11_fail": _nb('mode = "auto"\nn = 3', "x = 1", "assert n == 4, 'n must be 4'"),
        "12_after": _nb('mode = "auto"\nn = 3', f"open({str(tmp_path / 'after.txt')!r}, 'w').write('ran')"),
        "13_slow": _nb('mode = "auto"\nn = 3', "import time\ntime.sleep(60)"),
    }
    manifest = write_manifest(nbdir, nbs, timeout=lambda name: 8 if name == "13_slow" else 120)
    return manifest, tmp_path, out


def test_failure_does_not_stop_the_others_and_exits_nonzero(fixture_manifest, no_gpu):
    manifest, tmp, out = fixture_manifest
    lines = []
    rc = runner.run(only=["10", "11", "12"], params=[["n", "5"]], manifest=manifest,
                    run_dir=tmp / "run", progress=False, echo=lines.append)
    assert rc == 1
    assert json.loads(out.read_text()) == {"mode": "replot", "n": 5, "name": "x"}
    assert (tmp / "after.txt").read_text() == "ran"          # ran after the failure
    summary = json.loads((tmp / "run" / "run.json").read_text())
    status = {o["name"]: o for o in summary["notebooks"]}
    assert status["10_ok"]["ok"] and status["12_after"]["ok"]
    assert not status["11_fail"]["ok"]
    # markdown, params, papermill's injected parameters, x = 1, assert
    assert status["11_fail"]["cell"] == 4
    assert "AssertionError" in status["11_fail"]["error"] and "n must be 4" in status["11_fail"]["error"]
    text = "\n".join(lines)
    assert "mode replot (no NVIDIA GPU found)" in text
    assert "2 passed, 1 failed" in text and "FAIL  11_fail  cell 4 of the executed copy" in text
    assert (tmp / "run" / "10_ok.ipynb").is_file()           # executed copies in the run folder


def test_replot_sends_gpu_figures_to_the_run_folder(fixture_manifest, no_gpu, monkeypatch):
    manifest, tmp, _ = fixture_manifest
    monkeypatch.delenv("FP8LAB_FIGURES_DIR", raising=False)
    raw = yaml.safe_load(manifest.read_text())
    raw["notebooks"][2]["kind"] = "gpu"            # 12_after becomes a GPU notebook
    nb = _nb('mode = "auto"\nn = 3', "import os\n"
             f"open({str(tmp / 'figdir.txt')!r}, 'w').write(os.environ.get('FP8LAB_FIGURES_DIR', ''))")
    nbformat.write(nb, manifest.parent / "12_after.ipynb")
    manifest.write_text(yaml.safe_dump(raw))
    lines = []
    assert runner.run(only=["12"], manifest=manifest, run_dir=tmp / "r", progress=False,
                      echo=lines.append) == 0
    assert (tmp / "figdir.txt").read_text() == str(tmp / "r" / "figures")
    assert "redraw their figures" in "\n".join(lines)


def test_a_relative_run_folder_still_gets_the_redrawn_figures(fixture_manifest, no_gpu, monkeypatch):
    """--out runs/x is relative to where fp8lab runs, not to the notebook's folder (papermill runs
    each notebook in notebooks/): the redraws go to <cwd>/runs/x/figures."""
    manifest, tmp, _ = fixture_manifest
    monkeypatch.delenv("FP8LAB_FIGURES_DIR", raising=False)
    monkeypatch.chdir(tmp)
    raw = yaml.safe_load(manifest.read_text())
    raw["notebooks"][2]["kind"] = "gpu"
    nb = _nb('mode = "auto"\nn = 3', "import os\n"
             f"open({str(tmp / 'figdir.txt')!r}, 'w').write(os.environ.get('FP8LAB_FIGURES_DIR', ''))")
    nbformat.write(nb, manifest.parent / "12_after.ipynb")
    manifest.write_text(yaml.safe_dump(raw))
    assert runner.run(only=["12"], manifest=manifest, run_dir="rel/r", progress=False,
                      echo=lambda s: None) == 0
    assert (tmp / "figdir.txt").read_text() == str(tmp / "rel" / "r" / "figures")


def test_unknown_parameter_is_an_error_before_anything_runs(fixture_manifest, no_gpu):
    manifest, tmp, out = fixture_manifest
    with pytest.raises(notebooks.UsageError, match="unknown parameter 'nn' for 10_ok.*n, name"):
        runner.run(only=["10"], params=[["nn", "5"]], manifest=manifest, run_dir=tmp / "r",
                   progress=False, echo=lambda s: None)
    assert not out.exists()


def test_parameter_must_exist_in_every_selected_notebook(fixture_manifest, no_gpu):
    manifest, tmp, _ = fixture_manifest
    with pytest.raises(notebooks.UsageError, match="unknown parameter 'name' for 11_fail"):
        runner.run(only=["10", "11"], params=[["name", "y"]], manifest=manifest,
                   run_dir=tmp / "r", progress=False, echo=lambda s: None)


def test_scoped_parameter_and_type_check(fixture_manifest, no_gpu):
    manifest, tmp, out = fixture_manifest
    specs = notebooks.select(notebooks.load_manifest(manifest), ["10", "12"])
    per = notebooks.resolve_parameters(specs, [["10:name", "z"], ["n", "7"]])
    assert per == {"10_ok": {"name": "z", "n": 7}, "12_after": {"n": 7}}
    with pytest.raises(notebooks.UsageError, match="expects int, got str"):
        notebooks.resolve_parameters(specs, [["n", "seven"]])
    with pytest.raises(notebooks.UsageError, match="--mode"):
        notebooks.resolve_parameters(specs, [["mode", "measure"]])


def test_parameters_cell_parsed_with_comments_and_annotations(fixture_manifest):
    manifest, _, _ = fixture_manifest
    spec = notebooks.select(notebooks.load_manifest(manifest), ["10"])[0]
    params = notebooks.notebook_parameters(spec.path)
    # papermill's own regex drops `n` because its comment holds '='
    assert params == {"mode": {"default": '"auto"', "type": "str"},
                      "n": {"default": "3", "type": "int"},
                      "name": {"default": '"x"', "type": "str"}}


def test_unknown_notebook(fixture_manifest):
    manifest, _, _ = fixture_manifest
    with pytest.raises(notebooks.UsageError, match="unknown notebook '99'"):
        notebooks.select(notebooks.load_manifest(manifest), ["99"])


def test_timeout_kills_the_notebook(fixture_manifest, no_gpu):
    manifest, tmp, _ = fixture_manifest
    lines = []
    rc = runner.run(only=["13"], manifest=manifest, run_dir=tmp / "r", progress=False,
                    echo=lines.append)
    assert rc == 1
    # markdown, params, papermill's injected parameters, then the sleep: the cell it was in
    assert "FAIL  13_slow  cell 3 of the executed copy: timed out after 8 s" in "\n".join(lines)


def test_measure_without_gpu_is_refused(no_gpu):
    with pytest.raises(notebooks.UsageError, match="needs an NVIDIA GPU"):
        notebooks.choose_mode("measure")
    assert notebooks.choose_mode("replot") == ("replot", "asked for with --mode replot")


def test_cli_exit_codes(fixture_manifest, no_gpu, capsys, monkeypatch):
    from fp8lab.run import cli
    manifest, tmp, _ = fixture_manifest
    monkeypatch.setattr(notebooks, "manifest_path", lambda: manifest)
    assert cli.main(["run", "--only", "10", "-p", "bogus", "1", "--no-progress",
                     "--out", str(tmp / "c")]) == 2
    assert "unknown parameter 'bogus'" in capsys.readouterr().err
    assert cli.main(["run", "--only", "10", "--no-progress", "--out", str(tmp / "c")]) == 0


def test_manifest_validation(tmp_path):
    bad = tmp_path / "m.yaml"
    bad.write_text(yaml.safe_dump({"notebooks": [{"id": "1", "name": "x", "title": "t", "kind": "tpu"}]}))
    with pytest.raises(ValueError, match="kind must be one of"):
        notebooks.load_manifest(bad)


@pytest.mark.parametrize("args,msg", [
    (["--timeout", "0"], "--timeout must be a positive number of seconds, got 0"),
    (["--timeout", "-5"], "--timeout must be a positive number of seconds, got -5"),
    (["--only", ""], "--only names no notebook"),
    (["--only", " , "], "--only names no notebook"),
    (["--only", "10", "-p", "11:n", "5"], "-p 11:n: notebook 11 (11_fail) is not in this run; "
                                          "selected: 10 (10_ok)"),
    (["--only", "10", "-p", "99:n", "5"], "unknown notebook '99'"),
])
def test_bad_run_arguments_are_one_line_and_exit_2(fixture_manifest, no_gpu, capsys, monkeypatch,
                                                    args, msg):
    from fp8lab.run import cli
    manifest, tmp, out = fixture_manifest
    monkeypatch.setattr(notebooks, "manifest_path", lambda: manifest)
    assert cli.main(["run", "--no-progress", "--out", str(tmp / "c"), *args]) == 2
    err = capsys.readouterr().err
    assert msg in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()                                   # nothing ran


def test_out_under_a_file_is_one_line(fixture_manifest, no_gpu, capsys, monkeypatch):
    from fp8lab.run import cli
    manifest, tmp, _ = fixture_manifest
    monkeypatch.setattr(notebooks, "manifest_path", lambda: manifest)
    (tmp / "afile").write_text("x")
    assert cli.main(["run", "--only", "10", "--no-progress", "--out", str(tmp / "afile" / "run")]) == 2
    err = capsys.readouterr().err
    assert f"--out {tmp / 'afile' / 'run'}: cannot make the run folder" in err
    assert len(err.strip().splitlines()) == 1, err


def test_a_bad_sidecar_is_one_line_for_claims_and_gallery(sandbox, capsys):
    from fp8lab.run import cli
    from fp8lab.report import results
    run = results.start_run("01_formats", device="cpu")
    path = run.write_table("verdicts", __import__("pandas").DataFrame({"claim": ["A1"]}))
    path.with_name("verdicts.meta.json").write_text("{}")
    assert cli.main(["claims", "--check"]) == 2
    err = capsys.readouterr().err
    assert "verdicts.meta.json: not a valid meta sidecar: no table.sha256" in err
    assert len(err.strip().splitlines()) == 1, err
    path.with_name("verdicts.meta.json").write_text("[]")
    fig = sandbox / "figures" / "cpu" / "01_formats" / "f.png"      # a figure whose facts it reads
    fig.parent.mkdir(parents=True)
    fig.write_bytes(b"")
    assert cli.main(["gallery", "--check"]) == 2
    err = capsys.readouterr().err
    assert "verdicts.meta.json: not a valid meta sidecar" in err and "Traceback" not in err
