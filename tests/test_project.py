"""Project hygiene: packaging in step, notebooks clean and paired, the manifest honest."""

import ast
import re
import tomllib

import nbformat
import pytest
import yaml

from fp8lab.report import claims
from fp8lab.run import notebooks
from fp8lab import paths

ROOT = paths.repo_root()


def _name(req: str) -> str:
    return re.split(r"[<>=!~\[; ]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


# conda-forge packages whose name is not the PyPI one
CONDA_TO_PYPI = {"playwright-python": "playwright"}


def test_environment_yml_mirrors_pyproject():
    proj = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    conda_names = {CONDA_TO_PYPI.get(_name(d), _name(d)) for d in conda} - {"python", "pip"}
    pip_names = {_name(d) for d in pip if not d.startswith("-")}
    extras = proj["optional-dependencies"]
    want_conda = {_name(r) for r in proj["dependencies"] + extras["test"] + extras["lab"]}
    want_pip = {_name(r) for r in extras["cpu"] if not r.startswith("fp8lab[")}
    assert conda_names == want_conda
    assert pip_names == want_pip
    assert "-e ." in pip


def test_readme_first_screen_and_ci_agree():
    readme = (ROOT / "README.md").read_text()
    first_screen = "\n".join(readme.splitlines()[:30])
    assert "make run" in first_screen and "make test" in first_screen
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^make test\b", ci, re.M), ".ci/run must call the README's test command"


def _notebooks():
    return sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))


def test_manifest_notebooks_exist_and_declare_mode():
    specs = notebooks.load_manifest()
    assert specs, "empty manifest"
    for s in specs:
        assert s.path.is_file(), f"manifest names {s.path.name}, which does not exist"
        params = notebooks.notebook_parameters(s.path)
        assert "mode" in params, f"{s.name}: its parameters cell must declare mode"
        assert set(s.claims) <= set(claims.CLAIMS), f"{s.name}: unknown claim ids"
    on_disk = {p.stem for p in _notebooks()}
    assert on_disk == {s.name for s in specs}, "every notebook is in the manifest and vice versa"


