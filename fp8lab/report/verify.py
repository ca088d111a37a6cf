"""``python -m fp8lab verify``: check every table's provenance against git.

A sidecar names a commit and records the hash of the sources that ran (see
``provenance.source_hash``). A copy without ``.git`` can only claim its commit (through
``FP8LAB_GIT_COMMIT``); here the claim is checked: the hash of the named commit's tree is
computed from git and compared with the recorded one. Also checked: the CSV against the
sidecar's sha256, a readable sidecar, a commit this repository has, a clean tree.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import subprocess
from collections import defaultdict
from pathlib import Path

from . import provenance
from ..paths import data_dir, repo_root


class VerifyError(ValueError):
    """Bad arguments or no git checkout: one line, exit 2."""


# Problem kinds, in the order they are reported.
NO_SIDECAR = "no sidecar"
NO_TABLE = "sidecar without its CSV"
BAD_SIDECAR = "sidecar unreadable or malformed"
CSV_UNREADABLE = "CSV unreadable"
CSV_MISMATCH = "CSV sha256 differs from its sidecar"
NO_SOURCE_HASH = "no source hash"
OTHER_RULE = "source hash made under another rule"
NO_COMMIT = "no commit"
UNKNOWN_COMMIT = "commit not in this repository"
NOT_IN_HISTORY = "commit not in HEAD's history (a clone of this branch would lack it)"
DIRTY = "dirty tree"
SOURCES_DIFFER = "sources differ from the commit's tree"
TREE_UNREADABLE = "cannot read the commit's tree"
KINDS = (NO_SIDECAR, NO_TABLE, BAD_SIDECAR, CSV_UNREADABLE, CSV_MISMATCH, NO_SOURCE_HASH,
         OTHER_RULE, NO_COMMIT, UNKNOWN_COMMIT, NOT_IN_HISTORY, DIRTY, SOURCES_DIFFER, TREE_UNREADABLE)
# A reader must be able to find these files from the summary alone.
_ALWAYS_NAMED = {NO_SIDECAR, NO_TABLE, BAD_SIDECAR, CSV_UNREADABLE, CSV_MISMATCH}

_COMMIT_RE = re.compile(r"[0-9a-fA-F]{4,64}")


@dataclasses.dataclass(frozen=True)
class Problem:
    folder: str      # data/<device>/<notebook>
    table: str       # file name: <table>.csv (or the sidecar's name when the CSV is absent)
    kind: str
    detail: str = ""

    def line(self) -> str:
        return f"{self.folder}/{self.table}: {self.kind}" + (f": {self.detail}" if self.detail else "")


@dataclasses.dataclass
class Report:
    tables: dict            # folder -> number of tables checked there
    problems: list

    @property
    def n_tables(self) -> int:
        return sum(self.tables.values())


class _Git:
    """What git says about the named commits, asked once per commit."""

    def __init__(self, root: Path):
        self.root = str(root)
        self._full: dict[str, str | None] = {}
        self._hash: dict[str, str] = {}
        self._history: dict[str, bool] = {}

    def full(self, commit: str) -> str | None:
        """The full id of a commit this repository has, else None. Only a hex id counts:
        a sidecar names a commit, not a branch, and nothing else reaches git's arguments."""
        if commit not in self._full:
            self._full[commit] = None
            if _COMMIT_RE.fullmatch(commit):
                r = subprocess.run(["git", "-C", self.root, "rev-parse", "--verify", "--quiet",
                                    f"{commit}^{{commit}}"], capture_output=True, text=True,
                                   timeout=30)
                if r.returncode == 0:
                    self._full[commit] = r.stdout.strip()
        return self._full[commit]

    def in_history(self, full_commit: str) -> bool:
        """Whether the commit is HEAD or one of its ancestors. A commit that only another
        branch (or a rebased-away draft) holds is in this repository but not in a clean
        clone of this branch, which is what CI checks."""
        if full_commit not in self._history:
            r = subprocess.run(["git", "-C", self.root, "merge-base", "--is-ancestor",
                                full_commit, "HEAD"], capture_output=True, text=True,
                               timeout=30)
            self._history[full_commit] = r.returncode == 0
        return self._history[full_commit]

    def source_hash(self, full_commit: str) -> str:
        if full_commit not in self._hash:
            self._hash[full_commit] = provenance.commit_sources(full_commit, self.root)["sha256"]
        return self._hash[full_commit]


def _check_git(root: Path) -> None:
    try:
        r = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel"],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise VerifyError(f"verify needs git to read commits: {exc}") from None
    # a copy without .git inside some other checkout would read that checkout's commits
    if r.returncode != 0 or os.path.realpath(r.stdout.strip()) != os.path.realpath(root):
        raise VerifyError(f"{root} is not a git checkout: verify reads the named commits from "
                          "git, so run it in a clone with .git")


def _select(data: Path, devices, notebooks) -> list[Path]:
    """The notebook folders to check, refusing a filter that names nothing."""
    have = sorted(p.name for p in data.iterdir() if p.is_dir()) if data.is_dir() else []
    if devices:
        unknown = [d for d in devices if d not in have]
        if unknown:
            raise VerifyError(f"unknown device {unknown[0]!r}: {data} holds {have or 'no devices'}")
    folders = [nb for d in (devices or have) for nb in sorted((data / d).iterdir()) if nb.is_dir()]
    if notebooks:
        # a notebook by its folder name or its id (the part before the first '_')
        want = set(notebooks)
        picked = [f for f in folders if f.name in want or f.name.split("_", 1)[0] in want]
        matched = {w for w in want for f in picked if w in (f.name, f.name.split("_", 1)[0])}
        missing = sorted(want - matched)
        if missing:
            names = sorted({f.name for f in folders})
            raise VerifyError(f"no notebook {missing[0]!r} in {data}"
                              + (f" for device {', '.join(devices)}" if devices else "")
                              + f": there are {names or 'none'}")
        folders = picked
    return folders


