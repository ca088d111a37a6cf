"""Execute one notebook with papermill (child process of the runner).

Writes a small JSON result: ok, and on failure the cell index and the error, so the
runner can list every failure without parsing tracebacks.

Nothing it starts outlives it or the runner: on SIGTERM or SIGHUP (the runner stopping
it), and when the runner is gone (``--parent-pid`` no longer its parent: the runner was
killed outright), it kills the kernel's process group (the kernel runs in a session of
its own, so the runner's kill of this process group does not reach it), resets every
clock lock recorded in $FP8LAB_CLOCK_STATE and exits.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time

_CLEANING = threading.Lock()


def _say(text: str) -> None:
    # os.write, not print: this may run in a signal handler while the main thread prints
    try:
        os.write(1, f"fp8lab executor: {text}\n".encode())
    except OSError:
        pass


def _stop_everything(code: int, why: str) -> None:
    """Kill the kernel (and anything else this process started), release the clock locks
    recorded for this notebook, exit. Runs once: a second caller returns and lets the
    first finish (it exits the process)."""
    if not _CLEANING.acquire(blocking=False):
        return
    from fp8lab.measure import clocks
    from fp8lab.toolchain import procs
    try:
        _say(f"{why}: stopping the kernel")
        for pid in procs.children(os.getpid()):
            procs.kill_group(pid, procs.start_time(pid))
        state = os.environ.get(clocks.STATE_ENV)
        if state:
            for line in clocks.release_recorded(state):
                _say(line)
    finally:
        os._exit(code)


def _guard(parent_pid: int | None) -> None:
    def on_signal(signum, frame):
        _stop_everything(128 + signum, f"got {signal.Signals(signum).name}")

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    if parent_pid is None:
        return

    def watch():
        while True:
            if os.getppid() != parent_pid:
                _stop_everything(1, f"the runner (pid {parent_pid}) is gone")
                return
            time.sleep(0.25)

    threading.Thread(target=watch, name="fp8lab-parent-watch", daemon=True).start()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--cwd", required=True)
    ap.add_argument("--kernel", default="python3")
    ap.add_argument("--params", default="{}")
    ap.add_argument("--result", required=True)
    ap.add_argument("--parent-pid", type=int, default=None,
                    help="the runner's pid: when it is no longer this process's parent, stop")
    a = ap.parse_args(argv)
    _guard(a.parent_pid)
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    result = {"ok": True}
    try:
        pm.execute_notebook(a.input, a.output, parameters=json.loads(a.params),
                            kernel_name=a.kernel, cwd=a.cwd, progress_bar=False,
                            log_output=True, request_save_on_cell_execute=True)
    except PapermillExecutionError as exc:
        result = {"ok": False, "cell": exc.cell_index,
                  "error": f"{exc.ename}: {str(exc.evalue).strip().splitlines()[0] if str(exc.evalue).strip() else ''}"}
    except Exception as exc:  # noqa: BLE001 - report anything that stopped the run
        result = {"ok": False, "cell": None, "error": f"{type(exc).__name__}: {exc}"}
    with open(a.result, "w") as f:
        json.dump(result, f)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
