"""python -m fp8lab.peers status | build marlin|deepgemm|vllm-marlin|vllm-cutlass|vllm-quant|sglang-quant |
probe-marlin | probe-deepgemm | probe-vllm-marlin | probe-vllm-cutlass | probe-vllm-quant | probe-sglang-quant |
check-compile [marlin|deepgemm|vllm-marlin|vllm-cutlass|vllm-quant|sglang-quant] [--arch sm_90] | readme"""

from __future__ import annotations

import argparse
import sys


def _gpu() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


def _build_deepgemm(verbose: bool, variant) -> int:
    """build deepgemm: DeepGEMM's binding from its source (every build its variants need, each in
    its own process, at once; or ``variant``'s alone), then its availability line."""
    from . import build, discover

    if variant is None:
        import subprocess
        try:                                # what every build needs, said once
            build.deepgemm_binding()
            import torch  # noqa: F401
        except (FileNotFoundError, ImportError) as e:
            print(f"cannot build DeepGEMM: {str(e).splitlines()[0] if str(e) else e}", file=sys.stderr)
            return 2
        builds = ("as-is",) + discover.DEEPGEMM_OWN_BUILD
        cmd = [sys.executable, "-m", "fp8lab.peers", "build", "deepgemm"] + (["--verbose"] if verbose else [])
        procs = [subprocess.Popen(cmd + ["--variant", v]) for v in builds]
        rc = max(p.wait() for p in procs)
        if any((discover.deepgemm_build_dir(v) / "deep_gemm").glob("_C*.so") for v in builds):
            a = discover.availability("peer_deepgemm")
            used = discover.DEEPGEMM_CHOICE.get("variant", "as-is")
            print(f"DeepGEMM: importable ({used}): {a.version}" if a.ok else f"DeepGEMM: {a.reason}")
        return rc
    try:
        out = build.build_deepgemm(verbose=verbose, variant=variant)
    except (FileNotFoundError, ImportError, ValueError, RuntimeError, OSError) as e:
        print(f"cannot build DeepGEMM ({variant}): {str(e).splitlines()[0] if str(e) else e}", file=sys.stderr)
        return 2
    print(f"built DeepGEMM ({variant}) into {out}")
    return 0


def _build_source_peer(module: str, what: str, verbose: bool) -> int:
    """build vllm-marlin | vllm-cutlass | vllm-quant: a vLLM peer from its unpacked source (the
    module's ``build``), then its probe line on a GPU; one line and 2 when it cannot be built."""
    import importlib

    mod = importlib.import_module(f"{__package__}.{module}")
    try:
        so = mod.build(verbose=verbose)
    except Exception as e:  # noqa: BLE001 - no source, torch or headers; a failed compile: one line
        print(f"cannot build {what}: {str(e).splitlines()[0] if str(e) else e}", file=sys.stderr)
        return 2
    ok, line = mod.probe() if _gpu() else (None, "no GPU: not probed")
    print(f"built {what} into {so.parent}; probe: {line}")
    return 0 if ok is not False else 1


def _compile_report(check, line) -> int:
    """check-compile of a vLLM peer: ``check()`` (its compile_check), then ``line(result)`` and the
    compiler's errors; one line and 2 when it cannot run (no source, torch headers or CUTLASS)."""
    try:
        r = check()
    except Exception as e:  # noqa: BLE001 - one line
        print(str(e).splitlines()[0], file=sys.stderr)
        return 2
    print(f"{'ok' if r['ok'] else 'FAILED'}: {line(r)}\n{r['command']}")
    for ln in r["errors"]:
        print(ln)
    return 0 if r["ok"] else 1


def _check_vllm_quant(args) -> int:
    """check-compile vllm-quant: vLLM's quantiser file and fp8lab's binding, its kernels in the SASS."""
    from . import vllm_quant

    return _compile_report(lambda: vllm_quant.compile_check(torch_include=args.torch_include, arch=args.arch or "sm_90"),
                           lambda r: f"vLLM's {vllm_quant.CU_SOURCES[0]} and fp8lab's binding in {r['seconds']:.1f} s; "
                                     f"quantiser kernels in its SASS: {len(r['kernels'])}")