def _check_table(meta_path: Path, csv_path: Path, git: _Git, add) -> None:
    try:
        meta = json.loads(meta_path.read_text())
        if not isinstance(meta, dict):
            raise ValueError(f"holds a {type(meta).__name__}, not an object")
        want = (meta.get("table") or {}).get("sha256")
        if not isinstance(want, str):
            raise ValueError("has no table.sha256")
    except (OSError, ValueError, AttributeError) as exc:   # JSONDecodeError is a ValueError
        add(BAD_SIDECAR, f"{meta_path.name}: {exc}")
        return
    try:
        have = hashlib.sha256(csv_path.read_bytes()).hexdigest()
    except OSError as exc:
        add(CSV_UNREADABLE, str(exc))
        have = None
    if have is not None and have != want:
        add(CSV_MISMATCH, f"{csv_path.name} does not hash to its sidecar's {want[:12]}")

    src = meta.get("sources")
    recorded = src.get("sha256") if isinstance(src, dict) else None
    if not isinstance(recorded, str):
        add(NO_SOURCE_HASH, src.get("error", "") if isinstance(src, dict) else "")
        recorded = None
    elif src.get("rule") != provenance.SOURCE_RULE:
        add(OTHER_RULE, f"{str(src.get('rule'))[:40]!r}")
        recorded = None

    g = meta.get("git") if isinstance(meta.get("git"), dict) else {}
    commit = g.get("commit")
    full = None
    if not commit:
        add(NO_COMMIT)
    else:
        full = git.full(str(commit))
        if full is None:
            add(UNKNOWN_COMMIT, f"{str(commit)[:40]}"
                + (f" (from {g['source']})" if g.get("source") else ""))
        elif not git.in_history(full):
            add(NOT_IN_HISTORY, full[:10])
    if g.get("dirty") is True:
        changed = g.get("changed")
        add(DIRTY, ", ".join(map(str, changed))[:120] if isinstance(changed, list) else "")
    if recorded and full:
        try:
            theirs = git.source_hash(full)
        except ValueError as exc:          # a partial clone may lack the commit's files
            add(TREE_UNREADABLE, str(exc)[:160])
            return
        if theirs != recorded:
            add(SOURCES_DIFFER, f"sidecar {recorded[:12]}, commit {full[:10]} {theirs[:12]}")


def verify(devices=None, notebooks=None) -> Report:
    """Check every table under data/ (or the selected devices / notebooks)."""
    root = repo_root()
    _check_git(root)
    data = data_dir()
    folders = _select(data, devices, notebooks)
    git = _Git(root)
    tables: dict[str, int] = {}
    problems: list[Problem] = []
    for folder in folders:
        label = f"{data.name}/{folder.parent.name}/{folder.name}"
        csvs = {p.name[:-len(".csv")] for p in folder.glob("*.csv")}
        metas = {p.name[:-len(".meta.json")] for p in folder.glob("*.meta.json")}
        tables[label] = len(csvs | metas)
        for name in sorted(csvs | metas):
            csv_path, meta_path = folder / f"{name}.csv", folder / f"{name}.meta.json"
            shown = csv_path.name if name in csvs else meta_path.name

            def add(kind, detail="", _shown=shown, _label=label):
                problems.append(Problem(_label, _shown, kind, detail))
            if name not in metas:
                add(NO_SIDECAR)
            elif name not in csvs:
                add(NO_TABLE)
            else:
                _check_table(meta_path, csv_path, git, add)
    return Report(tables, problems)


def _names(items, limit: int = 3) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" +{len(items) - limit} more" if len(items) > limit else "")


def render(report: Report, verbose: bool = False) -> list[str]:
    """One line per notebook folder and kind (every problem with ``verbose``), then the
    summary line."""
    order = {k: i for i, k in enumerate(KINDS)}
    probs = sorted(report.problems, key=lambda p: (p.folder, order.get(p.kind, 99), p.table))
    lines = []
    if verbose:
        lines = [p.line() for p in probs]
    else:
        groups: dict[tuple, list[Problem]] = defaultdict(list)
        for p in probs:
            groups[(p.folder, p.kind)].append(p)
        for (folder, kind), ps in groups.items():
            total = report.tables.get(folder, len(ps))
            count = (f"{len(ps)} of {total}" if len(ps) < total
                     else f"all {total}" if total > 1 else "1")
            line = f"{folder}: {kind}: {count} table{'s' if total != 1 else ''}"
            if kind in _ALWAYS_NAMED or len(ps) < total:
                line += f" ({_names([p.table for p in ps])})"
            details = sorted({p.detail for p in ps if p.detail and kind not in _ALWAYS_NAMED})
            if details:
                line += "; " + (_names(details, 2) if len(details) <= 2
                                else f"{len(details)} different: {_names(details, 2)}")
            lines.append(line)
    n = len(report.problems)
    t = report.n_tables
    lines.append(f"{t} table{'s' if t != 1 else ''} checked, {n} problem{'s' if n != 1 else ''}"
                 + (" (-v lists every table)" if n and not verbose else ""))
    return lines


def main(devices=None, notebooks=None, verbose: bool = False) -> int:
    report = verify(devices, notebooks)
    for line in render(report, verbose):
        print(line)
    return 1 if report.problems else 0
