"""``python -m fp8lab arm [ID]``: everything about one arm from its id. No GPU, nothing imported
but the registry, the declared sources (``fp8lab.arms.where``) and the peer catalog; the rest is
found in the checkout: the tests, notebooks and experiment modules that name the id, the rows of
every committed table with ``arm == ID`` (or ``ID+quant``), and the figure folders of those
notebooks, where the legend reads the registry's label."""

from __future__ import annotations

import csv
import difflib
import re
from pathlib import Path

__all__ = ["locate", "report", "arm_ids", "main"]


def arm_ids() -> tuple:
    from ..arms import registry

    return registry.ids("arm")


def _mentions(folder: Path, pattern: str, arm_id: str) -> list:
    word = re.compile(rf"(?<![A-Za-z0-9_]){re.escape(arm_id)}(?![A-Za-z0-9_])")
    return sorted(p for p in folder.glob(pattern) if p.is_file() and word.search(p.read_text(errors="replace")))


def _table_rows(data: Path, arm_id: str) -> dict:
    """{table path: rows} of every committed CSV with an ``arm`` column naming the id."""
    want = {arm_id, arm_id + "+quant"}
    out = {}
    for p in sorted(data.glob("*/*/*.csv")):
        with p.open(newline="") as f:
            reader = csv.DictReader(f)
            if "arm" not in (reader.fieldnames or ()):
                continue
            n = sum(1 for r in reader if r.get("arm") in want)
        if n:
            out[p] = n
    return out


def locate(arm_id: str, root: Path | None = None) -> dict:
    """What the checkout says about ``arm_id`` (ValueError naming close ids when it is not an arm)."""
    from ..arms import peer_catalog, registry, where
    from ..paths import repo_root

    ids = arm_ids()
    if arm_id not in ids:
        close = difflib.get_close_matches(arm_id, ids, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ValueError(f"{arm_id!r} is not an arm id{hint} (python -m fp8lab arm lists them)")
    root = Path(root) if root is not None else repo_root()
    e = registry.entry(arm_id)
    tables = _table_rows(root / "data", arm_id)
    figure_dirs = sorted({root / "figures" / p.parent.parent.name / p.parent.name for p in tables}
                         & {d for d in (root / "figures").glob("*/*") if d.is_dir()})
    peer = None
    if registry.is_peer(arm_id):
        try:
            peer = peer_catalog.get(arm_id)
        except (KeyError, ValueError):
            peer = None
    return dict(id=arm_id, label=e.label, short=e.short or e.label, color=registry.color(arm_id),
                scheme=e.scheme or "", count=e.count, where=where.where(arm_id), peer=peer,
                tests=_mentions(root / "tests", "*.py", arm_id),
                notebooks=_mentions(root / "notebooks", "[0-9]*.py", arm_id),
                experiments=_mentions(root / "fp8lab" / "experiments", "*.py", arm_id),
                tables=tables, figures=figure_dirs, root=root)


def report(info: dict) -> str:
    """The lines ``python -m fp8lab arm ID`` prints."""
    root = info["root"]

    def rel(p):
        return Path(p).relative_to(root).as_posix()

    w, peer = info["where"], info["peer"]
    lines = [f"{info['id']}: {info['label']}" + (f"  ({info['scheme']})" if info["scheme"] else ""),
             f"  legend     {info['label']!r}, colour {info['color']}"
             + (f", tick label {info['short']!r}" if info["short"] != info["label"] else "") + " (fp8lab/arms/registry.py)"]
    if info["count"]:
        lines.append(f"  count      rule {info['count'][0]!r} (fp8lab/arms/counts.py; registry.count({info['id']!r}, ...))")
    if w is not None:
        if w.sources:
            lines.append(f"  kernel     {', '.join(w.sources)}")
        if w.library:
            lines.append(f"  library    {w.library}")
        if w.call:
            lines.append(f"  call       {w.call}")
        if w.reference:
            lines.append(f"  reference  {w.reference} (float64)")
    if peer is not None:
        lines.append(f"  peer       {peer.library}: {peer.weight}; scales {peer.scales}; licence {peer.licence}")
        lines.append(f"  install    {peer.install}")
        lines.append("  call       fp8lab/peers/adapters.py (prepared weights, then timed by fp8lab's harness)")
    for key, what in (("tests", "tests"), ("experiments", "experiment"), ("notebooks", "notebooks")):
        if info[key]:
            lines.append(f"  {what:<10} {', '.join(rel(p) for p in info[key])}")
    if info["tables"]:
        for p, n in info["tables"].items():
            lines.append(f"  rows       {rel(p)}: {n}")
    else:
        lines.append("  rows       none in data/ (not measured in a committed run)")
    if info["figures"]:
        lines.append(f"  figures    {', '.join(rel(d) + '/' for d in info['figures'])}")
    return "\n".join(lines)


def listing() -> str:
    """One line per arm: id, scheme, kernel or library."""
    from ..arms import registry, where

    out = []
    for arm_id in arm_ids():
        w = where.where(arm_id)
        what = ("peer (fp8lab/arms/peer_catalog.py)" if registry.is_peer(arm_id)
                else (w.sources[0] if w and w.sources else (w.library if w else "")))
        out.append(f"{arm_id:<28} {registry.entry(arm_id).scheme or '':<7} {what}")
    return "\n".join(out)


def main(arm_id: str | None) -> int:
    import sys

    if not arm_id:
        print(listing())
        return 0
    try:
        info = locate(arm_id)
    except ValueError as e:
        print(f"fp8lab arm: {e}", file=sys.stderr)
        return 2
    print(report(info))
    return 0