def _check_sglang_quant(args) -> int:
    """check-compile sglang-quant: fp8lab's entry with SGLang's quantiser header for sm_90a, its kernels in the SASS."""
    from . import sglang_quant

    return _compile_report(lambda: sglang_quant.compile_check(),
                           lambda r: f"SGLang's {sglang_quant.KERNEL_HEADER} with fp8lab's entry in {r['seconds']:.1f} s; "
                                     f"quantiser kernels in its SASS: {len(r['kernels'])}")


def _check_vllm_cutlass(args) -> int:
    """check-compile vllm-cutlass: vLLM's blockwise sm90 source for sm_90a, and its GEMM kernels in the SASS."""
    from . import vllm_cutlass

    return _compile_report(lambda: vllm_cutlass.compile_check(torch_include=args.torch_include,
                                                              arch=args.arch or "sm_90a"),
                           lambda r: f"vLLM's {vllm_cutlass.CU_SOURCES[0]} in {r['seconds']:.1f} s; CUTLASS GEMM "
                                     f"kernels in its SASS: {len(r['kernels'])}")


def _check_vllm_marlin(args) -> int:
    """check-compile vllm-marlin: the GEMM's host file and one kernel file, and the link between them."""
    from . import vllm_marlin

    try:
        r = vllm_marlin.compile_check(torch_include=args.torch_include, arch=args.arch or "sm_90")
    except (FileNotFoundError, ImportError, OSError) as e:
        print(str(e).splitlines()[0], file=sys.stderr)
        return 2
    print(f"{'ok' if r['ok'] else 'FAILED'}: vLLM Marlin's gptq_marlin.cu and {vllm_marlin.CHECK_KERNEL} in "
          f"{r['seconds']:.1f} s; FP8 Marlin kernels the GEMM launches: {r['referenced']}, not defined with external "
          f"linkage by the kernel file: {len(r['unresolved'])}\n{r['command']}")
    for ln in r["errors"] + r["unresolved"][:5]:
        print(ln)
    return 0 if r["ok"] else 1


def _check_deepgemm(args) -> int:
    """check-compile deepgemm: one JIT kernel (nvcc, cubin) and the binding (g++ -c)."""
    from . import build

    rc = 0
    try:
        checks = (("one JIT kernel (sm_90 1D2D FP8 GEMM)", lambda: build.deepgemm_jit_check(args.arch or "sm_90a")),
                  ("its binding csrc/python_api.cpp (compile only)", lambda: build.deepgemm_compile_check(
                      torch_include=args.torch_include, extra_includes=args.include)))
        for what, check in checks:
            r = check()
            print(f"{'ok' if r['ok'] else 'FAILED'}: DeepGEMM's {what} in {r['seconds']:.1f} s\n{r['command']}")
            for ln in r["errors"]:
                print(ln)
            rc = rc or (0 if r["ok"] else 1)
    except (FileNotFoundError, ImportError, RuntimeError) as e:      # no source, torch headers or CUTLASS
        print(str(e).splitlines()[0], file=sys.stderr)
        return 2
    return rc


