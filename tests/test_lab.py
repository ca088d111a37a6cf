"""`make lab` (python -m fp8lab lab): the kernel the notebooks ask for runs this Python, a
paired .py opens as a notebook, and saving through JupyterLab rewrites both sides of the
pair. The server is the real one (fp8lab.run.lab's command line and environment), on a copy of
one notebook pair; the browser side is tests/test_lab_browser.py."""

from __future__ import annotations

import json
import shutil
import sys

import nbformat
import pytest

import labserver
from fp8lab.run import cli, lab
from fp8lab.paths import repo_root

NB = "01_formats"


def test_prepare_writes_a_python3_kernel_for_this_python_and_the_jupytext_viewer(tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTER_PATH", "/elsewhere")
    env = lab.prepare(tmp_path, home=tmp_path / "j")
    spec = json.loads((tmp_path / "j" / "data" / "kernels" / "python3" / "kernel.json").read_text())
    # the venv's python as called, not its symlink target (which would leave the venv)
    assert spec["argv"][:3] == [sys.executable, "-m", "ipykernel_launcher"]
    assert spec["display_name"] == "Python 3"      # what the notebooks' metadata says: no churn on save
    assert env["JUPYTER_PATH"].split(":") == [str(tmp_path / "j" / "data"), "/elsewhere"]
    assert env["JUPYTER_CONFIG_PATH"].split(":")[0] == str(tmp_path / "j" / "config")
    over = json.loads((tmp_path / "j" / "config" / "labconfig" / "default_setting_overrides.json").read_text())
    assert over["@jupyterlab/docmanager-extension:plugin"]["defaultViewers"]["python"] == "Jupytext Notebook"


def test_command_roots_jupyterlab_at_notebooks(tmp_path):
    cmd = lab.command(tmp_path, port=8899, token="t", open_browser=False)
    assert cmd[:4] == [sys.executable, "-m", "jupyter", "lab"]
    assert f"--ServerApp.root_dir={tmp_path / 'notebooks'}" in cmd
    assert {"--ServerApp.port=8899", "--IdentityProvider.token=t", "--no-browser"} <= set(cmd)


def test_cli_passes_unknown_arguments_on_to_jupyter_lab(monkeypatch, tmp_path):
    seen = {}
    monkeypatch.setattr(lab, "prepare", lambda: {"X": "1"})
    monkeypatch.setattr(lab.os, "execvpe", lambda f, cmd, env: seen.update(cmd=cmd, env=env))
    cli.main(["lab", "--no-browser", "--port", "8123", "--ServerApp.ip=0.0.0.0"])
    assert "--no-browser" in seen["cmd"] and "--ServerApp.port=8123" in seen["cmd"]
    assert "--ServerApp.ip=0.0.0.0" in seen["cmd"] and seen["env"] == {"X": "1"}


@pytest.mark.slow
def test_the_server_runs_this_python_opens_py_as_notebook_and_saves_the_pair(tmp_path):
    root = tmp_path / "repo"
    (root / "notebooks").mkdir(parents=True)
    for ext in ("py", "ipynb"):
        shutil.copy(repo_root() / "notebooks" / f"{NB}.{ext}", root / "notebooks")
    with labserver.running(root, tmp_path / "lab") as srv:
        specs = srv.api("/api/kernelspecs")
        assert specs["default"] == "python3"
        assert specs["kernelspecs"]["python3"]["spec"]["argv"][0] == sys.executable
        viewers = srv.api("/lab/api/settings/@jupyterlab/docmanager-extension:plugin")
        assert viewers["schema"]["properties"]["defaultViewers"]["default"]["python"] == "Jupytext Notebook"

        # JupyterLab opens the .py as a notebook through jupytext's contents manager
        model = srv.api(f"/api/contents/{NB}.py?type=notebook&content=1")
        assert model["type"] == "notebook"
        nb = model["content"]
        code = next(c for c in nb["cells"] if c["cell_type"] == "code")
        code["source"] += "\n# edited in JupyterLab"
        srv.api(f"/api/contents/{NB}.py", method="PUT",
                body={"type": "notebook", "format": "json", "content": nb})

    py = (root / "notebooks" / f"{NB}.py").read_text()
    ipynb = nbformat.read(root / "notebooks" / f"{NB}.ipynb", as_version=4)
    assert "# edited in JupyterLab" in py
    assert any("# edited in JupyterLab" in c.source for c in ipynb.cells), "the .ipynb side was not saved"
    # and the pair still agrees: jupytext reads the same inputs from either side
    import jupytext
    from_py = jupytext.read(root / "notebooks" / f"{NB}.py")
    assert [c.source for c in from_py.cells] == [c.source for c in ipynb.cells]
