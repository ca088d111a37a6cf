"""Cross-device figures (fp8lab.experiments.overlay), on a second device cloned from the committed h200
tables into a temporary data/ (never into the repo's data/)."""

import json
import math
import re
import shutil

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from fp8lab.run import gallery
from fp8lab.experiments import overlay
from fp8lab.report import results
from fp8lab.run import notebooks
from fp8lab.paths import repo_root

REPO_DATA = repo_root() / "data"
_TIME = re.compile(r"(^time_|_s$|_s_)")
_RATE = re.compile(r"(tflops|^bw_|gbps|_Bps|^rate_|^fraction_of|achieved)")


def clone_device(src_dev: str, dst_root, key: str, name: str, slow: float, notebooks=None):
    """Copy data/<src_dev>/<nb>/* to dst_root/<key>/<nb>/* as if measured on another card:
    times x slow x (1 + 0.3 sin(row)), rates / that, device key and name replaced, sha256
    recomputed. Synthetic test data: it lives only under ``dst_root``."""
    src = REPO_DATA / src_dev
    for csv in sorted(src.glob("*/*.csv")):
        nb = csv.parent.name
        if notebooks is not None and nb not in notebooks:
            continue
        df = pd.read_csv(csv, keep_default_na=False, na_values=[""])
        f = slow * (1 + 0.3 * np.sin(np.arange(len(df))))
        for c in df.columns:
            if not pd.api.types.is_float_dtype(df[c]):
                continue
            if _TIME.search(c):
                df[c] = df[c] * f
            elif _RATE.search(c):
                df[c] = df[c] / f
        meta = json.loads(csv.with_name(f"{csv.stem}.meta.json").read_text())
        meta.pop("table", None)
        meta.update(device=key, device_name=name, time="2027-01-02T03:04:05+00:00")
        results.write_table(key, nb, csv.stem, df, meta)


@pytest.fixture
def two_devices(sandbox):
    data = sandbox / "data"
    shutil.copytree(REPO_DATA / "h200", data / "h200")
    clone_device("h200", data, "l4", "NVIDIA L4", slow=3.0)
    return sandbox


def _series_colors(fig):
    """Colours of the plotted data (lines with data, bars, scatter), ignoring reference lines."""
    cols = set()
    for ax in fig.axes:
        for ln in ax.get_lines():
            x = np.asarray(ln.get_xdata(), float) if len(ln.get_xdata()) else np.array([])
            if len(x) >= 2 and not np.allclose(x, x[0]) and ln.get_marker() not in (None, "None", ""):
                cols.add(ln.get_color())
        for p in ax.patches:
            if p.get_height() and getattr(p, "get_width", None) and p.get_width() < 1:
                cols.add(tuple(np.round(p.get_facecolor()[:3], 3)))
        for c in ax.collections:
            fc = c.get_facecolor()
            if len(fc) and c.get_offsets().shape[0] > 1:
                cols.add(tuple(np.round(fc[0][:3], 3)))
    return cols


def _rgb(hexcol):
    from matplotlib.colors import to_rgb
    return tuple(np.round(to_rgb(hexcol), 3))


def _legend_texts(fig):
    return [t.get_text() for leg in fig.legends + [a.get_legend() for a in fig.axes if a.get_legend()]
            for t in leg.get_texts()]


@pytest.mark.parametrize("notebook", ["08_decode_bandwidth", "05_arms_over_m", "11_prefill", "00_environment",
                                      "06b_act_quantisers", "03_per_slice_vs_per_block", "04_tiles_and_swizzle",
                                      "06_three_arms", "07_roofline"])
def test_overlay_draws_one_series_per_device(two_devices, notebook):
    out = overlay.cross_device(notebook, [])
    assert len(out) == 1
    xd = out[0]
    assert xd.fig is not None and xd.devices == ["h200", "l4"], xd.message
    legend = _legend_texts(xd.fig)
    assert "NVIDIA H200 (h200)" in legend and "NVIDIA L4 (l4)" in legend
    st = overlay.styles(["h200", "l4"])
    colors = {_rgb(c) if isinstance(c, str) else c for c in _series_colors(xd.fig)}
    assert {_rgb(st["h200"]["color"]), _rgb(st["l4"]["color"])} <= colors, colors
    # saved under figures/cross-device/<notebook>/ with both devices in the footnote
    svg, png = xd.paths
    assert svg.parent == two_devices / "figures" / overlay.CROSS_DEVICE / notebook
    text = svg.read_text()
    assert "NVIDIA H200 (h200): measured 2026-" in text and "NVIDIA L4 (l4): measured 2027-01-02" in text
    assert "redrawn from data/l4" in text and f"notebook {notebook}" in text
    side = json.loads(svg.with_name(f"{xd.name}.devices.json").read_text())
    assert [d["device"] for d in side["devices"]] == ["h200", "l4"]
    plt.close(xd.fig)


