"""JupyterLab for a test, started as `make lab` starts it (fp8lab.run.lab's kernel spec, settings
and command line), headless: a free port, a token, no browser, and every per-user Jupyter
folder (config, settings, workspaces, runtime) in the test's own temporary folder, so
neither the user's settings nor a tab restored from their last session changes what the
test sees."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import secrets
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from fp8lab.run import lab


@dataclasses.dataclass
class Server:
    url: str
    token: str
    log: Path
    proc: subprocess.Popen

    def api(self, path: str, method: str = "GET", body=None):
        """A JSON request to the server's REST API (token in the header)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.url}{path}", data=data, method=method,
                                     headers={"Authorization": f"token {self.token}",
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            text = r.read().decode()
        return json.loads(text) if text else None

    def page(self, path: str) -> str:
        """A browser address under the server, with the token."""
        return f"{self.url}{path}{'&' if '?' in path else '?'}token={self.token}"

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running(root: Path, tmp: Path, *, settings: dict | None = None, env: dict | None = None,
            extra=(), start_timeout: float = 120.0):
    """JupyterLab on ``root``/notebooks until the block ends; yields a Server."""
    tmp.mkdir(parents=True, exist_ok=True)
    full_env = lab.prepare(root, home=tmp / "jupyter", settings=settings)
    for var, sub in (("JUPYTER_CONFIG_DIR", "user-config"), ("JUPYTERLAB_SETTINGS_DIR", "user-settings"),
                     ("JUPYTERLAB_WORKSPACES_DIR", "workspaces"), ("JUPYTER_RUNTIME_DIR", "runtime")):
        full_env[var] = str(tmp / sub)
    full_env.update(env or {})
    port, token = free_port(), secrets.token_hex(16)
    cmd = lab.command(root, port=port, token=token, open_browser=False,
                      extra=["--ServerApp.ip=127.0.0.1", *extra])
    log = tmp / "jupyterlab.log"
    with open(log, "w") as out:
        # its own process group: the kernels it starts go with it at the end
        proc = subprocess.Popen(cmd, env=full_env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    server = Server(f"http://127.0.0.1:{port}", token, log, proc)
    try:
        deadline = time.monotonic() + start_timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited ({proc.returncode}) before it served:\n"
                                   + server.log_tail())
            try:
                server.api("/api/status")
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"JupyterLab did not answer within {start_timeout:.0f} s:\n"
                                       + server.log_tail()) from None
                time.sleep(0.3)
        yield server
    finally:
        _stop(server)


def _stop(server: Server) -> None:
    """Shut the server down through its API (it stops its kernels), then make sure: its
    process group gets SIGTERM, then SIGKILL."""
    if server.proc.poll() is None:
        with contextlib.suppress(Exception):
            server.api("/api/shutdown", method="POST")
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.proc.wait(timeout=15)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(server.proc.pid, sig)
        except ProcessLookupError:
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.proc.wait(timeout=5)
