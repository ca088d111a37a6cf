"""fp8lab.measure.progress: which mode it picks, where its lines go, how often, nested loops, and
the runner's log receiving a running notebook's progress lines before the notebook ends."""

import importlib.util
import json
import sys
import threading
import time
import types

import nbformat
import pytest
import yaml

from fp8lab.measure import progress as pg
from fp8lab.run import runner
from fp8lab.paths import repo_root


@pytest.fixture
def plain(monkeypatch):
    for var in (pg.LOG_ENV, pg.SWITCH_ENV):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(pg, "_in_kernel", lambda: False)


@pytest.fixture
def clock(monkeypatch):
    """A fake clock: ``clock.t`` seconds; the loop bodies move it."""
    c = types.SimpleNamespace(t=1000.0)
    monkeypatch.setattr(pg, "_now", lambda: c.t)
    return c


def _loops(*spec):
    out = []
    for total, done in spec:
        lp = pg._Loop(total, "x", "")
        lp.done = done
        out.append(lp)
    return out


# ------------------------------------------------------------------ mode

def test_mode_off_runner_jupyter_plain(monkeypatch, plain, tmp_path):
    assert pg.mode() == "plain"
    monkeypatch.setattr(pg, "_in_kernel", lambda: True)
    assert pg.mode() == "jupyter"
    monkeypatch.setenv(pg.LOG_ENV, str(tmp_path / "nb.log"))
    assert pg.mode() == "runner"                 # the runner's kernel is a kernel too
    for off in ("off", "0", "No", "false"):
        monkeypatch.setenv(pg.SWITCH_ENV, off)
        assert pg.mode() == "off"
    monkeypatch.setenv(pg.SWITCH_ENV, "on")
    assert pg.mode() == "runner"


def test_in_kernel_only_under_a_jupyter_kernel(monkeypatch):
    shell = types.SimpleNamespace(config={})
    fake = types.SimpleNamespace(get_ipython=lambda: shell)
    monkeypatch.setitem(sys.modules, "IPython", fake)
    assert not pg._in_kernel()                   # a terminal IPython
    shell.config = {"IPKernelApp": {}}
    assert pg._in_kernel()
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: None))
    assert not pg._in_kernel()


# ------------------------------------------------------------------ arithmetic

def test_fraction_counts_inner_loops_as_a_share_of_one_outer_step():
    assert pg.fraction(_loops((5, 2), (8, 3))) == pytest.approx((2 + 3 / 8) / 5)
    assert pg.fraction(_loops((4, 1), (2, 1), (10, 5))) == pytest.approx((1 + (1 + 0.5) / 2) / 4)
    assert pg.fraction(_loops((None, 7))) is None                       # total unknown
    assert pg.fraction(_loops((4, 1), (None, 3))) == pytest.approx(0.25)  # inner unknown: outer only
    assert pg.fraction(_loops((4, 9))) == 1.0


def test_describe_line():
    loops = [pg._Loop(5, "blockwise sweep", "shapes"), pg._Loop(8, "M", "")]
    loops[0].done, loops[1].done = 2, 3
    assert pg.describe(loops, 12) == "blockwise sweep: 48%, 2/5 shapes, M 3/8, 12 s, ~13 s left"
    # no remaining-time guess in the first second
    assert pg.describe(loops, 0.5) == "blockwise sweep: 48%, 2/5 shapes, M 3/8, 0 s"
    unknown = [pg._Loop(None, "census", "files")]
    unknown[0].done = 40
    assert pg.describe(unknown, 75) == "census: 40 files, 1 min 15 s"


# ------------------------------------------------------------------ plain and runner lines

def test_plain_lines_on_stderr_at_each_tenth(plain, clock, capsys):
    out = []
    for i in pg.progress(range(100), desc="sweep", unit="points"):
        out.append(i)
        clock.t += 0.01                           # fast points: the 10 % steps decide
    assert out == list(range(100))
    cap = capsys.readouterr()
    assert cap.out == ""
    lines = cap.err.splitlines()
    assert lines[0] == "sweep: 0%, 0/100 points, 0 s"
    assert [ln.split(",")[0] for ln in lines[1:-1]] == [f"sweep: {p}%" for p in range(10, 100, 10)]
    assert lines[-1] == "sweep: 100 points in 1 s"