def test_overlay_values_are_each_devices_own_ratio(two_devices):
    """08's bars are fraction_of_copy of each device, not one card's bandwidth on another's axis."""
    xd = overlay.cross_device("08_decode_bandwidth", ["l4", "h200"])[0]
    assert xd.devices == ["l4", "h200"]
    ax = xd.fig.axes[0]
    st = overlay.styles(xd.devices)
    heights = {}
    for p in ax.patches:
        heights.setdefault(tuple(np.round(p.get_facecolor()[:3], 3)), []).append(p.get_height())
    want = {}
    for d in xd.devices:
        from fp8lab.experiments import decode as dx

        t = dx.best_schedule(results.load_table(d, "08_decode_bandwidth", "decode"))  # one row per arm
        sn = t.loc[t["M"] == 1, "shape"].iloc[0]
        want[d] = sorted(t[(t["M"] == 1) & (t["shape"] == sn)]["fraction_of_copy"].round(9))
    for d in xd.devices:
        got = sorted(np.round(heights[_rgb(st[d]["color"])], 9))
        assert got == want[d]
    assert want["l4"] != want["h200"]          # the clone really differs
    plt.close(xd.fig)


def test_one_device_draws_nothing_and_says_so(sandbox):
    shutil.copytree(REPO_DATA / "h200" / "08_decode_bandwidth", sandbox / "data" / "h200" / "08_decode_bandwidth")
    out = overlay.cross_device("08_decode_bandwidth", [])
    assert out[0].fig is None and out[0].paths == []
    assert "only h200 has" in out[0].message and "not drawn" in out[0].message
    assert "names 1 device(s) (h200)" in overlay.cross_device("08_decode_bandwidth", ["h200"])[0].message
    assert not (sandbox / "figures" / overlay.CROSS_DEVICE).exists()
    with pytest.raises(ValueError, match="two or more devices"):
        overlay.save(plt.figure(), "08_decode_bandwidth", "x_devices", {"h200": {}})
    plt.close("all")


def test_unknown_device_is_a_clear_error(two_devices):
    with pytest.raises(ValueError, match=r"unknown device key\(s\) \['a100'\].*\['h200', 'l4'\]"):
        overlay.cross_device("08_decode_bandwidth", ["h200", "a100"])
    with pytest.raises(ValueError, match="list of device keys"):
        overlay.resolve_devices("08_decode_bandwidth", "decode", "h200")
    with pytest.raises(ValueError, match="no cross-device figures"):
        overlay.cross_device("01_formats", [])
    # a device that exists but lacks the table is unknown for this notebook
    (two_devices / "data" / "b200").mkdir()
    with pytest.raises(ValueError, match="b200"):
        overlay.resolve_devices("08_decode_bandwidth", "decode", ["b200"])


def test_measure_mode_puts_the_run_device_first(two_devices):
    class FakeRun:
        mode, device = "measure", "l4"
    assert overlay.resolve_devices("11_prefill", "prefill", [], FakeRun()) == ["l4", "h200"]
    assert overlay.resolve_devices("11_prefill", "prefill", []) == ["h200", "l4"]
    assert overlay.resolve_devices("11_prefill", "prefill", ["h200", "h200"]) == ["h200"]
    meta = results.load_table("l4", "11_prefill", "prefill").attrs["meta"]
    assert "measured in this run" in overlay.provenance_line("l4", meta, FakeRun())


def test_headroom_overlay_from_synthetic_sweeps(sandbox):
    """Notebook 10 has no committed data yet: two small sweeps written here."""
    from fp8lab.experiments import headroom as hr
    for key, name, drop in (("h200", "NVIDIA H200", 0.02), ("l4", "NVIDIA L4", 0.2)):
        ks = [0, 2, 4, 8, 16]
        bw = [3e12 * (1 - drop * k / 16) for k in ks]
        df = pd.DataFrame(dict(arm=hr.ARM, lock_status="not requested", extra_alu=ks, bw_p50=bw))
        results.write_table(key, "10_clock_sweep", "sweep", df, dict(device=key, device_name=name, notebook="10_clock_sweep",
                                                                     time="2027-01-01T00:00:00+00:00"))
    xd = overlay.cross_device("10_clock_sweep", [])[0]
    lines = [ln for ln in xd.fig.axes[0].get_lines() if len(ln.get_xdata()) == 5]
    assert len(lines) == 2
    assert math.isclose(lines[1].get_ydata()[-1], 0.8) and math.isclose(lines[0].get_ydata()[-1], 0.98)
    plt.close(xd.fig)


