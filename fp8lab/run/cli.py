"""Command line: ``python -m fp8lab run|build|census|claims|gallery|verify|walltimes|env|list|lab``."""

from __future__ import annotations

import argparse
import json
import signal
import sys


def _cmd_run(a) -> int:
    from . import runner
    return runner.run(only=a.only, params=a.param, mode=a.mode, run_dir=a.out,
                      timeout=a.timeout, kernel=a.kernel, progress=not a.no_progress,
                      gpus=a.gpus, stagger_s=a.stagger, cluster=a.cluster, smoke=a.smoke,
                      host_lane=not a.no_host_lane, connect_timeout=a.connect_timeout,
                      gpu_slots=a.gpu_slots)


def _cmd_list(a) -> int:
    from . import runner
    for s in runner.load_manifest():
        claims = ", ".join(s.claims) or "-"
        print(f"{s.id}  {s.name:<24} {s.kind:<5} claims: {claims:<24} {s.title}")
    return 0


def _cmd_arm(a) -> int:
    from . import where
    return where.main(a.id)


def _check_or_update(current: bool, check: bool, what: str, command: str) -> int:
    """Shared tail of the generated-file commands: with --check, 1 and a hint if stale."""
    if check:
        if not current:
            print(f"{what} is stale: run `python -m fp8lab {command}`", file=sys.stderr)
            return 1
        print(f"{what} is current")
        return 0
    print(f"{what} " + ("already current" if current else "regenerated"))
    return 0


def _cmd_claims(a) -> int:
    from ..report import claims
    return _check_or_update(claims.update_readme(check=a.check), a.check, "README ledger", "claims")


def _cmd_gallery(a) -> int:
    from . import gallery
    return _check_or_update(gallery.update(check=a.check), a.check, "figures/README.md", "gallery")


def _cmd_walltimes(a) -> int:
    from ..report import walltimes
    try:
        path = walltimes.record(a.run_dir)
    except walltimes.RecordError as exc:
        print(f"fp8lab walltimes: {exc}", file=sys.stderr)
        return 2
    print(f"recorded {path}; `python -m fp8lab claims` puts it in the README")
    return 0


def _cmd_verify(a) -> int:
    from ..report import verify
    try:
        return verify.main(devices=a.device, notebooks=a.notebook, verbose=a.verbose)
    except (verify.VerifyError, RuntimeError) as exc:   # RuntimeError: no checkout found
        print(f"fp8lab: error: {exc}", file=sys.stderr)
        return 2


