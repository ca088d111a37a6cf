"""Hardware counters through Nsight Compute: run a callable or a script under
``ncu``, keep the ``.ncu-rep``, read it back with ``ncu_report`` into tables.

* ``ncu_command`` builds the command line: ``--clock-control none`` unless asked
  otherwise (ncu's default would lock the clocks to base; we measure the card as
  we find it), a kernel-name regex and/or NVTX push/pop filter, chosen sections
  and metrics, ``--target-processes all`` (the workload runs in a child Python).
* ``profile`` runs it. A callable is run by name (``module:function``) in a child
  interpreter (``python -m fp8lab.toolchain.profile run module:function``), so it must live
  in an importable module, not in a notebook's ``__main__``.
* ``read_report`` returns one row per profiled kernel (DRAM throughput %, DRAM
  bytes/s and bytes read/written, issue-active %, issue-slots-busy %, registers,
  local-memory bytes, instructions executed, duration, SM clock);
  ``read_opcodes`` the executed instructions per SASS opcode (warp-level
  ``sass__inst_executed_per_opcode``; thread-level
  ``sass__thread_inst_executed_true_per_opcode`` where collected).
* The committed test fixture (a small report of three known kernels) is written by
  ``python -m fp8lab.kernels.ncu_fixture OUT.ncu-rep`` on a GPU box with ncu.

Reports are read on any machine with the ``ncu-report`` wheel (module
``ncu_report``); on a box with only Nsight Compute, its ``extras/python`` is used.
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Optional, Sequence, Union

__all__ = ["DEFAULT_SECTIONS", "DEFAULT_METRICS", "STALL_REASONS", "STALL_METRICS", "stall_metric", "ncu_command", "profile", "read_report",
           "read_opcodes", "load_report", "print_tables"]

#: sections: throughput summary, launch config, per-opcode instruction counts.
#: Kept few so a report stays small (the committed fixture must be < 1 MB).
DEFAULT_SECTIONS = ("SpeedOfLight", "LaunchStats", "InstructionStats")

#: metrics the tables read, requested by name so no section is needed for them
DEFAULT_METRICS = (
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__bytes.sum.per_second",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "smsp__issue_active.avg.pct_of_peak_sustained_active",
    "sm__inst_issued.avg.pct_of_peak_sustained_active",
    "launch__registers_per_thread",
    "l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum",
    "l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum",
    "smsp__inst_executed.sum",
    "gpu__time_duration.sum",
    "sm__cycles_elapsed.avg.per_second",
    "sass__inst_executed_per_opcode",
    "sass__thread_inst_executed_true_per_opcode",
)

CLOCK_CONTROL = ("none", "base", "reset")

# table column -> metric names to try, first present wins
_COLUMNS = {
    "dram_pct": ("dram__throughput.avg.pct_of_peak_sustained_elapsed",
                 "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"),
    "dram_bytes_per_s": ("dram__bytes.sum.per_second",),
    "dram_read_bytes": ("dram__bytes_read.sum",),
    "dram_write_bytes": ("dram__bytes_write.sum",),
    "issue_active_pct": ("smsp__issue_active.avg.pct_of_peak_sustained_active",
                         "sm__issue_active.avg.pct_of_peak_sustained_elapsed"),
    "issue_slots_busy_pct": ("sm__inst_issued.avg.pct_of_peak_sustained_active",),
    "registers": ("launch__registers_per_thread",),
    "inst_executed": ("smsp__inst_executed.sum",),
    "duration_s": ("gpu__time_duration.sum",),          # ns in the report
    "sm_clock_hz": ("sm__cycles_elapsed.avg.per_second",),
    "grid_size": ("launch__grid_size",),
    "block_size": ("launch__block_size",),
    "device": ("device__attribute_display_name",),
}
#: warp stall reasons, as ncu names them in
#: smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio: warps waiting for that
#: reason per issued instruction (their sum is ncu's "warp cycles per issued instruction").
#: read_report puts each in a column stall_<reason> (NaN where the report lacks it); ask for
#: them with metrics=DEFAULT_METRICS + STALL_METRICS.
STALL_REASONS = ("long_scoreboard", "barrier", "wait", "short_scoreboard", "math_pipe_throttle",
                 "mio_throttle", "lg_throttle", "tex_throttle", "not_selected", "selected",
                 "no_instruction", "branch_resolving", "dispatch_stall", "membar", "imc_miss", "drain",
                 "misc", "sleeping", "gmma")


def stall_metric(reason: str) -> str:
    """ncu's metric name of one warp stall reason (see STALL_REASONS)."""
    if reason not in STALL_REASONS:
        raise ValueError(f"unknown stall reason {reason!r}; known: {STALL_REASONS}")
    return f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio"


