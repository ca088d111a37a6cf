import json

import numpy as np
import pandas as pd
import pytest

from fp8lab.report import provenance, results


def _data_files(folder):
    """What a folder holds besides the run and write locks (empty files, ignored by git)."""
    return [p for p in folder.iterdir() if p.name not in (".fp8lab-run.lock", ".fp8lab-write.lock")]


def _df():
    return pd.DataFrame({"M": [1, 7, 83], "p50_us": [1.5, 2.25, 1e-7], "arm": ["a", "b", "c"]})


def test_round_trip_with_provenance(sandbox):
    run = results.start_run("01_formats", params={"n": 3, "archs": ["sm_90"]}, device="cpu")
    path = run.write_table("codes", _df(), meta={"note": "x"})
    assert path == sandbox / "data" / "cpu" / "01_formats" / "codes.csv"
    back = results.load_table("cpu", "01_formats", "codes")
    pd.testing.assert_frame_equal(back, _df())  # floats survive exactly (1e-7 too)
    meta = back.attrs["meta"]
    assert meta["notebook"] == "01_formats"
    assert meta["parameters"] == {"n": 3, "archs": ["sm_90"]}
    assert meta["mode"] == "host" and meta["device"] == "cpu"
    assert meta["extra"] == {"note": "x"}
    assert meta["table"]["rows"] == 3 and meta["table"]["columns"] == ["M", "p50_us", "arm"]
    for key in ("git", "versions", "host", "time"):
        assert key in meta
    assert {"commit", "dirty", "untracked"} <= set(meta["git"])
    assert meta["versions"]["numpy"] == np.__version__
    assert results.devices_with("01_formats", "codes") == ["cpu"]


def test_text_that_looks_missing_stays_text(sandbox):
    df = pd.DataFrame({"cls": ["nan", "NA", "normal"], "x": [1.0, float("nan"), 2.0]})
    results.start_run("01_formats", device="cpu").write_table("t", df)
    back = results.load_table("cpu", "01_formats", "t")
    assert list(back["cls"]) == ["nan", "NA", "normal"]
    assert back["x"].isna().tolist() == [False, True, False]


def test_failed_write_leaves_nothing(sandbox):
    run = results.start_run("01_formats", device="cpu")
    with pytest.raises(TypeError):
        run.write_table("bad", _df(), meta={"obj": object()})  # meta cannot be serialised
    folder = sandbox / "data" / "cpu" / "01_formats"
    assert not folder.exists() or _data_files(folder) == []


def test_failed_rewrite_keeps_the_old_table(sandbox):
    run = results.start_run("01_formats", device="cpu")
    run.write_table("t", _df())
    with pytest.raises(TypeError):
        run.write_table("t", _df().assign(M=0), meta={"obj": object()})
    pd.testing.assert_frame_equal(results.load_table("cpu", "01_formats", "t"), _df())
    assert [p.name for p in _data_files(sandbox / "data/cpu/01_formats")
            if p.name.startswith(".")] == []   # no temp files left behind


def test_mismatched_sidecar_is_refused(sandbox):
    run = results.start_run("01_formats", device="cpu")
    path = run.write_table("t", _df())
    path.write_text(path.read_text().replace("83", "84"))
    with pytest.raises(ValueError, match="sha256"):
        results.load_table("cpu", "01_formats", "t")


def test_missing_sidecar_is_refused(sandbox):
    run = results.start_run("01_formats", device="cpu")
    path = run.write_table("t", _df())
    path.with_name("t.meta.json").unlink()
    with pytest.raises(ValueError, match="provenance"):
        results.load_table("cpu", "01_formats", "t")


def test_loader_rejects_unknown_device_and_bad_names(sandbox):
    results.start_run("01_formats", device="cpu").write_table("t", _df())
    with pytest.raises(ValueError, match="unknown device 'l4'.*cpu"):
        results.load_table("l4", "01_formats", "t")
    with pytest.raises(ValueError, match="no table"):
        results.load_table("cpu", "01_formats", "nope")
    with pytest.raises(ValueError, match="plain name"):
        results.load_table("../etc", "01_formats", "t")
    with pytest.raises(ValueError, match="DataFrame"):
        results.start_run("01_formats", device="cpu").write_table("t", [1, 2])
    with pytest.raises(ValueError, match="device must be"):
        results.start_run("01_formats", device="h200")