def _recommit(device: str, notebook: str, table: str, commit: str) -> None:
    """Rewrite one sandbox table's meta as if measured at another fp8lab commit."""
    df = results.load_table(device, notebook, table)
    meta = results.load_meta(device, notebook, table)
    meta.pop("table", None)
    meta["git"] = dict(meta.get("git") or {}, commit=commit)
    results.write_table(device, notebook, table, df, meta)


def test_devices_at_different_commits_are_named(two_devices):
    """A cross-device figure whose devices were measured at different commits says so (footnote,
    sidecar, notebook message, gallery caption): the gap may be the code's, not the card's."""
    same = overlay.cross_device("08_decode_bandwidth", [])[0]
    assert "different fp8lab commits" not in same.paths[0].read_text()
    assert "different fp8lab commits" not in same.message
    assert json.loads(same.paths[0].with_name(f"{same.name}.devices.json").read_text())["same_commit"] is True
    plt.close(same.fig)

    _recommit("l4", "08_decode_bandwidth", "decode", "ab12cd34" * 5)
    xd = overlay.cross_device("08_decode_bandwidth", [])[0]
    text = xd.paths[0].read_text()
    assert "different fp8lab commits" in text and "l4 ab12cd34" in text
    assert "different fp8lab commits" in xd.message
    side = json.loads(xd.paths[0].with_name(f"{xd.name}.devices.json").read_text())
    assert side["same_commit"] is False
    cap = gallery.cross_device_caption("08_decode_bandwidth", xd.name, two_devices / "figures")
    assert "at different fp8lab commits" in cap and "l4 ab12cd34" in cap
    plt.close(xd.fig)


def test_gallery_lists_cross_device_figures(two_devices):
    xd = overlay.cross_device("11_prefill", [])[0]
    plt.close(xd.fig)
    text = gallery.render()
    assert "![prefill_tflops_devices](cross-device/11_prefill/prefill_tflops_devices.png)" in text
    cap = next(line for line in text.splitlines() if line.startswith("*prefill_tflops_devices:"))
    assert "NVIDIA H200 (h200)" in cap and "NVIDIA L4 (l4)" in cap and "2027-01-02" in cap and "measured" in cap


def test_every_gpu_notebook_has_a_devices_parameter_and_an_overlay():
    gpu = [s for s in notebooks.load_manifest() if s.kind == "gpu"]
    assert gpu
    for s in gpu:
        params = notebooks.notebook_parameters(s.path)
        assert params.get("devices", {}).get("type") == "list", (s.name, params.get("devices"))
        assert s.name in overlay.DRAWERS and s.name in overlay.HEADLINE_TABLE
        src = s.path.with_suffix(".py").read_text()
        # notebook.start checks the devices parameter before anything is measured
        assert "overlay.show_cross_device(" in src and "devices=devices)" in src, s.name
        assert "run = notebook.start(" in src or "overlay.check_devices(" in src, s.name
    # the runner rejects a non-list value for it, like any typed parameter
    with pytest.raises(notebooks.UsageError, match="devices"):
        notebooks.resolve_parameters(gpu[:1], [("devices", "h200")])


def test_check_devices_accepts_the_device_being_measured(two_devices):
    class FakeRun:
        mode, device = "measure", "b200"
    assert overlay.check_devices("11_prefill", ["b200", "h200"], FakeRun()) == ["b200", "h200"]
    with pytest.raises(ValueError, match="unknown device key"):
        overlay.check_devices("11_prefill", ["b200"], None)


def test_notebook_start_checks_the_devices_parameter_before_measuring(monkeypatch, tmp_path):
    from fp8lab.experiments import notebook

    monkeypatch.setenv("FP8LAB_DATA_DIR", str(tmp_path / "data"))
    with pytest.raises(ValueError, match="unknown device key"):
        notebook.start("04_tiles_and_swizzle", {}, mode="replot", devices=["no-such-device"])
