"""python -m fp8lab.peers status | build marlin | check-compile [--arch sm_90] | readme"""

from __future__ import annotations

import argparse
import sys


def _gpu() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fp8lab.peers", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("status", help="every peer: here or not, version, licence, install line")
    b = sub.add_parser("build", help="build a peer from its own source (marlin)")
    b.add_argument("what", choices=["marlin"])
    b.add_argument("--verbose", action="store_true")
    b.add_argument("--variant", help="one build only (default: every variant, each in its own process)")
    pm = sub.add_parser("probe-marlin", help="one small checked Marlin multiply (run in its own process)")
    pm.add_argument("--variant", default="as-is")
    c = sub.add_parser("check-compile", help="compile Marlin's kernel file alone with nvcc (no GPU)")
    c.add_argument("--arch", default="sm_90")
    sub.add_parser("readme", help="rewrite the README's peers table from the catalog")
    args = ap.parse_args(argv)
    if args.cmd == "readme":
        from .. import paths
        from . import README_BEGIN, README_END, readme_table

        path = paths.repo_root() / "README.md"
        text = path.read_text()
        i, j = text.index(README_BEGIN), text.index(README_END)
        path.write_text(text[:i] + README_BEGIN + "\n" + readme_table() + text[j:])
        print(f"rewrote the peers table in {path}")
        return 0
    if args.cmd == "status":
        from . import table

        import pandas as pd

        with pd.option_context("display.max_colwidth", 90, "display.width", 250):
            print(table()[["peer", "here", "version", "reason", "licence", "install"]].to_string(index=False))
        return 0
    if args.cmd == "build":
        from . import build, discover

        if args.variant is None:
            # each variant in its own process: torch's JIT loader renames a second extension of
            # the same name built in one process (marlin_cuda_v1), which Marlin cannot import
            import subprocess
            rc = 0
            for variant in discover.MARLIN_VARIANTS:
                cmd = [sys.executable, "-m", "fp8lab.peers", "build", "marlin", "--variant", variant]
                rc = max(rc, subprocess.run(cmd + (["--verbose"] if args.verbose else [])).returncode)
            return rc
        variant = args.variant
        try:
            out = build.build_marlin(verbose=args.verbose, variant=variant)
        except (FileNotFoundError, ImportError, ValueError, RuntimeError) as e:
            print(f"cannot build Marlin ({variant}): {str(e).splitlines()[0] if str(e) else e}", file=sys.stderr)
            return 2
        ok, line = discover.probe_marlin(variant) if _gpu() else (None, "no GPU: not probed")
        print(f"built Marlin ({variant}) into {out}; probe: {line}")
        return 0
    if args.cmd == "probe-marlin":
        from . import probe

        return probe.marlin(args.variant)
    from . import build

    try:
        r = build.compile_check(args.arch)
    except FileNotFoundError as e:
        print(str(e), file=sys.stderr)
        return 2
    print(f"{'ok' if r['ok'] else 'FAILED'}: Marlin's kernel for {r['arch']} in {r['seconds']:.1f} s\n{r['command']}")
    for ln in r["errors"]:
        print(ln)
    return 0 if r["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