def test_replot_mode_writes_nothing(sandbox, no_gpu):
    run = results.start_run("00_environment", device="gpu")
    assert run.mode == "replot" and run.device is None and not run.writes
    with pytest.raises(RuntimeError, match="replot"):
        run.write_table("t", _df())
    with pytest.raises(RuntimeError, match="needs an NVIDIA GPU"):
        results.resolve_mode("measure")
    with pytest.raises(ValueError, match="mode must be"):
        results.resolve_mode("fast")


def test_mode_from_environment(no_gpu, monkeypatch):
    monkeypatch.setenv("FP8LAB_MODE", "replot")
    assert results.resolve_mode("auto") == "replot"
    assert results.resolve_mode("replot") == "replot"


def test_load_all_concatenates_devices(sandbox):
    run = results.start_run("07_roofline", device="cpu")
    run.write_table("t", _df())
    other = sandbox / "data" / "h200" / "07_roofline"
    meta = dict(run.meta, device="h200", device_name="NVIDIA H200")
    results.write_table("h200", "07_roofline", "t", _df().assign(M=[2, 3, 4]), meta)
    assert (other / "t.csv").is_file()
    both = results.load_all("07_roofline", "t")
    assert sorted(both["device"].unique()) == ["cpu", "h200"]
    assert set(both.loc[both.device == "h200", "device_name"]) == {"NVIDIA H200"}
    assert results.load_all("07_roofline", "missing").empty


#: the name NVML reports -> the device key of data/<key>/
DEVICE_SLUGS = {
    "NVIDIA H200": "h200",
    "NVIDIA H100 80GB HBM3": "h100",
    "NVIDIA H100 PCIe": "h100-pcie",
    "NVIDIA GeForce RTX 4090": "rtx-4090",
    "NVIDIA L40S": "l40s",
    "NVIDIA A100-SXM4-80GB": "a100-sxm4",
    "NVIDIA B200": "b200",
}


@pytest.mark.parametrize("name,slug", DEVICE_SLUGS.items())
def test_device_slug(name, slug):
    assert provenance.device_slug(name) == slug


def test_device_slug_rejects_empty():
    with pytest.raises(ValueError):
        provenance.device_slug("  ")


def test_figure_info_footnote_says_redrawn():
    meta = {"notebook": "00_environment", "device": "h200", "device_name": "NVIDIA H200",
            "time": "2026-11-29T10:00:00+00:00", "mode": "measure", "git": {"commit": "abcdef1234"}}
    info = results.FigureInfo.from_meta(meta, redrawn=True)
    note = info.footnote()
    assert "NVIDIA H200" in note and "2026-11-29" in note and "redrawn" in note
    assert "measured on" in results.FigureInfo.from_meta(meta, redrawn=False).footnote()
    assert json.dumps(info.__dict__)  # plain data


def test_git_commit_from_environment_without_a_checkout(tmp_path, monkeypatch):
    monkeypatch.setenv("FP8LAB_GIT_COMMIT", "0123456789abcdef")
    monkeypatch.setenv("FP8LAB_GIT_DIRTY", "0")
    info = provenance.git_info(tmp_path)          # not a git checkout
    assert info["commit"] == "0123456789abcdef" and info["dirty"] is False
    monkeypatch.delenv("FP8LAB_GIT_COMMIT")
    assert provenance.git_info(tmp_path)["commit"] is None


def test_written_files_are_world_readable(sandbox):
    path = results.start_run("01_formats", device="cpu").write_table("t", _df())
    assert path.stat().st_mode & 0o044 == 0o044


