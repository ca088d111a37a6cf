"""The README's peers table: the catalog's rows (fp8lab.arms.peer_catalog) and what the committed
tables in data/ say of each peer. ``python -m fp8lab claims`` rewrites it with the ledger."""
from __future__ import annotations

from ..arms.peer_catalog import PEERS
from ..paths import repo_root

README_BEGIN = ("<!-- peers:begin (generated from fp8lab/arms/peer_catalog.py and data/ by `python -m fp8lab claims` "
                "or `python -m fp8lab.peers readme`) -->")
README_END = "<!-- peers:end -->"


def in_data(data_root=None) -> dict:
    """What the committed tables say of each peer: peer id -> one entry per peers table under
    data/<device>/<notebook>/ that has rows of it, (notebook, device name, commit, rows measured,
    rows in all, {status kind: rows} of the rest), from the CSV and its sidecar alone."""
    import csv
    import json
    from collections import Counter
    from pathlib import Path

    root = Path(data_root) if data_root is not None else repo_root() / "data"
    out: dict = {}
    for f in sorted(root.glob("*/*/peers*.csv")):
        try:
            meta = json.loads(f.with_suffix(".meta.json").read_text())
        except (OSError, ValueError):
            meta = {}
        with f.open(newline="") as fh:
            rows = list(csv.DictReader(fh))
        by: dict = {}
        for r in rows:
            pid = r.get("arm") or r.get("peer") or ""
            if pid.startswith("peer_"):
                by.setdefault(pid, Counter())[(r.get("status") or "").split(":")[0].strip() or "?"] += 1
        nb = f.parent.name.split("_")[0]
        dev = str(meta.get("device_name") or f.parent.parent.name).removeprefix("NVIDIA ")
        commit = str((meta.get("git") or {}).get("commit") or "?")[:7]
        for pid, c in by.items():
            rest = {k: v for k, v in c.items() if k != "measured"}
            out.setdefault(pid, []).append((nb, dev, commit, c.get("measured", 0), sum(c.values()), rest))
    return out


def in_data_cell(entries) -> str:
    if not entries:
        return "no committed table has it"
    parts = []
    for nb, dev, commit, m, n, rest in entries:
        others = ", ".join(f"{v} {k}" for k, v in sorted(rest.items()))
        if m:
            parts.append(f"{nb} {dev} @{commit}: {m}/{n} measured" + (f" ({others})" if others else ""))
        else:
            parts.append(f"{nb} {dev} @{commit}: {others}")
    return "; ".join(parts)


def readme_table(data_root=None) -> str:
    """The README's peers table (markdown): the catalog's rows, and what the committed tables in
    data/ say of each peer (notebook, device, commit, rows measured): one row per peer."""
    head = ("| peer | library | notebooks | install | version seen | measured in data/ (notebook device @commit) "
            "| licence | weights / scales | offline H200 |\n"
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
    esc = lambda t: t.replace("|", "\\|")  # noqa: E731
    seen = in_data(data_root)
    rows = "".join(f"| `{p.id}` | {esc(p.library)} | {', '.join(p.notebooks)} | `{esc(p.install)}` | {esc(p.seen)} | "
                   f"{esc(in_data_cell(seen.get(p.id)))} | "
                   f"{p.licence} | {esc(p.weight)}; {esc(p.scales)}; {p.act} activations | "
                   f"{esc(p.carried or 'wheel')} |\n" for p in PEERS.values())
    return head + rows


def render_readme(text: str) -> str:
    """``text`` (the README) with its peers table regenerated (unchanged without the markers)."""
    if README_BEGIN not in text or README_END not in text:
        return text
    i, j = text.index(README_BEGIN), text.index(README_END)
    return text[:i] + README_BEGIN + "\n" + readme_table() + text[j:]