STALL_METRICS = tuple(stall_metric(r) for r in STALL_REASONS)
_LOCAL_SECTORS = ("l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum",
                  "l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum")
_SECTOR_BYTES = 32


# ---------------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------------
def ncu_command(target: Sequence[str], output: Union[str, Path], *,
                kernel_regex: Optional[str] = None, nvtx_include: Sequence[str] = (),
                sections: Sequence[str] = DEFAULT_SECTIONS,
                metrics: Sequence[str] = DEFAULT_METRICS, clock_control: str = "none",
                launch_skip: Optional[int] = None, launch_count: Optional[int] = None,
                import_source: bool = False, ncu: str = "ncu",
                extra: Sequence[str] = ()) -> list:
    """The ncu argv that profiles ``target`` (an argv list) into ``output``.

    ``output`` may end in ``.ncu-rep`` or not (ncu appends it). ``nvtx_include``
    entries use ncu's syntax: ``"name/"`` is a push/pop range, ``"domain@name"`` a
    start/end range.
    """
    target = list(target)
    if not target:
        raise ValueError("target must be a non-empty argv list (the program ncu runs)")
    if clock_control not in CLOCK_CONTROL:
        raise ValueError(f"clock_control must be one of {CLOCK_CONTROL}, got {clock_control!r}")
    if isinstance(nvtx_include, str):
        nvtx_include = [nvtx_include]
    if isinstance(sections, str):
        sections = [sections]
    if isinstance(metrics, str):
        metrics = [metrics]
    for name, v in (("launch_skip", launch_skip), ("launch_count", launch_count)):
        if v is not None and (not isinstance(v, int) or v < 0 or (name == "launch_count" and v == 0)):
            raise ValueError(f"{name} must be a non-negative int (launch_count >= 1), got {v!r}")
    if kernel_regex is not None and not kernel_regex:
        raise ValueError("kernel_regex must be a non-empty regular expression or None")
    out = str(output)
    if out.endswith(".ncu-rep"):
        out = out[: -len(".ncu-rep")]
    cmd = [ncu, "--clock-control", clock_control, "--target-processes", "all",
           "--force-overwrite", "-o", out, "--import-source", "yes" if import_source else "no"]
    if kernel_regex:
        cmd += ["--kernel-name", f"regex:{kernel_regex}"]
    if nvtx_include:
        cmd += ["--nvtx"]
        for r in nvtx_include:
            cmd += ["--nvtx-include", r]
    if launch_skip is not None:
        cmd += ["--launch-skip", str(launch_skip)]
    if launch_count is not None:
        cmd += ["--launch-count", str(launch_count)]
    for s in sections:
        cmd += ["--section", s]
    if metrics:
        cmd += ["--metrics", ",".join(metrics)]
    cmd += list(extra)
    return cmd + target


def _target_argv(target) -> list:
    """argv for a script path, an argv list, a 'module:function' string or a callable."""
    if callable(target):
        mod = getattr(target, "__module__", None)
        qual = getattr(target, "__qualname__", "")
        if not mod or mod == "__main__" or "<" in qual:
            raise ValueError("a profiled callable must be importable (defined at module level in "
                             "an importable module, not in __main__ or as a lambda/closure); "
                             f"got {target!r}")
        target = f"{mod}:{qual}"
    if isinstance(target, (list, tuple)):
        return [str(t) for t in target]
    if isinstance(target, (str, Path)):
        t = str(target)
        if t.endswith(".py"):
            if not Path(t).is_file():
                raise ValueError(f"script {t} does not exist")
            return [sys.executable, t]
        if ":" in t:
            return [sys.executable, "-m", "fp8lab.toolchain.profile", "run", t]
    raise ValueError("target must be a .py script, an argv list, 'module:function' or an "
                     f"importable callable; got {target!r}")