def test_slow_points_give_a_line_every_interval(plain, clock, capsys):
    for _ in pg.progress(range(1000), desc="slow", unit="points"):
        clock.t += 3.0                            # 10 % is 300 s away: the 10 s interval decides
        if clock.t > 1000 + 60:
            break
    lines = capsys.readouterr().err.splitlines()
    # start, then one line per 4 points (12 s >= 10 s), then the stopped line
    assert [ln.split(", ")[1] for ln in lines[:4]] == ["0/1000 points", "4/1000 points",
                                                       "8/1000 points", "12/1000 points"]
    assert lines[-1].endswith("(stopped)") and len(lines) == 1 + 20 // 4 + 1


def test_total_unknown_counts_and_elapsed_only(plain, clock, capsys):
    def gen():
        yield from range(30)
    for _ in pg.progress(gen(), desc="census", unit="files"):
        clock.t += 1.0
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["census: 0 files, 0 s", "census: 10 files, 10 s", "census: 20 files, 20 s",
                     "census: 30 files in 30 s"]
    assert not any("%" in ln for ln in lines)


def test_runner_mode_appends_to_the_log_and_prints_one_final_line(monkeypatch, plain, clock,
                                                                  tmp_path, capsys):
    log = tmp_path / "nb.log"
    log.write_text("executor line\n")
    monkeypatch.setenv(pg.LOG_ENV, str(log))
    for _ in pg.progress(range(3), desc="prefill sweep", unit="M values"):
        for _ in pg.progress(range(2), desc="arm"):
            clock.t += 2.0
    cap = capsys.readouterr()
    assert cap.out == "prefill sweep: 3 M values in 12 s\n"    # the notebook's only output
    assert cap.err == ""
    text = log.read_text().splitlines()
    assert text[0] == "executor line"                          # appended, not overwritten
    body = [ln.split("] ", 1)[1] for ln in text[1:]]
    assert all(ln.startswith("[progress ") for ln in text[1:])
    assert body[0] == "prefill sweep: 0%, 0/3 M values, 0 s"
    assert "prefill sweep: 50%, 1/3 M values, arm 1/2, 6 s, ~6 s left" in body
    assert body[-1] == "prefill sweep: 3 M values in 12 s"


def test_an_exception_ends_with_a_stopped_line_and_no_final_line(monkeypatch, plain, clock,
                                                                 tmp_path, capsys):
    log = tmp_path / "nb.log"
    monkeypatch.setenv(pg.LOG_ENV, str(log))
    with pytest.raises(ValueError):
        for i in pg.progress(range(10), desc="sweep", unit="points"):
            if i == 4:
                raise ValueError("kernel failed")
    assert capsys.readouterr().out == ""
    assert log.read_text().splitlines()[-1].endswith("sweep: 40%, 4/10 points, 0 s (stopped)")
    assert pg._stack() == []                      # the next sweep starts a bar of its own


def test_break_leaves_no_loop_behind_and_the_next_sweep_is_its_own(plain, capsys):
    for i in pg.progress(range(10), desc="first", unit="points"):
        for j in pg.progress(range(10), desc="inner"):
            break
        break
    assert pg._stack() == []
    for _ in pg.progress(range(2), desc="second", unit="points"):
        pass
    assert capsys.readouterr().err.splitlines()[-1] == "second: 2 points in 0 s"


def test_share_never_moves_back_with_two_inner_loops_in_one_step(plain, clock, capsys):
    # decode's shape: the formats' M loop, then cuBLAS's M loop, in one outer step
    for _ in pg.progress(range(2), desc="decode sweep", unit="shapes"):
        for _ in pg.progress(range(5), desc="M"):
            clock.t += 20
        for _ in pg.progress(range(5), desc="M"):
            clock.t += 20
    pcts = [int(ln.split("%")[0].rsplit(" ", 1)[1]) for ln in capsys.readouterr().err.splitlines()
            if "%" in ln]
    assert pcts == sorted(pcts) and pcts[-1] == 100


def test_off_and_disabled_yield_the_items_and_say_nothing(monkeypatch, plain, capsys):
    assert list(pg.progress(range(3), desc="x", enabled=False)) == [0, 1, 2]
    monkeypatch.setenv(pg.SWITCH_ENV, "off")
    assert list(pg.progress(iter("abc"), desc="x")) == ["a", "b", "c"]
    cap = capsys.readouterr()
    assert cap.out == cap.err == ""


