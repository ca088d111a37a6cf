"""JupyterLab on the notebooks, as ``make lab`` (``python -m fp8lab lab``) opens it.

What a bare ``jupyter lab`` gets wrong for this project, and what this sets instead:

- The notebooks ask for the kernel ``python3``. Jupyter finds that name in the user's own
  kernel folder (~/.local/share/jupyter/kernels) before it falls back to the server's
  Python, so a machine with another Python registered as ``python3`` would run the
  notebooks without fp8lab. A ``python3`` kernel spec that runs this Python (the venv's)
  goes first on JUPYTER_PATH; its display name says which Python it is.
- A paired ``NN_topic.py`` opens in JupyterLab's text editor unless the default viewer of
  Python files is jupytext's notebook: a default (the user's own settings still win) on
  JUPYTER_CONFIG_PATH makes it so. Saving either side rewrites both (jupytext's contents
  manager, which the jupytext package enables as a server extension; the notebooks'
  metadata names the pair ``ipynb,py:percent``).
- The file browser starts at notebooks/, whatever folder make was called from.

The generated files live in runs/lab/jupyter/ (git ignores runs/), rewritten at each start.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from ..paths import repo_root

KERNEL_NAME = "python3"          # the name every notebook's metadata asks for
# jupytext's JupyterLab extension registers its notebook view under this name
JUPYTEXT_VIEWER = "Jupytext Notebook"


def default_settings(extra: dict | None = None) -> dict:
    """JupyterLab setting defaults (labconfig/default_setting_overrides.json): Python files
    open as jupytext notebooks; ``extra`` ({plugin id: {setting: value}}) is merged in."""
    out = {"@jupyterlab/docmanager-extension:plugin": {"defaultViewers": {"python": JUPYTEXT_VIEWER}}}
    for plugin, values in (extra or {}).items():
        out.setdefault(plugin, {}).update(values)
    return out


def _python_label(python: str, root: Path) -> str:
    prefix = Path(python).parent.parent          # <prefix>/bin/python
    try:
        return str(prefix.relative_to(root))     # ".venv"
    except ValueError:
        return str(prefix)


def prepare(root: Path | None = None, home: Path | None = None, python: str | None = None,
            settings: dict | None = None) -> dict:
    """Write the kernel spec and the settings defaults (``default_settings(settings)``)
    under ``home`` (runs/lab/jupyter/) and return the environment JupyterLab needs: the
    caller's, with those folders first on JUPYTER_PATH and JUPYTER_CONFIG_PATH."""
    root = Path(root) if root else repo_root()
    home = Path(home) if home else root / "runs" / "lab" / "jupyter"
    # sys.executable as it is, not resolved: a venv's python is a symlink to the base
    # interpreter, and resolving it would leave the venv (and its fp8lab) behind.
    python = python or sys.executable
    kdir = home / "data" / "kernels" / KERNEL_NAME
    kdir.mkdir(parents=True, exist_ok=True)
    spec = {"argv": [python, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "Python 3",
            "language": "python", "metadata": {"debugger": True}}
    (kdir / "kernel.json").write_text(json.dumps(spec, indent=1) + "\n")
    cdir = home / "config" / "labconfig"
    cdir.mkdir(parents=True, exist_ok=True)
    (cdir / "default_setting_overrides.json").write_text(
        json.dumps(default_settings(settings), indent=1) + "\n")
    env = dict(os.environ)
    for var, path in (("JUPYTER_PATH", home / "data"), ("JUPYTER_CONFIG_PATH", home / "config")):
        env[var] = os.pathsep.join(p for p in (str(path), env.get(var, "")) if p)
    return env


def command(root: Path | None = None, *, port: int | None = None, token: str | None = None,
            open_browser: bool = True, python: str | None = None, extra=()) -> list[str]:
    """The ``jupyter lab`` command line: this Python's JupyterLab, rooted at notebooks/."""
    root = Path(root) if root else repo_root()
    cmd = [python or sys.executable, "-m", "jupyter", "lab",
           f"--ServerApp.root_dir={root / 'notebooks'}"]
    if port is not None:
        cmd += [f"--ServerApp.port={port}", "--ServerApp.port_retries=0"]
    if token is not None:
        cmd.append(f"--IdentityProvider.token={token}")
    if not open_browser:
        cmd.append("--no-browser")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        # root in a container (CI, a GPU box's image): Jupyter refuses root without this;
        # the server still listens on localhost only, behind its token
        cmd.append("--allow-root")
    return cmd + list(extra)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fp8lab lab",
                                 description="JupyterLab on notebooks/ with this Python's kernel; "
                                             "other arguments go to jupyter lab")
    ap.add_argument("--port", type=int)
    ap.add_argument("--no-browser", action="store_true")
    a, rest = ap.parse_known_args(argv)
    env = prepare()
    cmd = command(port=a.port, open_browser=not a.no_browser, extra=rest)
    sys.stdout.flush()
    os.execvpe(cmd[0], cmd, env)      # JupyterLab owns the terminal (Ctrl-C) from here on
    return 0                          # not reached
