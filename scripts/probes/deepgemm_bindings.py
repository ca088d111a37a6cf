"""Probe: which loaded library gives DeepGEMM's binding its C++ runtime symbols?

On the shared H200 (2026-12-02) DeepGEMM's build (``python -m fp8lab.peers build deepgemm``)
imports, then its first JIT call dies of SIGSEGV before its JIT writes a file; the same probe
passes with the system libstdc++ preloaded (``LD_PRELOAD=.../libstdc++.so.6``). So a library
loaded before it defines C++ runtime symbols (``std::``, ``operator new``, ``__cxa_*``) that the
dynamic linker binds to it instead of libstdc++.

This runs DeepGEMM's separate-process probe (``python -m fp8lab.peers probe-deepgemm``) with
``LD_DEBUG=bindings`` and reports, from the dynamic linker's own log:

* every C++ runtime symbol bound to a library other than libstdc++ (any binding process-wide),
  by the library that provided it, with the libraries that asked for it;
* the probe's own closing line and exit status, and the same probe with libstdc++ preloaded.

    python scripts/probes/deepgemm_bindings.py [--variant as-is] [--out DIR]

Result on the H200 (torch 2.11.0+cu130, DeepGEMM 2.6.1 @ 54e2261 built with g++ 13.3, commit
fbb9a6b, 2026-12-02): the probe as it is died of SIGSEGV (exit -11). Of the 18 C++ runtime
symbols the binding bound outside libstdc++, 16 are ``std::filesystem`` functions, bound to the
copies torch exports: 11 in ``libtorch_cpu.so`` (``path::_M_split_cmpts``, ``path::operator/=``,
``directory_iterator``, ...) and 5 in ``libtorch.so`` (``create_directories``, ``status``,
``rename``, ``remove``: what DeepGEMM's JIT calls to make its cache folders before it writes a
file); the other two are ``__cxa_atexit`` / ``__cxa_finalize`` in libc. The same probe with
``LD_PRELOAD=/lib/x86_64-linux-gnu/libstdc++.so.6`` passed (``ok: relative error 1.6e-03 at N=256
K=512 M=128``). The binding imported with RTLD_DEEPBIND still died (torch's libraries precede
libstdc++ among its own dependencies); built with libstdc++ linked in statically and
``-Bsymbolic`` it passed (``discover.DEEPGEMM_VARIANTS``).
"""
from __future__ import annotations

import argparse
import collections
import glob
import os
import re
import subprocess
import sys
import tempfile

#: mangled-name prefixes of what libstdc++ / libsupc++ define
CXX_RUNTIME = re.compile(r"^(_ZNSt|_ZNKSt|_ZSt|_ZTISt|_ZTSSt|_ZTVSt|_ZTVN10__cxxabiv|_ZNSs|_ZNSa|_Znw|_Zna|_Zdl|_Zda|"
                         r"__cxa_|__gxx_|_ZN9__gnu_cxx|_ZNK9__gnu_cxx|_ZN10__cxxabiv)")
BINDING = re.compile(r"^\s*(\d+):\s+binding file (\S+) \[\d+\] to (\S+) \[\d+\]: (?:normal|protected) symbol "
                     r"`([^']+)'")


def _probe(variant: str, env: dict, timeout: float = 300) -> tuple[int, str]:
    cmd = [sys.executable, "-m", "fp8lab.peers", "probe-deepgemm", "--variant", variant]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, "FP8LAB_DEEPGEMM_PROBING": "1", "FP8LAB_DEEPGEMM_VARIANT": variant, **env})
    lines = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.strip()]
    return r.returncode, lines[-1][:200] if lines else "(no output)"


def _short(path: str) -> str:
    return os.path.basename(path) or path


def _demangle(syms: list) -> list:
    """c++filt's names for ``syms`` (the mangled ones where it is missing)."""
    try:
        r = subprocess.run(["c++filt"], input="\n".join(syms), capture_output=True, text=True, timeout=30)
        names = r.stdout.splitlines()
        return names if len(names) == len(syms) else syms
    except (OSError, subprocess.SubprocessError):
        return syms


def _libstdcxx() -> str:
    out = subprocess.run(["/sbin/ldconfig", "-p"], capture_output=True, text=True).stdout
    for ln in out.splitlines():
        if "libstdc++.so.6 " in ln and "x86-64" in ln:
            return ln.split("=>")[-1].strip()
    return "/lib/x86_64-linux-gnu/libstdc++.so.6"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variant", default="as-is")
    ap.add_argument("--out", default=None, help="keep the dynamic linker's log here")
    args = ap.parse_args(argv)
    out = args.out or tempfile.mkdtemp(prefix="dg-bindings-")
    os.makedirs(out, exist_ok=True)
    for f in glob.glob(os.path.join(out, "ld.*")):
        os.remove(f)
    rc, line = _probe(args.variant, {"LD_DEBUG": "bindings", "LD_DEBUG_OUTPUT": os.path.join(out, "ld")})
    print(f"probe ({args.variant}) with LD_DEBUG=bindings: exit {rc}: {line}")

    foreign = collections.defaultdict(lambda: collections.Counter())     # provider -> {asker: n}
    examples = collections.defaultdict(set)
    ext = {}                                    # what the extension itself bound outside libstdc++
    for path in sorted(glob.glob(os.path.join(out, "ld.*"))):
        with open(path, errors="replace") as f:
            for ln in f:
                m = BINDING.match(ln)
                if not m:
                    continue
                _pid, asker, provider, sym = m.groups()
                mine = "/deep_gemm/_C" in asker
                if CXX_RUNTIME.match(sym) and "libstdc++" not in provider and provider != asker:
                    foreign[provider][_short(asker)] += 1
                    if len(examples[provider]) < 4:
                        examples[provider].add(sym)
                    if mine:
                        ext[sym] = provider
    print(f"\nC++ runtime symbols DeepGEMM's binding (deep_gemm/_C) bound outside libstdc++ ({len(ext)}):")
    names = _demangle(sorted(ext))
    for sym, name in zip(sorted(ext), names):
        print(f"  {_short(ext[sym])}: {name}")
    print(f"\nC++ runtime symbols bound to another library than libstdc++ and the asker, process-wide "
          f"({len(foreign)} providers; templates instantiated in a library are expected here):")
    for provider, askers in sorted(foreign.items(), key=lambda kv: -sum(kv[1].values())):
        print(f"  {provider}: {sum(askers.values())} bindings, asked by "
              + ", ".join(f"{a} ({n})" for a, n in askers.most_common(6)))
        for sym in sorted(examples[provider]):
            print(f"      e.g. {sym}")
    lib = _libstdcxx()
    rc2, line2 = _probe(args.variant, {"LD_PRELOAD": lib})
    print(f"\nprobe ({args.variant}) with LD_PRELOAD={lib}: exit {rc2}: {line2}")
    print(f"(the dynamic linker's log: {out})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