@pytest.mark.parametrize("nb_path", _notebooks(), ids=lambda p: p.stem)
def test_notebook_committed_without_outputs(nb_path):
    nb = nbformat.read(nb_path, as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert not cell.get("outputs"), f"{nb_path.name} cell {i} has outputs"
            assert cell.get("execution_count") is None, f"{nb_path.name} cell {i} has an execution count"


@pytest.mark.parametrize("nb_path", _notebooks(), ids=lambda p: p.stem)
def test_notebook_pairs_in_sync(nb_path):
    import jupytext
    py = nb_path.with_suffix(".py")
    assert py.is_file(), f"{nb_path.name} has no paired {py.name}"
    a = nbformat.read(nb_path, as_version=4)
    b = jupytext.read(py)
    cells = lambda nb: [(c.cell_type, c.source.strip()) for c in nb.cells]
    assert cells(a) == cells(b), f"{nb_path.name} and {py.name} differ: run `make sync`"


def test_no_merge_conflict_markers_in_tracked_text():
    """A merge resolved in a hurry once committed its markers into the README."""
    import subprocess
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    try:
        files = subprocess.run(["git", "-C", str(root), "ls-files"], capture_output=True, text=True,
                               check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        import pytest
        pytest.skip("not a git checkout")
    bad = []
    for f in files:
        p = root / f
        if p.suffix in (".png", ".svg", ".ncu-rep", ".csv") or not p.is_file():
            continue
        try:
            text = p.read_text()
        except UnicodeDecodeError:
            continue
        for i, line in enumerate(text.splitlines(), 1):
            if line.startswith(("<<<<<<< ", ">>>>>>> ")) or line == "=======":
                bad.append(f"{f}:{i}")
    assert not bad, bad


def _shadowed_calls(source: str) -> list:
    """(line, function, name) where a function calls one of its own parameters that has the name
    of a function, class or import of the same module: the call reaches the argument, not the
    module's function. (A rename of bench's graph-replay helper to ``graph_samples``, the name of
    a parameter of ``bench.bench``, passed every CPU check and broke every graph timing on the
    H200, session 7.)"""
    import ast

    tree = ast.parse(source)
    top = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    for n in tree.body:
        if isinstance(n, (ast.Import, ast.ImportFrom)):
            top |= {(a.asname or a.name).split(".")[0] for a in n.names}
    out = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        a = fn.args
        params = {x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)} | {x.arg for x in (a.vararg, a.kwarg) if x}
        out += [(c.lineno, fn.name, c.func.id) for c in ast.walk(fn)
                if isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id in params & top]
    return out


def test_no_function_calls_a_parameter_named_like_a_module_function():
    found = {str(p.relative_to(ROOT)): hits for p in sorted((ROOT / "fp8lab").rglob("*.py"))
             if (hits := _shadowed_calls(p.read_text()))}
    assert not found, found
    # the check sees the case it is for
    bad = ("def graph_samples(fn, n):\n    return []\n\n"
           "def bench(fn, graph_samples=None):\n    return graph_samples(fn, 3)\n")
    assert _shadowed_calls(bad) == [(5, "bench", "graph_samples")]


def _missing_module_attributes(root) -> list:
    """Every ``alias.name`` in fp8lab/, the notebooks and scripts/ where ``alias`` is an fp8lab module
    (``from fp8lab.x import y as alias``, relative imports too, per scope: a local assignment or
    parameter of that name is not the module) and the module binds no ``name`` at its top level
    (nor has a submodule of that name, a module ``__getattr__``, or a ``hasattr`` guard in the
    same scope). Code that runs only on a GPU is read here too, so a rename that misses a call
    site there fails on the CPU."""
    mods = {}
    for p in (root / "fp8lab").rglob("*.py"):
        name = ".".join(p.relative_to(root).with_suffix("").parts)
        mods[name[:-9] if name.endswith(".__init__") else name] = p
    defined = {}

    def names_in(m):
        if m not in defined:
            t = ast.parse(mods[m].read_text())
            out, dyn = set(), False
            for n in t.body:
                if isinstance(n, ast.FunctionDef) and n.name == "__getattr__":
                    dyn = True
            for n in t.body:
                for x in ast.walk(n) if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else [n]:
                    if isinstance(x, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                        out.add(x.name)
                    elif isinstance(x, ast.Name) and isinstance(x.ctx, ast.Store):
                        out.add(x.id)
                    elif isinstance(x, (ast.Import, ast.ImportFrom)):
                        out |= {(a.asname or a.name).split(".")[0] for a in x.names}
            defined[m] = (out, dyn)
        return defined[m]

    def target(cur, node, a):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                if cur is None:
                    return None
                pkg = cur.split(".") if mods[cur].name == "__init__.py" else cur.split(".")[:-1]
                base = ".".join(pkg[:len(pkg) - (node.level - 1)] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            full = f"{base}.{a.name}"
            return full if full in mods else None
        return a.name if a.name in mods and a.asname else None

    problems = []
    files = (sorted((root / "fp8lab").rglob("*.py")) + sorted((root / "notebooks").glob("[0-9]*.py"))
             + sorted((root / "scripts").rglob("*.py")))
    for p in files:
        rel = p.relative_to(root)
        cur = ".".join(rel.with_suffix("").parts) if rel.parts[0] == "fp8lab" else None
        if cur and cur.endswith(".__init__"):
            cur = cur[:-9]
        tree = ast.parse(p.read_text())

        def scan(body_nodes, inherited):
            aliases = dict(inherited)
            stores = set()
            guarded = set()
            nested = []
            # bindings of this scope (not descending into nested functions)
            todo = list(body_nodes)
            own = []
            while todo:
                x = todo.pop()
                if isinstance(x, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    nested.append(x)
                    continue
                own.append(x)
                for c in ast.iter_child_nodes(x):
                    if isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        nested.append(c)
                    else:
                        todo.append(c)
            for x in own:
                if isinstance(x, (ast.Import, ast.ImportFrom)):
                    for a in x.names:
                        t = target(cur, x, a)
                        if t:
                            aliases[a.asname or a.name] = t
                        else:
                            aliases.pop(a.asname or a.name.split(".")[0], None)
                            stores.add(a.asname or a.name.split(".")[0])
                elif isinstance(x, ast.Name) and isinstance(x.ctx, ast.Store):
                    stores.add(x.id)
                elif isinstance(x, ast.arg):
                    stores.add(x.arg)
                elif (isinstance(x, ast.Call) and isinstance(x.func, ast.Name) and x.func.id == "hasattr"
                      and len(x.args) == 2 and isinstance(x.args[0], ast.Name)
                      and isinstance(x.args[1], ast.Constant)):
                    guarded.add((x.args[0].id, x.args[1].value))
            imported_here = {k for k, v in aliases.items() if k not in inherited or inherited[k] != v}
            for x in own:
                if isinstance(x, ast.Attribute) and isinstance(x.value, ast.Name) and x.value.id in aliases:
                    nm = x.value.id
                    if nm in stores and nm not in imported_here:
                        continue
                    m = aliases[nm]
                    names, dyn = names_in(m)
                    if (x.attr not in names and not dyn and f"{m}.{x.attr}" not in mods
                            and not x.attr.startswith("__") and (nm, x.attr) not in guarded):
                        problems.append(f"{rel}:{x.lineno}: {nm}.{x.attr} ({m} defines no {x.attr})")
            for f in nested:
                args = f.args
                params = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
                scan(f.body + [a for a in (*args.defaults, *args.kw_defaults) if a is not None],
                     {k: v for k, v in aliases.items() if k not in params})
        scan(tree.body, {})
    return problems


def test_every_module_attribute_used_exists():
    assert _missing_module_attributes(ROOT) == []


def test_the_attribute_check_sees_a_missed_rename(tmp_path):
    pkg = tmp_path / "fp8lab"
    (pkg / "experiments").mkdir(parents=True)
    (tmp_path / "notebooks").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "experiments" / "__init__.py").write_text("")
    (pkg / "bench.py").write_text("def graph_replay_samples(fn, n):\n    return []\n")
    (pkg / "experiments" / "q.py").write_text(
        "from .. import bench\n\n"
        "def measure(fn):\n    return bench._graph_samples(fn, 3)\n\n"
        "def fine(bench):\n    return bench.anything\n")
    assert _missing_module_attributes(tmp_path) == [
        "fp8lab/experiments/q.py:4: bench._graph_samples (fp8lab.bench defines no _graph_samples)"]
