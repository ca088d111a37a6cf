"""Project hygiene: packaging in step, notebooks clean and paired, the manifest honest."""

import re
import tomllib

import nbformat
import pytest
import yaml

from fp8lab import claims, paths, runner

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
    specs = runner.load_manifest()
    assert specs, "empty manifest"
    for s in specs:
        assert s.path.is_file(), f"manifest names {s.path.name}, which does not exist"
        params = runner.notebook_parameters(s.path)
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