# ------------------------------------------------------------------ sidecars that cannot vouch
@pytest.mark.parametrize("text,why", [
    ("{}", "no table.sha256"),
    ('{"table": {"name": "t", "rows": 3}}', "no table.sha256"),
    ('{"table": {"sha256": null}}', "no table.sha256"),
    ('{"table": "x"}', "no table.sha256"),
    ("[1, 2]", "holds a list, not a JSON object"),
    ("{not json", "not a valid meta sidecar: not JSON"),
])
def test_a_sidecar_that_cannot_vouch_for_its_csv_is_an_error_naming_it(sandbox, text, why):
    path = results.start_run("01_formats", device="cpu").write_table("t", _df())
    side = path.with_name("t.meta.json")
    side.write_text(text)
    path.write_text(path.read_text().replace("83", "84"))      # an edit nothing can catch now
    for load in (results.load_table, results.load_meta):
        with pytest.raises(results.TableError) as ei:
            load("cpu", "01_formats", "t")
        assert str(side) in str(ei.value) and why in str(ei.value)


# ------------------------------------------------------------------ a pair is written whole
def _kill_at(monkeypatch, suffix):
    """Make the pair write die (as a kill would: nothing after it runs) at the rename of
    the file ending in ``suffix``."""
    real = results.atomic_write_bytes

    def write(path, data):
        if path.name.endswith(suffix) and not path.name.startswith("."):
            raise KeyboardInterrupt("killed")
        return real(path, data)
    monkeypatch.setattr(results, "atomic_write_bytes", write)
    return lambda: monkeypatch.setattr(results, "atomic_write_bytes", real)


def _as_a_new_process():
    """Drop this process's run locks, as the end of the killed run would."""
    import os
    for fd in results._HELD_RUN_LOCKS.values():
        os.close(fd)
    results._HELD_RUN_LOCKS.clear()


def test_a_write_killed_between_the_renames_loads_the_new_pair(sandbox, monkeypatch):
    run = results.start_run("01_formats", device="cpu")
    run.write_table("t", _df(), meta={"v": 1})
    revive = _kill_at(monkeypatch, ".meta.json")          # the new CSV is in place, its sidecar not
    with pytest.raises(KeyboardInterrupt):
        run.write_table("t", _df().assign(M=[5, 6, 7]), meta={"v": 2})
    revive()
    back = results.load_table("cpu", "01_formats", "t")
    assert list(back["M"]) == [5, 6, 7] and back.attrs["meta"]["extra"] == {"v": 2}
    # the next run of the notebook finishes the write on disk
    folder = sandbox / "data/cpu/01_formats"
    assert (folder / ".t.pending.json").is_file()
    _as_a_new_process()
    results.start_run("01_formats", device="cpu")
    assert not (folder / ".t.pending.json").exists()
    assert json.loads((folder / "t.meta.json").read_text())["extra"] == {"v": 2}


def test_a_write_killed_before_the_csv_keeps_the_old_pair(sandbox, monkeypatch):
    run = results.start_run("01_formats", device="cpu")
    run.write_table("t", _df(), meta={"v": 1})
    revive = _kill_at(monkeypatch, ".csv")
    with pytest.raises(KeyboardInterrupt):
        run.write_table("t", _df().assign(M=[5, 6, 7]), meta={"v": 2})
    revive()
    back = results.load_table("cpu", "01_formats", "t")
    assert list(back["M"]) == [1, 7, 83] and back.attrs["meta"]["extra"] == {"v": 1}
    _as_a_new_process()
    results.start_run("01_formats", device="cpu")
    assert not (sandbox / "data/cpu/01_formats/.t.pending.json").exists()
    assert results.load_table("cpu", "01_formats", "t").attrs["meta"]["extra"] == {"v": 1}


