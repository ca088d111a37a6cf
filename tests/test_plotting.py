import matplotlib.pyplot as plt
import pytest

from fp8lab.report import plotting, results


def test_save_writes_svg_and_2x_png_with_footnote(sandbox):
    run = results.start_run("01_formats", device="cpu")
    plotting.apply_style()
    fig, ax = plt.subplots()
    ax.plot([1, 2], [3, 4])
    ax.set_xlabel("M (rows)")
    paths = plotting.save(fig, run, "demo")
    assert [p.name for p in paths] == ["demo.svg", "demo.png"]
    assert paths[0].parent == sandbox / "figures" / "cpu" / "01_formats"
    svg = paths[0].read_text()
    assert "computed on" in svg and "01_formats" in svg
    png = paths[1].read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width = int.from_bytes(png[16:20], "big")
    import io
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=fig.dpi)            # the same figure at 1x
    width_1x = int.from_bytes(buf.getvalue()[16:20], "big")
    assert 1.9 <= width / width_1x <= 2.1
    plotting.save(fig, run, "demo")       # saving twice keeps one footnote
    assert sum(getattr(t, "_fp8lab_footnote", False) for t in fig.texts) == 1
    plt.close(fig)


def test_redrawn_figures_go_to_the_data_device(sandbox):
    meta = {"notebook": "00_environment", "device": "h200", "device_name": "NVIDIA H200",
            "time": "2026-11-29T10:00:00+00:00", "mode": "measure", "git": {"commit": None}}
    fig, _ = plt.subplots()
    svg, _ = plotting.save(fig, results.FigureInfo.from_meta(meta), "ceil")
    assert svg.parent == sandbox / "figures" / "h200" / "00_environment"
    assert "redrawn from data/h200" in svg.read_text()
    plt.close(fig)


def test_save_rejects_bad_target(sandbox):
    fig, _ = plt.subplots()
    with pytest.raises(ValueError, match="Run"):
        plotting.save(fig, "h200", "x")
    with pytest.raises(ValueError, match="plain name"):
        plotting.save(fig, results.start_run("01_formats", device="cpu"), "../x")
    plt.close(fig)


def test_a_redraw_by_hand_never_overwrites_committed_figures(tmp_path, monkeypatch):
    """No FP8LAB_FIGURES_DIR (a notebook run in JupyterLab, or by papermill / nbconvert by
    hand): a figure redrawn from committed data goes to runs/scratch/figures/, and so does
    one a host notebook computed by hand; a figure computed in a runner's run (which sets
    FP8LAB_RUN_ID) goes to figures/."""
    root = tmp_path / "repo"
    for d in ("fp8lab", "notebooks", "figures", "data"):
        (root / d).mkdir(parents=True)
    (root / "pyproject.toml").write_text("")
    monkeypatch.setenv("FP8LAB_ROOT", str(root))
    monkeypatch.delenv("FP8LAB_FIGURES_DIR", raising=False)
    monkeypatch.delenv("FP8LAB_RUN_ID", raising=False)
    monkeypatch.setenv("FP8LAB_DATA_DIR", str(root / "data"))
    meta = {"notebook": "00_environment", "device": "h200", "device_name": "NVIDIA H200",
            "time": "2026-11-29T10:00:00+00:00", "mode": "measure", "git": {"commit": None}}
    fig, _ = plt.subplots()
    svg, png = plotting.save(fig, results.FigureInfo.from_meta(meta, redrawn=True), "ceil")
    assert svg.parent == root / "runs" / "scratch" / "figures" / "h200" / "00_environment"
    svg_hand, _ = plotting.save(fig, results.start_run("01_formats", device="cpu"), "demo")
    assert svg_hand.parent == root / "runs" / "scratch" / "figures" / "cpu" / "01_formats"
    assert not any((root / "figures").rglob("*.svg"))
    monkeypatch.setenv("FP8LAB_RUN_ID", "20261129-100000-replot")
    svg2, _ = plotting.save(fig, results.start_run("01_formats", device="cpu"), "demo")
    assert svg2.parent == root / "figures" / "cpu" / "01_formats"
    plt.close(fig)


def test_cross_device_figure_of_committed_data_only_goes_to_scratch(tmp_path, monkeypatch):
    from fp8lab.experiments import overlay
    root = tmp_path / "repo"
    for d in ("fp8lab", "notebooks", "figures"):
        (root / d).mkdir(parents=True)
    (root / "pyproject.toml").write_text("")
    monkeypatch.setenv("FP8LAB_ROOT", str(root))
    monkeypatch.delenv("FP8LAB_FIGURES_DIR", raising=False)
    metas = {d: {"notebook": "00_environment", "device": d, "device_name": d, "mode": "measure",
                 "time": "2026-11-29T10:00:00+00:00", "git": {"commit": None}} for d in ("h200", "l4")}
    fig, _ = plt.subplots()
    svg, _ = overlay.save(fig, "00_environment", "ceilings_devices", metas, run=None)
    assert svg.parent == root / "runs" / "scratch" / "figures" / "cross-device" / "00_environment"
    assert not any((root / "figures").rglob("*"))
    plt.close(fig)


def test_a_figure_legend_names_lines_of_every_panel():
    """Notebook 08's legend once came from the first panel only, so a peer that ran on the
    second shape alone was drawn without a name."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, squeeze=False)
    axes[0][0].plot([1], [1], label="ours")
    axes[0][1].plot([1], [1], label="ours")
    axes[0][1].plot([1], [2], label="a peer on this shape only")
    axes[1][0].plot([1], [3])                       # unlabelled: not in the legend
    h, lab = plotting.legend_entries(axes)
    assert lab == ["ours", "a peer on this shape only"] and len(h) == 2
    assert plotting.legend_entries(axes[0])[1] == lab    # a flat row of axes works too
    plt.close(fig)
