"""Kernel excerpts the notebooks show, cut at named markers in the sources (not pasted, not cut
at whatever text happens to be there).

A marker is a comment: ``// fp8lab:excerpt NAME`` (CUDA / C++) or ``# fp8lab:excerpt NAME``
(Python) opens excerpt NAME, ``fp8lab:excerpt-end NAME`` closes it. A marker alone on its line
is not part of the excerpt; a marker after code keeps that line, without the comment. Excerpts
may nest or overlap; the markers of the others inside one are left out of it.
``tests/test_excerpts.py`` checks that every marker pairs up and that every excerpt a notebook
asks for exists, so moving kernel code cannot silently change what a notebook prints.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

__all__ = ["ExcerptError", "markers", "excerpt"]

_MARK = re.compile(r"\s*(?://|#)\s*fp8lab:excerpt(-end)?\s+([A-Za-z0-9_.-]+)\s*$")


class ExcerptError(ValueError):
    """A marker that is missing, unpaired or given twice."""


def _split(line: str):
    """(code before the marker, is_end, name) or None for a line without a marker."""
    m = _MARK.search(line)
    if m is None:
        return None
    return line[: m.start()].rstrip(), bool(m.group(1)), m.group(2)


def markers(path) -> dict:
    """{name: (first line, last line)} (1-based, inclusive, marker lines included) of every
    excerpt in ``path``; ExcerptError (one line) when a marker opens twice, closes without
    opening, or never closes."""
    path = Path(path)
    open_at, spans = {}, {}
    for no, line in enumerate(path.read_text().splitlines(), 1):
        hit = _split(line)
        if hit is None:
            continue
        _, is_end, name = hit
        if not is_end:
            if name in open_at or name in spans:
                raise ExcerptError(f"{path.name}:{no}: excerpt {name!r} opens a second time")
            open_at[name] = no
        else:
            if name not in open_at:
                raise ExcerptError(f"{path.name}:{no}: excerpt {name!r} closes without opening")
            spans[name] = (open_at.pop(name), no)
    if open_at:
        name, no = next(iter(open_at.items()))
        raise ExcerptError(f"{path.name}:{no}: excerpt {name!r} never closes (fp8lab:excerpt-end {name})")
    return spans


def excerpt(path, name: str, *, drop: tuple = (), dedent: bool = False) -> str:
    """The source lines of excerpt ``name`` in ``path``, without marker comments; lines holding
    any of ``drop`` (e.g. ``"#pragma unroll"``) left out; ``dedent``: common indentation removed."""
    path = Path(path)
    spans = markers(path)
    if name not in spans:
        raise ExcerptError(f"{path.name} has no excerpt {name!r} (it has: {', '.join(sorted(spans)) or 'none'})")
    first, last = spans[name]
    out = []
    for line in path.read_text().splitlines()[first - 1:last]:
        hit = _split(line)
        if hit is not None:
            line = hit[0]
            if not line.strip():
                continue
        if any(d in line for d in drop):
            continue
        out.append(line)
    text = "\n".join(out)
    return textwrap.dedent(text) if dedent else text
