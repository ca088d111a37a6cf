"""fp8lab's imports form no circle and run down the layers (issue 18): read from the sources,
function-level imports included (a lazy import still ties two modules together), so a change
that closes a circle or makes a module import from a layer above its own (a kernel wrapper
importing measuring code, say) fails here."""

import ast
from pathlib import Path

import pytest

import fp8lab

PKG = Path(fp8lab.__file__).resolve().parent

#: fp8lab's subpackages from the bottom up; a module imports only from its own layer or below.
#: paths: where things live. emulate / facts: number formats and emulators, shapes, spec sheets,
#: roofline arithmetic (no GPU). toolchain: nvcc, ptxas, SASS, ncu, child processes. kernels: the
#: kernel sources and their wrappers. arms: the registry of every arm (fp8lab's and peers') with its
#: count. measure: timing, clocks, progress. report: tables, provenance, plots, the ledger.
#: experiments / peers: sweeps -> tables -> verdicts -> figures. run: the runner, the cluster, the CLI.
LAYERS = (
    ("fp8lab.paths",),
    ("fp8lab.emulate", "fp8lab.facts"),
    ("fp8lab.toolchain",),
    ("fp8lab.kernels",),
    ("fp8lab.arms",),
    ("fp8lab.measure",),
    ("fp8lab.report",),
    ("fp8lab.experiments", "fp8lab.peers"),
    ("fp8lab.run",),
    ("fp8lab.__main__",),
)


def layer(module: str) -> int:
    for i, names in enumerate(LAYERS):
        if any(module == n or module.startswith(n + ".") for n in names):
            return i
    raise KeyError(module)


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


def test_every_module_has_a_layer():
    homeless = sorted(m for m in _modules() if m != "fp8lab" and not any(
        m == n or m.startswith(n + ".") for names in LAYERS for n in names))
    assert not homeless, f"modules in no layer of LAYERS (put each in a subpackage): {homeless}"


def test_the_layer_rule_can_fail():
    assert layer("fp8lab.kernels.weight_only") < layer("fp8lab.measure.bench") < layer("fp8lab.run.cli")
    assert layer("fp8lab.experiments.decode") == layer("fp8lab.peers.sweeps")


@pytest.mark.parametrize("module", sorted(m for m in _modules() if m != "fp8lab"))
def test_imports_run_down_the_layers(module):
    up = sorted(t for t in imports(_modules())[module] if t != "fp8lab" and layer(t) > layer(module))
    assert not up, (f"{module} (layer {layer(module)}) imports {up} from a higher layer; move the shared "
                    "code down or the importer up (LAYERS, tests/test_layers.py)")