def main(argv=None) -> int:
    import logging

    # torch.utils.cpp_extension logs "No CUDA runtime is found, using CUDA_HOME=..." when imported on a
    # box without a GPU: a second line before this CLI's one line of refusal (the builds need nvcc,
    # which they check themselves and say so)
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    ap = argparse.ArgumentParser(prog="python -m fp8lab.peers", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("status", help="every peer: here or not, version, licence, install line")
    b = sub.add_parser("build", help="build a peer from its own source (marlin, deepgemm, vllm-marlin, vllm-cutlass, "
                       "vllm-quant, sglang-quant)")
    b.add_argument("what", choices=["marlin", "deepgemm", "vllm-marlin", "vllm-cutlass", "vllm-quant", "sglang-quant"])
    b.add_argument("--verbose", action="store_true")
    b.add_argument("--variant", help="one build only (default: every variant, each in its own process)")
    pm = sub.add_parser("probe-marlin", help="one small checked Marlin multiply (run in its own process)")
    pm.add_argument("--variant", default="as-is")
    sub.add_parser("probe-vllm-marlin", help="small checked FP8 / INT8 / INT4 multiplies of vLLM's Marlin built "
                   "here (run in its own process)")
    sub.add_parser("probe-vllm-cutlass", help="one small checked multiply of vLLM's CUTLASS blockwise GEMM "
                   "built here (run in its own process)")
    sub.add_parser("probe-vllm-quant", help="one small checked quantisation of vLLM's CUDA per-token-group "
                   "quantiser built here (run in its own process)")
    sub.add_parser("probe-sglang-quant", help="one small checked quantisation of SGLang's per-token-group "
                   "quantiser built here (run in its own process)")
    pd_ = sub.add_parser("probe-deepgemm", help="one small checked DeepGEMM multiply (run in its own process)")
    pd_.add_argument("--variant", default="as-is")
    c = sub.add_parser("check-compile", help="compile a peer's source alone (no GPU): Marlin's kernel file "
                       "with nvcc; DeepGEMM's binding with g++ (compile only) and one of its JIT's Hopper kernels; "
                       "vLLM Marlin's GEMM and its bf16 FP8 kernel file, and the link between them; "
                       "vLLM's CUTLASS blockwise GEMM for sm_90a; vLLM's CUDA quantiser and fp8lab's binding; "
                       "SGLang's quantiser with fp8lab's entry for sm_90a")
    c.add_argument("what", nargs="?", default="marlin", choices=["marlin", "deepgemm", "vllm-marlin",
                                                                 "vllm-cutlass", "vllm-quant", "sglang-quant"])
    c.add_argument("--arch", default=None, help="default sm_90 (Marlin), sm_90a (DeepGEMM's JIT, vLLM CUTLASS)")
    c.add_argument("--torch-include", default=None, help="DeepGEMM, vLLM Marlin, vLLM CUTLASS: torch's headers "
                   "when torch does not import")
    c.add_argument("--include", action="append", default=[],
                   help="DeepGEMM: a header folder searched last (cuBLAS / cuSPARSE / NVRTC headers), repeatable")
    sub.add_parser("readme", help="rewrite the README's peers table from the catalog and data/")
    args = ap.parse_args(argv)
    if args.cmd == "readme":
        from .. import paths
        from . import render_readme

        path = paths.repo_root() / "README.md"
        path.write_text(render_readme(path.read_text()))
        print(f"rewrote the peers table in {path}")
        return 0
    if args.cmd == "status":
        from . import table

        import pandas as pd

        with pd.option_context("display.max_colwidth", 90, "display.width", 250):
            print(table()[["peer", "here", "version", "reason", "licence", "install"]].to_string(index=False))
        return 0
    if args.cmd == "build" and args.what == "vllm-marlin":
        return _build_source_peer("vllm_marlin", "vLLM Marlin", args.verbose)
    if args.cmd == "build" and args.what == "vllm-cutlass":
        return _build_source_peer("vllm_cutlass", "vLLM's CUTLASS blockwise GEMM", args.verbose)
    if args.cmd == "build" and args.what == "vllm-quant":
        return _build_source_peer("vllm_quant", "vLLM's quantiser", args.verbose)
    if args.cmd == "build" and args.what == "sglang-quant":
        return _build_source_peer("sglang_quant", "SGLang's quantiser", args.verbose)
    if args.cmd == "probe-sglang-quant":
        from . import probe

        return probe.sglang_quant()
    if args.cmd == "probe-vllm-quant":
        from . import probe

        return probe.vllm_quant()
    if args.cmd == "probe-vllm-cutlass":
        from . import probe

        return probe.vllm_cutlass()
    if args.cmd == "probe-vllm-marlin":
        from . import probe

        return probe.vllm_marlin()
    if args.cmd == "build" and args.what == "deepgemm":
        return _build_deepgemm(args.verbose, args.variant)
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
    if args.cmd == "probe-deepgemm":
        from . import probe

        return probe.deepgemm(args.variant)
    if args.what == "deepgemm":
        return _check_deepgemm(args)
    if args.what == "vllm-marlin":
        return _check_vllm_marlin(args)
    if args.what == "vllm-cutlass":
        return _check_vllm_cutlass(args)
    if args.what == "vllm-quant":
        return _check_vllm_quant(args)
    if args.what == "sglang-quant":
        return _check_sglang_quant(args)
    from . import build

    try:
        r = build.compile_check(args.arch or "sm_90")
    except FileNotFoundError as e:
        print(str(e), file=sys.stderr)
        return 2
    print(f"{'ok' if r['ok'] else 'FAILED'}: Marlin's kernel for {r['arch']} in {r['seconds']:.1f} s\n{r['command']}")
    for ln in r["errors"]:
        print(ln)
    return 0 if r["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