def profile(target, output: Union[str, Path], *, timeout: float = 600, env=None,
            **ncu_kwargs) -> Path:
    """Profile ``target`` under ncu; returns the path of the written ``.ncu-rep``.

    ``ncu_kwargs`` go to ``ncu_command`` (kernel_regex, nvtx_include, sections,
    metrics, clock_control, launch_skip, launch_count ...).
    """
    from .tools import find_tool

    ncu = str(find_tool("ncu"))
    out = Path(output)
    if out.suffix != ".ncu-rep":
        out = out.with_name(out.name + ".ncu-rep")
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = ncu_command(_target_argv(target), out, ncu=ncu, **ncu_kwargs)
    child_env = dict(os.environ if env is None else env)
    # the child must import this checkout's fp8lab even when run from elsewhere
    root = str(Path(__file__).resolve().parents[2])
    child_env["PYTHONPATH"] = root + os.pathsep + child_env.get("PYTHONPATH", "")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=child_env)
    if proc.returncode != 0 or not out.is_file():
        raise RuntimeError(f"ncu failed (exit {proc.returncode}): {' '.join(cmd)}\n"
                           f"--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-4000:]}")
    return out


# ---------------------------------------------------------------------------------
# reading reports
# ---------------------------------------------------------------------------------
def profiled_once_each(calls: Sequence[Callable], *, warmups: int = 1) -> None:
    """An ncu workload's body: every call ``warmups`` times (module loads, library heuristics,
    autotuning), then each once between cudaProfilerStart and cudaProfilerStop, synchronised
    after each, so the report holds one launch (range) per call."""
    import torch

    for c in calls:
        for _ in range(warmups):
            c()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for c in calls:
        c()
        torch.cuda.synchronize()
    torch.cuda.profiler.stop()


def _import_ncu_report():
    try:
        return importlib.import_module("ncu_report")
    except ImportError:
        pass
    # Nsight Compute ships the module in <install>/extras/python
    from .tools import find_tool

    try:
        ncu = find_tool("ncu")
    except Exception as e:
        raise ImportError("ncu_report is not installed (pip install ncu-report) and no Nsight "
                          "Compute installation was found") from e
    import glob

    cands = [ncu.parent / "extras" / "python", ncu.parent.parent / "extras" / "python"]
    # /usr/local/cuda/bin/ncu is often a wrapper script, not a link, next to the install
    for pattern in ("/usr/local/cuda*/nsight-compute*/extras/python",
                    "/opt/nvidia/nsight-compute/*/extras/python",
                    str(ncu.parent.parent / "nsight-compute*" / "extras" / "python")):
        cands += [Path(p) for p in sorted(glob.glob(pattern), reverse=True)]
    for cand in cands:
        if (cand / "ncu_report.py").is_file():
            sys.path.insert(0, str(cand))
            return importlib.import_module("ncu_report")
    raise ImportError(f"ncu_report not found (pip install ncu-report); looked beside {ncu}")