def test_a_log_that_cannot_be_written_never_stops_the_sweep(monkeypatch, plain, tmp_path, capsys):
    monkeypatch.setenv(pg.LOG_ENV, str(tmp_path / "no" / "such" / "dir" / "nb.log"))
    assert sum(pg.progress(range(5), desc="x", unit="points")) == 10


# ------------------------------------------------------------------ jupyter

class FakeBar:
    made = []

    def __init__(self, **kw):
        self.kw, self.n, self.postfix, self.closed, self.refreshes = kw, 0, "", False, 0
        FakeBar.made.append(self)

    def set_postfix_str(self, s, refresh=True):
        self.postfix = s

    def refresh(self):
        self.refreshes += 1

    def close(self):
        self.closed = True


def test_jupyter_mode_is_one_bar_for_nested_loops(monkeypatch, plain, clock, capsys):
    monkeypatch.setattr(pg, "_in_kernel", lambda: True)
    monkeypatch.setattr(pg, "_make_bar", FakeBar)
    FakeBar.made = []
    seen = []
    for _ in pg.progress(range(4), desc="blockwise sweep", unit="shapes"):
        for _ in pg.progress(range(3), desc="M"):
            clock.t += 1
            seen.append(FakeBar.made[-1].n)
    assert len(FakeBar.made) == 1                 # not one bar per shape
    bar = FakeBar.made[0]
    assert bar.kw["total"] == 4 and bar.kw["desc"] == "blockwise sweep"
    assert "{percentage" in bar.kw["bar_format"]
    assert seen == sorted(seen) and 0 < seen[5] < 2   # fractional: shape 1 of 4, M 2 of 3
    assert bar.closed and bar.n == 4 and bar.postfix == "4/4 shapes"
    cap = capsys.readouterr()
    assert cap.out == cap.err == ""               # the widget is the only output


def test_widget_redraws_are_throttled(monkeypatch, plain, clock):
    monkeypatch.setattr(pg, "_in_kernel", lambda: True)
    monkeypatch.setattr(pg, "_make_bar", FakeBar)
    FakeBar.made = []
    for _ in pg.progress(range(1000), desc="fast", unit="points"):
        clock.t += 0.001                          # 1 s in all: about 5 redraws at 0.2 s
    assert FakeBar.made[0].refreshes <= 1 / pg.WIDGET_REFRESH_S + 2


def test_a_bar_that_cannot_be_drawn_falls_back_to_lines(monkeypatch, plain, capsys):
    monkeypatch.setattr(pg, "_in_kernel", lambda: True)

    def broken(**kw):
        raise RuntimeError("no comm")
    monkeypatch.setattr(pg, "_make_bar", broken)
    assert list(pg.progress(range(3), desc="sweep", unit="points")) == [0, 1, 2]
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "fp8lab.measure.progress: no progress bar (RuntimeError: no comm); plain lines instead"
    assert err[-1] == "sweep: 3 points in 0 s"


def test_make_bar_without_ipywidgets_is_a_text_bar_on_stderr(monkeypatch):
    monkeypatch.setitem(sys.modules, "ipywidgets", None)     # import ipywidgets -> ImportError
    bar = pg._make_bar(total=3, desc="x", unit="it")
    try:
        from tqdm.std import tqdm as std
        assert type(bar) is std and bar.fp is not None
    finally:
        bar.close()


# ------------------------------------------------------------------ install

def test_the_offline_wheelhouse_carries_ipywidgets():
    """The GPU box's offline install (scripts/wheelhouse.py, gpu-tools + test) brings the
    widget's kernel side: the base dependencies carry it."""
    spec = importlib.util.spec_from_file_location("wheelhouse", repo_root() / "scripts" / "wheelhouse.py")
    wh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(wh)
    for extras in (("gpu-tools", "test"), ("cpu",), ("gpu",)):
        names = {wh._name(r) for r in wh.requirements(extras)}
        assert {"ipywidgets", "tqdm"} <= names, extras


# ------------------------------------------------------------------ the runner's log

SWEEP_CELL = """
import os, time
from fp8lab.measure.progress import progress
for shape in progress(range(4), desc="fixture sweep", unit="shapes"):
    time.sleep(0.3)
# hold the notebook open until the test has read the log
t0 = time.monotonic()
while not os.path.exists({go!r}) and time.monotonic() - t0 < 60:
    time.sleep(0.1)
"""


