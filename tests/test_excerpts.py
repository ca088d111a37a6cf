"""Kernel excerpts in notebooks come from named markers in the sources (fp8lab.report.excerpts): the
markers pair up in every source, every excerpt a notebook prints exists, and no notebook cuts
fp8lab's own sources at ad-hoc text any more (it once did: a merged dedupe dropped the
"  // Epilogue" that notebook 06 cut at, and 06 failed under `make run` on a CPU box). This
replaces tests/test_notebook_excerpts.py, which checked those ad-hoc anchors."""

import re
from pathlib import Path

import pytest

from fp8lab.report import excerpts
from fp8lab import paths

ROOT = paths.repo_root()
KERNELS = ROOT / "fp8lab" / "kernels"
SOURCES = sorted(p for p in KERNELS.rglob("*") if p.suffix in (".cu", ".cuh", ".h", ".cpp", ".py"))
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9]*.py"))
#: excerpt(<path expression>, "<name>" ...) in a notebook
CALL = re.compile(r"""\bexcerpt\(\s*([^,]+?)\s*,\s*["']([^"']+)["']""")


def _all_markers() -> dict:
    """name -> [files that define it] over every kernel source."""
    out: dict = {}
    for p in SOURCES:
        for name in excerpts.markers(p):
            out.setdefault(name, []).append(p.name)
    return out


def test_markers_pair_up_in_every_source():
    assert _all_markers(), "no excerpt markers found: the scan is broken"


def test_every_excerpt_name_is_defined_once():
    twice = {n: f for n, f in _all_markers().items() if len(f) > 1}
    assert not twice, f"excerpt names must be unique across the kernel sources: {twice}"


def test_every_excerpt_a_notebook_prints_exists():
    defined = _all_markers()
    used = [(nb.name, name) for nb in NOTEBOOKS for _, name in CALL.findall(nb.read_text())]
    assert len(used) >= 10, used                   # the scan sees the notebooks' calls
    missing = [f"{nb}: {name}" for nb, name in used if name not in defined]
    assert not missing, "notebooks print excerpts no source marks:\n" + "\n".join(missing)


def test_no_notebook_cuts_fp8labs_sources_at_adhoc_text():
    """An index() into fp8lab's own sources silently shows the wrong lines when the code moves;
    other people's sources (CUTLASS's, read from its checkout) carry no markers and are exempt."""
    bad = []
    for nb in NOTEBOOKS:
        for no, line in enumerate(nb.read_text().splitlines(), 1):
            if re.search(r"\b(HEADER|SOURCE|_SOURCE)\b.*read_text\(\)|getsource\(|\.src\b", line):
                bad.append(f"{nb.name}:{no}: {line.strip()}")
    assert not bad, "use fp8lab.report.excerpts.excerpt(path, name):\n" + "\n".join(bad)


# ---------------------------------------------------------------------------- the parser
def _write(tmp_path, text, name="k.cu") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_markers_on_code_lines_keep_the_line_and_lone_markers_vanish(tmp_path):
    p = _write(tmp_path, "int a;\n"
                         "  for (;;) {  // fp8lab:excerpt loop\n"
                         "    // fp8lab:excerpt inner\n"
                         "#pragma unroll\n"
                         "    x += 1;\n"
                         "    // fp8lab:excerpt-end inner\n"
                         "  }  // fp8lab:excerpt-end loop\n")
    assert excerpts.markers(p) == {"inner": (3, 6), "loop": (2, 7)}
    assert excerpts.excerpt(p, "loop") == "  for (;;) {\n#pragma unroll\n    x += 1;\n  }"
    assert excerpts.excerpt(p, "inner", drop=("#pragma",), dedent=True) == "x += 1;"


def test_python_markers(tmp_path):
    p = _write(tmp_path, "def f():\n    # fp8lab:excerpt body\n    return 1\n    # fp8lab:excerpt-end body\n",
               "k.py")
    assert excerpts.excerpt(p, "body", dedent=True) == "return 1"


@pytest.mark.parametrize("text, msg", [
    ("// fp8lab:excerpt a\n// fp8lab:excerpt a\n// fp8lab:excerpt-end a\n", "opens a second time"),
    ("// fp8lab:excerpt-end a\n", "closes without opening"),
    ("x; // fp8lab:excerpt a\n", "never closes"),
])
def test_bad_markers_say_where_in_one_line(tmp_path, text, msg):
    p = _write(tmp_path, text)
    with pytest.raises(excerpts.ExcerptError, match=msg) as e:
        excerpts.markers(p)
    assert "\n" not in str(e.value) and "k.cu:" in str(e.value)


def test_a_missing_excerpt_lists_what_there_is(tmp_path):
    p = _write(tmp_path, "// fp8lab:excerpt a\nx;\n// fp8lab:excerpt-end a\n")
    with pytest.raises(excerpts.ExcerptError, match="has no excerpt 'b' .it has: a."):
        excerpts.excerpt(p, "b")
