"""fp8lab's imports form no circle and run down the layers (issue 18): read from the sources,
function-level imports included (a lazy import still ties two modules together), so a change
that closes a circle or makes a kernel wrapper import measuring or reporting code fails here."""

import ast
from pathlib import Path

import pytest

import fp8lab

PKG = Path(fp8lab.__file__).resolve().parent

#: what the kernel wrappers may import besides each other: number formats and emulators, the
#: arm registry and its counts, paths, the toolchain helpers. Never measuring (bench, clocks,
#: experiments, peers), reporting (results, claims, plotting, overlay) or running (runner, cli).
KERNEL_MAY_IMPORT = ("fp8lab.kernels", "fp8lab.arms", "fp8lab.dequant", "fp8lab.formats", "fp8lab.paths",
                     "fp8lab.tools", "fp8lab.resources")


def _modules() -> dict:
    mods = {}
    for p in PKG.rglob("*.py"):
        parts = list(p.relative_to(PKG.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = p
    return mods


def imports(mods: dict) -> dict:
    """module -> the fp8lab modules it imports anywhere in its source."""
    out = {}
    for m, p in mods.items():
        pkg = m if p.name == "__init__.py" else m.rsplit(".", 1)[0]
        found = set()
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names}
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
        out[m] = {t for t in found if t in mods and t != m and not m.startswith(t + ".")}
    return out


def circles(graph: dict) -> list:
    """Strongly connected groups of more than one module (Tarjan)."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_scan_sees_imports():
    g = imports(_modules())
    assert "fp8lab.arms.registry" in g["fp8lab.experiments.blockwise"]
    assert "fp8lab.kernels.weight_only" in g["fp8lab.arms.counts"]          # a function-level import
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circle():
    found = circles(imports(_modules()))
    assert not found, "import circles (one module of each must stop importing the others):\n" + "\n".join(
        " <-> ".join(c) for c in found)


@pytest.mark.parametrize("module", sorted(m for m in _modules() if m.startswith("fp8lab.kernels.")))
def test_kernels_never_import_up(module):
    up = sorted(t for t in imports(_modules())[module] if not t.startswith(KERNEL_MAY_IMPORT))
    assert not up, f"{module} imports {up}: kernel wrappers may import only {KERNEL_MAY_IMPORT}"
