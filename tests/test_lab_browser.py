"""The notebooks as a person meets them: JupyterLab (started as `make lab` starts it) in a
real Chromium, "Run All Cells" from the Run menu, then what the page shows.

Notebook 01 (host: computes for real) opened as its .ipynb, and a GPU notebook opened from
its paired .py (so it opens as a notebook, as `make lab` sets up), which redraws from
committed data here (FP8LAB_MODE=replot, so a GPU box redraws too). For each: every code
cell ran, no cell has an error output, every figure in the outputs is an image the browser
decoded (non-zero natural size). Afterwards nothing under data/, figures/ or notebooks/ has
changed: a hand run writes to runs/scratch/ only. Screenshots of both notebooks go to
runs/lab-test/<time>/ (the path is printed), with JupyterLab's log.

A second JupyterLab on a fixture notebook with a nested sweep (fp8lab.measure.progress, as the
experiments' loops use it) checks that the sweep is one progress-bar widget that renders
and fills to 100 %, and nothing else in the cell's output.

Needs Chromium from the OS (`apt-get install chromium`; .ci/run installs it) and playwright
(the cpu extra), which drives that browser: playwright's own browser downloads are never
used. Without them the test skips, except under CI (CI set), where it fails.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import os
import shutil
import time
from pathlib import Path

import pytest

import labserver
from fp8lab.paths import SCRATCH_FIGURES, repo_root

pytestmark = pytest.mark.slow

ROOT = repo_root()
HOST_NB = "01_formats.ipynb"
GPU_NB = "00_environment.py"        # opened from the .py: the jupytext default viewer
WATCHED = ("data", "figures", "notebooks")
OPEN_TIMEOUT_S = 90
RUN_TIMEOUT_S = 150

# Test-only JupyterLab settings on top of make lab's: no autosave (a run's outputs must not
# reach notebooks/), every cell in the DOM (the default windowing leaves off-screen cells
# out, and their images with them), no news prompt over the screenshot.
SETTINGS = {
    "@jupyterlab/docmanager-extension:plugin": {"autosave": False},
    "@jupyterlab/notebook-extension:tracker": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension:notification": {"fetchNews": "false"},
}

# The open notebook as JupyterLab's own model holds it (window.jupyterapp: the server runs
# with expose_app_in_browser), and the DOM's rendered images and tracebacks.
STATE_JS = """() => {
  if (!window.jupyterapp) return null;   // the page is still loading its extensions
  const w = window.jupyterapp.shell.currentWidget;
  if (!w || !w.content || !w.content.model || !w.sessionContext) return null;
  const cells = w.content.model.cells;
  let code = 0, ran = 0, images = 0; const errors = [];
  for (let i = 0; i < cells.length; i++) {
    const c = cells.get(i);
    if (c.type !== 'code') continue;
    code++;
    if (c.executionCount) ran++;
    for (let j = 0; j < c.outputs.length; j++) {
      const o = c.outputs.get(j).toJSON();
      if (o.output_type === 'error') errors.push(`cell ${i}: ${o.ename}: ${o.evalue}`);
      if (o.data && (o.data['image/png'] || o.data['image/svg+xml'])) images++;
    }
  }
  const node = w.content.node;
  const imgs = [...node.querySelectorAll('.jp-OutputArea-output img')].map(
      im => [im.complete, im.naturalWidth, im.naturalHeight]);
  const tracebacks = [...node.querySelectorAll(
      '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')]
      .map(e => e.textContent).filter(t => t.includes('Traceback') || /\\w+Error\\b/.test(t))
      .map(t => t.slice(0, 300));
  const s = w.sessionContext.session, k = s && s.kernel;
  return {path: w.context.path, code, ran, images, errors, imgs, tracebacks,
          kernel: k ? k.status : 'none', kernel_name: k ? k.name : null,
          pending: [...node.querySelectorAll('.jp-InputPrompt')]
                       .filter(e => e.textContent.includes('*')).length,
          scroll_height: Math.max(0, ...[...w.node.querySelectorAll('.jp-WindowedPanel-outer')]
                                            .map(e => e.scrollHeight))};
}"""


def _need(ok: bool, why: str):
    if ok:
        return
    if os.environ.get("CI"):
        pytest.fail(f"{why}: CI must have it (.ci/run installs it)")
    pytest.skip(why)


def _chromium() -> str | None:
    """The OS's Chromium: $FP8LAB_CHROMIUM, else Debian's binary (not its launcher script,
    which only adds flags), else whatever `chromium` is on PATH."""
    for cand in (os.environ.get("FP8LAB_CHROMIUM"), "/usr/lib/chromium/chromium",
                 shutil.which("chromium"), shutil.which("chromium-browser")):
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


def _tree(folder: Path) -> dict[str, str]:
    """sha256 of every file under ``folder``, by relative path, less two kinds that git
    ignores and that opening a notebook may create: the lock files results.py keeps beside
    tables (empty; a reader creates them) and JupyterLab's .ipynb_checkpoints/ (the copy it
    takes of a notebook it opens)."""
    out = {}
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder)
        if (not p.is_file() or ".ipynb_checkpoints" in rel.parts
                or (p.name.startswith(".fp8lab-") and p.name.endswith(".lock"))):
            continue
        out[str(rel)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _changes(before: dict, after: dict) -> list[str]:
    return sorted([f"changed {k}" for k in before.keys() & after.keys() if before[k] != after[k]]
                  + [f"removed {k}" for k in before.keys() - after.keys()]
                  + [f"added {k}" for k in after.keys() - before.keys()])


def _run_all(browser, server, nb: str, shot: Path, probe_js: str | None = None) -> dict:
    """Open ``nb`` in its own workspace (no tab of another test run restored), Run All
    Cells from the Run menu, wait until the kernel is idle with every cell run (or one
    failed: JupyterLab stops there), screenshot the whole notebook; the final state, with
    what ``probe_js`` returns from the finished page under "probe"."""
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    try:
        page.goto(server.page(f"/lab/workspaces/test-{Path(nb).stem}/tree/{nb}"))
        page.wait_for_function(f"() => {{ const s = ({STATE_JS})(); return s && s.kernel === 'idle'; }}",
                               timeout=OPEN_TIMEOUT_S * 1000)
        page.click('.lm-MenuBar-itemLabel:text-is("Run")')
        page.click('li.lm-Menu-item[data-command="runmenu:run-all"]')
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while True:
            st = page.evaluate(STATE_JS)
            done = st["kernel"] == "idle" and st["pending"] == 0 and (
                st["ran"] == st["code"] or st["errors"])
            # figures decoded too: an image still loading has no natural size yet
            if done and all(c for c, _, _ in st["imgs"]):
                break
            if time.monotonic() > deadline:
                st["timeout"] = f"not finished after {RUN_TIMEOUT_S} s"
                break
            time.sleep(0.5)
        # The whole notebook in one picture: a viewport as tall as its content, scrolled to the top.
        page.set_viewport_size({"width": 1400, "height": min(st["scroll_height"] + 150, 16000)})
        page.evaluate("() => { for (const e of document.querySelectorAll('.jp-WindowedPanel-outer')) "
                      "e.scrollTop = 0; }")
        page.wait_for_timeout(800)
        page.screenshot(path=str(shot))
        if probe_js:
            st["probe"] = page.evaluate(probe_js)
        return st
    finally:
        page.close()


def _browser():
    """(the OS's Chromium, playwright's sync_playwright), or the test says which one is missing."""
    chromium = _chromium()
    _need(chromium is not None, "no Chromium (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
    _need(sync_playwright is not None, "playwright is not installed (pip install -e '.[cpu,test]')")
    return chromium, sync_playwright


def test_notebooks_run_all_in_jupyterlab(tmp_path, capsys):
    chromium, sync_playwright = _browser()

    shots = ROOT / "runs" / "lab-test" / _dt.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    shots.mkdir(parents=True)
    with capsys.disabled():
        print(f"\nJupyterLab browser test: screenshots in {shots}")
    before = {d: _tree(ROOT / d) for d in WATCHED}
    t0 = time.time()
    states = {}
    try:
        with labserver.running(ROOT, tmp_path / "lab", settings=SETTINGS,
                               env={"FP8LAB_MODE": "replot"},
                               extra=["--LabApp.expose_app_in_browser=True"]) as server, \
                sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, headless=True)
            try:
                for nb in (HOST_NB, GPU_NB):
                    states[nb] = _run_all(browser, server, nb, shots / f"{Path(nb).stem}.png")
            finally:
                browser.close()
    finally:
        if (tmp_path / "lab" / "jupyterlab.log").is_file():
            shutil.copy(tmp_path / "lab" / "jupyterlab.log", shots / "jupyterlab.log")
    after = {d: _tree(ROOT / d) for d in WATCHED}

    for nb, st in states.items():
        where = f"{nb} (screenshot and log in {shots})"
        assert "timeout" not in st, f"{where}: {st['timeout']}: {st['ran']}/{st['code']} cells ran"
        assert st["path"] == nb, f"{where}: JupyterLab shows {st['path']}"
        assert st["kernel_name"] == "python3", f"{where}: kernel {st['kernel_name']}"
        assert not st["errors"], f"{where}: error outputs: {st['errors']}"
        assert not st["tracebacks"], f"{where}: tracebacks on the page: {st['tracebacks']}"
        assert st["ran"] == st["code"], f"{where}: {st['ran']} of {st['code']} code cells ran"
        assert st["images"] >= 1, f"{where}: no figure among the outputs"
        drawn = [im for im in st["imgs"] if im[1] > 0 and im[2] > 0]
        assert len(drawn) == len(st["imgs"]) >= st["images"], \
            f"{where}: {st['images']} figures in the outputs, images on the page (loaded, w, h): {st['imgs']}"
    for d in WATCHED:
        assert not _changes(before[d], after[d]), f"{d}/ changed: {_changes(before[d], after[d])}"
    # the GPU notebook's redraw went where a hand run's redraws go
    scratch = ROOT.joinpath(*SCRATCH_FIGURES)
    redrawn = [p for p in scratch.glob(f"*/{Path(GPU_NB).stem}/*.png") if p.stat().st_mtime >= t0 - 1]
    assert redrawn, f"no redrawn figure of {GPU_NB} under {scratch}"


# A sweep as the experiments write it (fp8lab.measure.progress, an inner loop inside an outer one),
# in a notebook of its own: what a person sees is one bar that fills, not a line per point.
SWEEP_NB = "sweep.ipynb"
SWEEP_CELLS = [
    "import time\nfrom fp8lab.measure import progress as pg\nprint('progress mode:', pg.mode())",
    "for shape in pg.progress(range(3), desc='fixture sweep', unit='shapes'):\n"
    "    for M in pg.progress(range(4), desc='M'):\n"
    "        time.sleep(0.15)",
]

# The sweep cell's outputs as JupyterLab's model holds them, and the progress widgets the
# page drew (ipywidgets 8: FloatProgress is .widget-hprogress, its .progress-bar as wide as the share done).
WIDGET_JS = """() => {
  const w = window.jupyterapp.shell.currentWidget;
  const cell = w.content.model.cells.get(w.content.model.cells.length - 1);
  const outputs = [];
  for (let j = 0; j < cell.outputs.length; j++) {
    const o = cell.outputs.get(j).toJSON();
    outputs.push({type: o.output_type, mimes: Object.keys(o.data || {}), text: o.text || ''});
  }
  const node = w.content.widgets[w.content.widgets.length - 1].node;
  const bars = [...node.querySelectorAll('.widget-hprogress .progress-bar')].map(b => b.style.width);
  const labels = [...node.querySelectorAll('.widget-html-content')].map(e => e.textContent.trim());
  const first = w.content.widgets[w.content.widgets.length - 2].node.textContent;
  return {outputs, bars, labels, first};
}"""


def test_a_sweep_shows_one_progress_bar_in_jupyterlab(tmp_path, capsys):
    """The widget bar of fp8lab.measure.progress renders in JupyterLab (ipywidgets in the kernel,
    its extension in the server) and fills to 100 %; nested loops are one bar; nothing
    else (no text fallback, no throttled lines) lands in the cell's output."""
    import nbformat
    chromium, sync_playwright = _browser()

    root = tmp_path / "root"
    (root / "notebooks").mkdir(parents=True)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in SWEEP_CELLS]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, root / "notebooks" / SWEEP_NB)
    shots = ROOT / "runs" / "lab-test" / _dt.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    shots.mkdir(parents=True)
    with capsys.disabled():
        print(f"\nJupyterLab progress-bar test: screenshot in {shots}")
    # a progress log named in the environment would divert the bar into lines
    env = {k: v for k, v in os.environ.items() if k not in ("FP8LAB_PROGRESS_LOG", "FP8LAB_PROGRESS")}
    try:
        with _environ(env), labserver.running(root, tmp_path / "lab", settings=SETTINGS,
                                              extra=["--LabApp.expose_app_in_browser=True"]) as server, \
                sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, headless=True)
            try:
                st = _run_all(browser, server, SWEEP_NB, shots / "sweep.png", probe_js=WIDGET_JS)
            finally:
                browser.close()
    finally:
        if (tmp_path / "lab" / "jupyterlab.log").is_file():
            shutil.copy(tmp_path / "lab" / "jupyterlab.log", shots / "jupyterlab.log")
    where = f"{SWEEP_NB} (screenshot and log in {shots})"
    assert "timeout" not in st, f"{where}: {st['timeout']}: {st['ran']}/{st['code']} cells ran"
    assert not st["errors"] and not st["tracebacks"], f"{where}: {st['errors']} {st['tracebacks']}"
    probe = st["probe"]
    assert "progress mode: jupyter" in probe["first"], f"{where}: {probe['first']!r}"
    widgets = [o for o in probe["outputs"] if "application/vnd.jupyter.widget-view+json" in o["mimes"]]
    assert len(widgets) == 1, f"{where}: one bar for the nested sweep expected, outputs: {probe['outputs']}"
    assert len(probe["outputs"]) == 1, f"{where}: more than the bar in the output: {probe['outputs']}"
    assert probe["bars"] == ["100%"], f"{where}: progress bars drawn (width): {probe['bars']}"
    label = " ".join(probe["labels"]).replace("\u2007", " ")   # tqdm's widget pads with figure spaces
    assert "fixture sweep: 100%" in label and "3/3 shapes" in label, f"{where}: labels {probe['labels']}"


@contextlib.contextmanager
def _environ(env: dict):
    """os.environ replaced by ``env`` for the block (JupyterLab and its kernels inherit it)."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)