def _cmd_env(a) -> int:
    from ..report import provenance
    info = {"git": provenance.git_info(), "versions": provenance.versions(),
            "host": provenance.host_info(), "gpus_visible": provenance.gpu_count()}
    print(json.dumps(info, indent=2))
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["lab"]:
        # its arguments, known or not, go on to jupyter lab: argparse would refuse the unknown
        from . import lab
        return lab.main(argv[1:])
    ap = argparse.ArgumentParser(prog="python -m fp8lab", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="execute notebooks headless with papermill")
    r.add_argument("--only", action="append", metavar="NB",
                   help="notebook id or name (repeatable, or comma-separated)")
    r.add_argument("-p", "--param", nargs=2, action="append", metavar=("NAME", "VALUE"),
                   help="parameter for every selected notebook (NN:NAME for one notebook); "
                        "VALUE is YAML")
    r.add_argument("--mode", default="auto", choices=["auto", "measure", "replot"])
    r.add_argument("--smoke", action="store_true",
                   help="the GPU smoke: every notebook measures with its manifest smoke parameters "
                        "(the smallest sweep touching every arm, check and figure), into the run "
                        "folder only, never data/ or figures/")
    r.add_argument("--no-host-lane", action="store_true",
                   help="on one GPU, run host notebooks one after another with the GPU ones "
                        "instead of beside them")
    r.add_argument("--gpu-slots", type=int, metavar="N",
                   help="GPU notebooks sharing the one GPU at a time: only with --smoke "
                        "(default there 2; their timings are not results)")
    r.add_argument("--out", help="run folder for executed copies (default runs/<time>-<mode>)")
    r.add_argument("--timeout", type=int, help="seconds per notebook (default: the manifest's)")
    r.add_argument("--kernel", default="python3")
    r.add_argument("--no-progress", action="store_true")
    r.add_argument("--gpus", nargs="?", const="all", metavar="all|0,1,...",
                   help="one worker per GPU (CUDA_VISIBLE_DEVICES), notebooks from a shared "
                        "queue (one with after: in the manifest waits for those); bare --gpus "
                        "means all")
    r.add_argument("--stagger", type=float, default=2.0, metavar="S",
                   help="with --gpus: seconds between the workers' first kernel starts (default 2)")
    r.add_argument("--cluster", metavar="ADDRESS|local[:N]",
                   help="run each notebook as a Dask task (pip install 'fp8lab[cluster]'): "
                        "ADDRESS is a scheduler (tcp://host:8786) whose workers run the same "
                        "commit in their own checkout, one per GPU with --resources GPU=1; "
                        "local[:N] starts N such workers here (default: one per GPU). GPU "
                        "notebooks take one GPU slot, host notebooks none; results come back "
                        "into this checkout's data/<device>/ and figures/<device>/")
    r.add_argument("--connect-timeout", type=float, default=30.0, metavar="S",
                   help="with --cluster ADDRESS: seconds for the scheduler to answer (default 30)")
    r.set_defaults(fn=_cmd_run)
    from . import prebuild
    b = sub.add_parser("build", help="build every CUDA extension and cubin the GPU notebooks use, in "
                                     "parallel on this machine's cores (nothing without a GPU)")
    prebuild.add_arguments(b)
    b.set_defaults(fn=prebuild.cli)
    from ..toolchain import binaries
    cs = sub.add_parser("census", help="SASS census of your own binaries (.whl, .so, .cubin): "
                        "activation dtype, weight type, MMA family, kernels, conversion opcodes "
                        "per library and arch; only matching functions are disassembled")
    binaries.add_arguments(cs)
    cs.set_defaults(fn=binaries.cli)
    sub.add_parser("list", help="list the manifest").set_defaults(fn=_cmd_list)
    wa = sub.add_parser("arm", help="everything about one arm from its id: legend, count, kernel sources, entry "
                                    "point, float64 reference, tests, table rows, figures (no id: every arm)")
    wa.add_argument("id", nargs="?", help="an arm id, e.g. gemv_w8a16_fp8")
    wa.set_defaults(fn=_cmd_arm)
    c = sub.add_parser("claims", help="regenerate the README's claims ledger from data/")
    c.add_argument("--check", action="store_true", help="only check that it is current")
    c.set_defaults(fn=_cmd_claims)
    g = sub.add_parser("gallery", help="regenerate figures/README.md from figures/ and data/")
    g.add_argument("--check", action="store_true", help="only check that it is current")
    g.set_defaults(fn=_cmd_gallery)
    v = sub.add_parser("verify", help="check every table in data/: CSV against its sidecar, "
                       "the named commit in git, the recorded source hash against that "
                       "commit's tree, a clean tree")
    v.add_argument("--device", action="append", metavar="KEY",
                   help="only this device's tables (repeatable), e.g. h200, cpu")
    v.add_argument("--notebook", action="append", metavar="NB",
                   help="only this notebook's tables (folder name or id, repeatable)")
    v.add_argument("-v", "--verbose", action="store_true", help="one line per problem")
    v.set_defaults(fn=_cmd_verify)
    sub.add_parser("env", help="print versions, commit and GPUs").set_defaults(fn=_cmd_env)
    sub.add_parser("lab", help="JupyterLab on notebooks/ with this Python's kernel; .py pairs "
                              "open as notebooks (make lab; other arguments go to jupyter lab)")
    w = sub.add_parser("walltimes", help="record how long a `make run` took (README's wall-time line)")
    wsub = w.add_subparsers(dest="what", required=True)
    wr = wsub.add_parser("record", help="add a make-run folder's times to data/<device>/make_run/")
    wr.add_argument("run_dir", help="the run folder (runs/<time>-measure) of a `make run`")
    wr.set_defaults(fn=_cmd_walltimes)
    a = ap.parse_args(argv)
    from .notebooks import UsageError
    try:
        return a.fn(a)
    except UsageError as exc:
        print(f"fp8lab: error: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        from ..report.results import TableError
        if not isinstance(exc, TableError):
            raise
        # a stored table that cannot vouch for itself: its file named, no traceback
        print(f"fp8lab: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        # Ctrl-C, or the runner's SIGTERM / SIGHUP (runner.Stopped): by now the running
        # notebooks are killed and their clock locks reset; one line, the shell's status.
        signum = getattr(exc, "signum", signal.SIGINT)
        what = "the running notebooks were killed" if a.cmd == "run" else "nothing more was done"
        print(f"fp8lab: stopped by {signal.Signals(signum).name}: {what}", file=sys.stderr)
        return 128 + signum