def load_report(path: Union[str, Path]):
    """An ncu_report context for a .ncu-rep file."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"report {p} does not exist")
    return _import_ncu_report().load_report(str(p))


def _actions(ctx):
    for ri in range(ctx.num_ranges()):
        rng = ctx.range_by_idx(ri)
        for ai in range(rng.num_actions()):
            yield ri, ai, rng.action_by_idx(ai)


def _value(action, names):
    for n in names:
        m = action.metric_by_name(n)
        if m is None:
            continue
        v = m.value()
        if v is not None:
            return v
    return None


def _num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def read_report(path: Union[str, Path]):
    """One row per profiled kernel. Metrics the report lacks are NaN (a report
    collected with other sections); ``missing`` lists them per row."""
    import pandas as pd

    ctx = load_report(path)
    rows = []
    for ri, ai, a in _actions(ctx):
        row = {"range": ri, "action": ai, "kernel": a.name()}
        try:
            row["kernel_mangled"] = a.name(a.NameBase_MANGLED)
        except Exception:
            row["kernel_mangled"] = None
        missing = []
        for col, names in _COLUMNS.items():
            v = _value(a, names)
            if v is None:
                missing.append(col)
            row[col] = v if col == "device" else _num(v)
        if not math.isnan(row["duration_s"]):
            row["duration_s"] *= 1e-9
        secs = [_value(a, (n,)) for n in _LOCAL_SECTORS]
        if any(s is None for s in secs):
            missing.append("local_bytes")
            row["local_bytes"] = math.nan
        else:
            row["local_bytes"] = float(sum(secs)) * _SECTOR_BYTES
        row["dram_bytes"] = row["dram_read_bytes"] + row["dram_write_bytes"]
        for r in STALL_REASONS:            # optional: not counted as missing
            v = _value(a, (stall_metric(r),))
            row[f"stall_{r}"] = math.nan if v is None else _num(v)
        row["missing"] = ",".join(missing)
        rows.append(row)
    return pd.DataFrame(rows)


def _instances(metric):
    """(label, value) pairs of an instanced metric: the labels are the metric's
    correlation ids (the opcode names for the per-opcode metrics)."""
    if metric is None or metric.num_instances() == 0:
        return []
    ids = metric.correlation_ids() if metric.has_correlation_ids() else None
    out = []
    for i in range(metric.num_instances()):
        label = ids.value(i) if ids is not None else str(i)
        out.append((str(label), _num(metric.value(i))))
    return out


def read_opcodes(path: Union[str, Path]):
    """Executed instructions per SASS opcode, one row per (kernel, opcode):
    ``warp_inst`` from sass__inst_executed_per_opcode, ``thread_inst`` from
    sass__thread_inst_executed_true_per_opcode (NaN where not collected)."""
    import pandas as pd

    ctx = load_report(path)
    rows = []
    for ri, ai, a in _actions(ctx):
        warp = dict(_instances(a.metric_by_name("sass__inst_executed_per_opcode")))
        thread = dict(_instances(a.metric_by_name("sass__thread_inst_executed_true_per_opcode")))
        for op in sorted(set(warp) | set(thread), key=lambda o: -warp.get(o, 0)):
            rows.append({"range": ri, "action": ai, "kernel": a.name(), "opcode": op,
                         "warp_inst": warp.get(op, math.nan),
                         "thread_inst": thread.get(op, math.nan)})
    return pd.DataFrame(rows, columns=["range", "action", "kernel", "opcode", "warp_inst",
                                       "thread_inst"])


# ---------------------------------------------------------------------------------
# the child entry point
# ---------------------------------------------------------------------------------
def _resolve(spec: str) -> Callable:
    if ":" not in spec:
        raise ValueError(f"expected 'module:function', got {spec!r}")
    mod, qual = spec.split(":", 1)
    obj = importlib.import_module(mod)
    for part in qual.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"{spec} is not callable")
    return obj


def print_tables(path):
    import pandas as pd

    with pd.option_context("display.width", 200, "display.max_columns", 30,
                           "display.max_colwidth", 40):
        df = read_report(path)
        print(df.drop(columns=["kernel_mangled"]).to_string())
        ops = read_opcodes(path)
        print(ops.groupby("kernel").head(6).to_string())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fp8lab.toolchain.profile", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="call module:function (the child side of profile())")
    r.add_argument("spec")
    d = sub.add_parser("read", help="print the tables of a report")
    d.add_argument("report")
    args = ap.parse_args(argv)
    if args.cmd == "run":
        _resolve(args.spec)()
        return 0
    print_tables(args.report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
