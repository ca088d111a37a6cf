"""figures/README.md, the generated gallery."""

import json
import re

import pytest
import yaml

from fp8lab.run import cli, gallery, notebooks
from fp8lab.paths import figures_dir


def _side(root, device, nb, table, time, mode, name):
    d = root / "data" / device / nb
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{table}.meta.json").write_text(json.dumps({"time": time, "mode": mode, "device": device,
                                                      "device_name": name, "notebook": nb}))


def _png(root, device, nb, name):
    d = root / "figures" / device / nb
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{name}.png").write_bytes(b"\x89PNG fake")
    (d / f"{name}.svg").write_text("<svg/>")        # svg twins are not listed


@pytest.fixture
def tree(sandbox):
    m = sandbox / "manifest.yaml"
    m.write_text(yaml.safe_dump({"notebooks": [
        {"id": "03", "name": "03_gpu", "title": "A GPU notebook", "kind": "gpu", "claims": ["A3", "A4"]},
        {"id": "01", "name": "01_host", "title": "A host notebook", "kind": "host", "claims": ["B2"]},
        {"id": "07", "name": "07_roof", "title": "Rooflines", "kind": "gpu", "claims": []}]}))
    _png(sandbox, "h200", "03_gpu", "zeta")
    _png(sandbox, "h200", "03_gpu", "alpha")
    _side(sandbox, "h200", "03_gpu", "sweep", "2026-01-02T10:00:00+00:00", "measure", "NVIDIA H200")
    _side(sandbox, "h200", "03_gpu", "verdicts", "2026-01-05T10:00:00+00:00", "measure", "NVIDIA H200")
    _png(sandbox, "cpu", "01_host", "codes")
    _side(sandbox, "cpu", "01_host", "codes", "2026-02-03T00:00:00+00:00", "host", "CPU (x86_64)")
    _png(sandbox, "spec-sheet", "07_roof", "floors")
    _side(sandbox, "h200", "07_roof", "b4", "2026-03-04T00:00:00+00:00", "measure", "NVIDIA H200")
    _png(sandbox, "l4", "42_orphan", "lonely")      # no manifest entry, no data
    return sandbox, m


def test_render_from_a_sandbox_tree(tree):
    root, manifest = tree
    text = gallery.render(manifest)
    heads = re.findall(r"^## (\S+)$", text, re.M)
    assert heads == ["03_gpu", "01_host", "07_roof", "42_orphan"]        # manifest order, then the rest
    assert "5 figure(s) from 4 notebook(s)" in text
    assert "**A GPU notebook** · notebook `notebooks/03_gpu.ipynb` · claims: A3, A4" in text
    links = re.findall(r"!\[([^]]+)\]\(([^)]+)\)", text)
    assert links[:2] == [("alpha", "h200/03_gpu/alpha.png"), ("zeta", "h200/03_gpu/zeta.png")]
    assert all((root / "figures" / p).is_file() for _, p in links)
    assert not any(p.endswith(".svg") for _, p in links)
    # the newest sidecar's date, and the mode each device implies
    assert "*alpha: NVIDIA H200 · 2026-01-05 · measured · claims: A3, A4*" in text
    assert "*codes: CPU (x86_64) · 2026-02-03 · computed · claims: B2*" in text
    assert ("*floors: spec sheet (fp8lab.facts.devices) · 2026-03-04 · computed from the spec sheet "
            "· claims: —*") in text
    assert "*lonely: l4 · — · no data in data/ · claims: —*" in text
    assert "(not in notebooks/manifest.yaml)" in text
    assert text.rstrip().endswith(gallery.FOOTER) and "python -m fp8lab gallery" in gallery.FOOTER
    assert gallery.render(manifest) == text                               # deterministic


def test_check_detects_staleness(tree, monkeypatch, capsys):
    root, manifest = tree
    assert gallery.update(check=True, manifest=manifest) is False         # no README yet
    assert not gallery.readme_path().exists()                             # check writes nothing
    assert gallery.update(manifest=manifest) is False
    assert gallery.update(check=True, manifest=manifest) is True
    # a re-measurement changes the date: stale again
    _side(root, "cpu", "01_host", "codes", "2026-04-01T00:00:00+00:00", "host", "CPU (x86_64)")
    assert gallery.update(check=True, manifest=manifest) is False
    # through the CLI, which reads the repo manifest
    monkeypatch.setattr(notebooks, "manifest_path", lambda: manifest)
    assert cli.main(["gallery", "--check"]) == 1
    assert "stale" in capsys.readouterr().err
    assert cli.main(["gallery"]) == 0
    assert cli.main(["gallery", "--check"]) == 0
    _png(root, "h200", "03_gpu", "new_figure")                            # a new figure: stale
    assert cli.main(["gallery", "--check"]) == 1


def test_bad_sidecar_is_named(tree):
    root, manifest = tree
    (root / "data" / "cpu" / "01_host" / "broken.meta.json").write_text("{not json")
    with pytest.raises(ValueError, match="broken.meta.json: not a valid meta sidecar"):
        gallery.render(manifest)


def test_committed_gallery_is_current(monkeypatch):
    monkeypatch.delenv("FP8LAB_DATA_DIR", raising=False)
    monkeypatch.delenv("FP8LAB_FIGURES_DIR", raising=False)
    path = figures_dir() / "README.md"
    assert path.is_file(), "figures/README.md is missing: run `python -m fp8lab gallery`"
    assert gallery.update(check=True), "figures/README.md is stale: run `python -m fp8lab gallery`"
    for target in re.findall(r"!\[[^]]*\]\(([^)]+)\)", path.read_text()):
        assert (path.parent / target).is_file(), f"figures/README.md links a missing {target}"


def test_cli_check_exit_codes(monkeypatch, capsys):
    """`claims --check` / `gallery --check`: 0 when current, 1 with the command to run when stale;
    without --check the file is (re)written and the command exits 0."""
    from fp8lab.report import claims
    from fp8lab.run import cli, gallery
    for mod, fn, cmd, what in ((claims, "update_readme", "claims", "README ledger"),
                               (gallery, "update", "gallery", "figures/README.md")):
        for current, check, rc, msg in ((True, True, 0, f"{what} is current"),
                                        (False, True, 1, f"{what} is stale: run `python -m fp8lab {cmd}`"),
                                        (False, False, 0, f"{what} regenerated"),
                                        (True, False, 0, f"{what} already current")):
            monkeypatch.setattr(mod, fn, lambda check, current=current: current)
            assert cli.main([cmd] + (["--check"] if check else [])) == rc, (cmd, current, check)
            out = capsys.readouterr()
            assert msg in out.out + out.err, (cmd, current, check, out)