def test_a_reader_waits_for_a_pair_being_written(sandbox, monkeypatch):
    import threading
    run = results.start_run("01_formats", device="cpu")
    run.write_table("t", _df(), meta={"v": 1})
    real = results.atomic_write_bytes
    between, got = threading.Event(), {}

    def reader():
        try:
            df = results.load_table("cpu", "01_formats", "t")
            got["pair"] = (list(df["M"]), df.attrs["meta"]["extra"])
        except Exception as exc:  # noqa: BLE001
            got["error"] = exc

    def write(path, data):
        if path.name == "t.meta.json":                  # the CSV is renamed, the sidecar not yet
            t = threading.Thread(target=reader)
            t.start()
            t.join(0.5)                                 # a reader now would see a mixed pair
            got["waited"] = t.is_alive()
            between.set()
            real(path, data)
            got["thread"] = t
            return None
        return real(path, data)
    monkeypatch.setattr(results, "atomic_write_bytes", write)
    run.write_table("t", _df().assign(M=[5, 6, 7]), meta={"v": 2})
    got["thread"].join(10)
    assert "error" not in got, got.get("error")
    assert got["waited"] and got["pair"] == ([5, 6, 7], {"v": 2})


def test_one_run_of_a_notebook_per_device_folder(sandbox):
    import subprocess
    import sys
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom fp8lab.report import results\n"
         "results.start_run('01_formats', device='cpu')\nprint('started', flush=True)\n"
         "time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "started"
        with pytest.raises(RuntimeError, match=rf"01_formats is being written by another run "
                                               rf"\(pid {holder.pid} since"):
            results.start_run("01_formats", device="cpu")
        results.start_run("02_register_spills", device="cpu")       # another notebook: fine
        results.start_run("01_formats", device="gpu", mode="replot")  # reads only: fine
    finally:
        holder.kill()
        holder.wait()
    results.start_run("01_formats", device="cpu")                  # free once it has ended


def _bare_repo(tmp_path, monkeypatch):
    """A checkout with committed data/ and figures/, FP8LAB_ROOT pointing at it, and no
    folder named by the environment: what a notebook opened in JupyterLab sees."""
    root = tmp_path / "repo"
    for d in ("fp8lab", "notebooks", "figures", "data"):
        (root / d).mkdir(parents=True)
    (root / "pyproject.toml").write_text("")
    monkeypatch.setenv("FP8LAB_ROOT", str(root))
    for var in ("FP8LAB_DATA_DIR", "FP8LAB_FIGURES_DIR", "FP8LAB_RUN_ID", "FP8LAB_MODE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(results, "_OWN_TABLES", {})
    return root


def test_a_host_notebook_run_by_hand_leaves_committed_data_alone(tmp_path, monkeypatch):
    """A host notebook run in JupyterLab (no runner, no FP8LAB_DATA_DIR) writes its tables
    to runs/scratch/data/ and reads them back from there; committed data/cpu/ is untouched,
    and any other reader still gets the committed table."""
    root = _bare_repo(tmp_path, monkeypatch)
    committed = pd.DataFrame({"x": [0]})
    monkeypatch.setenv("FP8LAB_RUN_ID", "20261129-100000-replot")       # the runner's write
    results.start_run("01_formats", device="cpu").write_table("codes", committed)
    before = {p: p.read_bytes() for p in (root / "data").rglob("*") if p.is_file()}
    monkeypatch.delenv("FP8LAB_RUN_ID")
    run = results.start_run("01_formats", device="cpu")                # by hand
    path = run.write_table("codes", _df())
    assert path == root / "runs" / "scratch" / "data" / "cpu" / "01_formats" / "codes.csv"
    assert "runs/scratch" in run.summary()
    pd.testing.assert_frame_equal(results.load_table("cpu", "01_formats", "codes"), _df())
    assert {p: p.read_bytes() for p in (root / "data").rglob("*") if p.is_file()} == before
    monkeypatch.setattr(results, "_OWN_TABLES", {})                    # another process
    pd.testing.assert_frame_equal(results.load_table("cpu", "01_formats", "codes"), committed)


def test_a_named_data_folder_still_gets_a_hand_runs_tables(tmp_path, monkeypatch):
    root = _bare_repo(tmp_path, monkeypatch)
    monkeypatch.setenv("FP8LAB_DATA_DIR", str(tmp_path / "mine"))
    path = results.start_run("01_formats", device="cpu").write_table("codes", _df())
    assert path == tmp_path / "mine" / "cpu" / "01_formats" / "codes.csv"
    assert not (root / "runs").exists()