@pytest.mark.slow
def test_progress_lines_reach_the_runner_log_while_the_notebook_runs(tmp_path, no_gpu):
    nbdir = tmp_path / "notebooks"
    nbdir.mkdir()
    go = tmp_path / "go"
    nb = nbformat.v4.new_notebook()
    p = nbformat.v4.new_code_cell('mode = "auto"')
    p.metadata["tags"] = ["parameters"]
    nb.cells = [p, nbformat.v4.new_code_cell(SWEEP_CELL.format(go=str(go)))]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, nbdir / "20_sweep.ipynb")
    manifest = nbdir / "manifest.yaml"
    manifest.write_text(yaml.safe_dump({"notebooks": [
        {"id": "20", "name": "20_sweep", "title": "sweep", "kind": "host", "timeout": 120}]}))
    run_dir = tmp_path / "run"
    rc, said = {}, []
    t = threading.Thread(target=lambda: rc.setdefault("rc", runner.run(
        manifest=manifest, run_dir=run_dir, progress=False, echo=said.append)))
    t.start()
    log = run_dir / "20_sweep.log"
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            text = log.read_text() if log.is_file() else ""
            if "fixture sweep: 4 shapes in" in text:
                break
            time.sleep(0.2)
        assert "rc" not in rc, "the notebook ended before the test could look at its log"
        lines = [ln for ln in text.splitlines() if ln.startswith("[progress ")]
        assert any("fixture sweep: 0%, 0/4 shapes" in ln for ln in lines), text
        assert any("fixture sweep: 50%, 2/4 shapes" in ln for ln in lines), text
        assert "fixture sweep: 4 shapes in" in lines[-1], text
    finally:
        go.write_text("")
        t.join(120)
    assert rc.get("rc") == 0, log.read_text()
    # the executed copy: one final line, no bar, no throttled lines
    ex = nbformat.read(run_dir / "20_sweep.ipynb", as_version=4)
    outs = [o for c in ex.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    texts = "".join(o.get("text", "") for o in outs)
    assert texts.count("fixture sweep") == 1 and texts.startswith("fixture sweep: 4 shapes in"), outs
    assert all(o.get("output_type") == "stream" and o.get("name") == "stdout" for o in outs), outs
    assert json.loads((run_dir / "run.json").read_text())["notebooks"][0]["ok"]
    # the runner says where to watch
    assert f"progress as they run in {run_dir}/<notebook>.log" in "\n".join(said)


# ------------------------------------------------------------------ the sweeps use it

SWEEPS = {
    "fp8lab/experiments/blockwise.py": ("sweep", "check_mma_family", "a5_lookups", "swizzle_sweep"),
    "fp8lab/experiments/three_arms.py": ("measure", "wmma_tiles", "numerics"),
    "fp8lab/experiments/prefill.py": ("measure_prefill",),
    "fp8lab/experiments/decode.py": ("measure_decode",),
    "fp8lab/experiments/headroom.py": ("measure_headroom", "locked_sweep"),
    "fp8lab/experiments/quantisers.py": ("measure",),
    "fp8lab/experiments/ceilings.py": ("measure_ceilings",),
    "fp8lab/experiments/census.py": ("probe_mma_types", "census_fp8lab", "_triton_census"),
    "fp8lab/peers/sweeps.py": ("decode", "prefill", "blockwise", "quantisers"),
    "fp8lab/experiments/compile_grid.py": ("build_grid",),
}


@pytest.mark.parametrize("path", sorted(SWEEPS))
def test_every_long_sweep_loop_reports_its_progress(path):
    """Each long loop iterates through fp8lab.measure.progress (imported as ``track``): a loop
    rewritten or merged without it would sweep silently again."""
    import ast
    tree = ast.parse((repo_root() / path).read_text())
    aliases = {a.asname or a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
               and (node.module or "").endswith("progress") for a in node.names if a.name == "progress"}
    assert aliases, f"{path} does not import fp8lab.measure.progress.progress"
    funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    for name in SWEEPS[path]:
        loops = [n for n in ast.walk(funcs[name]) if isinstance(n, (ast.For, ast.Call))]
        tracked = [n for n in loops if isinstance(n, ast.For) and any(
            isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id in aliases
            for c in ast.walk(n.iter))]
        wrapped = [n for n in loops if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                   and n.func.id in aliases]
        assert tracked or wrapped, f"{path}: {name}() has no loop through progress()"
