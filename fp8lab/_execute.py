"""Execute one notebook with papermill (child process of the runner).

Writes a small JSON result: ok, and on failure the cell index and the error, so the
runner can list every failure without parsing tracebacks.
"""

from __future__ import annotations

import argparse
import json
import sys


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--cwd", required=True)
    ap.add_argument("--kernel", default="python3")
    ap.add_argument("--params", default="{}")
    ap.add_argument("--result", required=True)
    a = ap.parse_args(argv)
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
