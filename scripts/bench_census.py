"""Time the filter-first SASS census (``python -m fp8lab census``) on real binaries.

A benchmark, not a test: it prints the census table, then the wall time in seconds and the
machine's core count. Example (the README's measurement):

    .venv/bin/python scripts/bench_census.py vllm-*.whl \\
        --arch sm_80 sm_89 sm_90 sm_120 --filter 'marlin|Marlin'
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's fp8lab

from fp8lab.toolchain import binaries  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    binaries.add_arguments(ap)
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    try:
        result = binaries.census(a.binaries, archs=a.arch, kernel_filter=a.filter,
                                 workers=a.workers)
    except binaries.CensusError as exc:
        print(f"bench_census: error: {exc}", file=sys.stderr)
        return 2
    seconds = time.perf_counter() - t0
    print(binaries.render(result))
    if a.out:
        binaries.write_csvs(result, Path(a.out))
    # the children's peak resident memory is the tools' (cuobjdump / nvdisasm), ours is Python's
    peak_self = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    peak_kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"\ncensus: {seconds:.1f} s wall on {binaries.default_workers()} cores "
          f"({len(result.kernels)} kernels, {len(result.disassembled)} cubins disassembled); "
          f"peak RSS {peak_self:.0f} MiB (python), {peak_kids:.0f} MiB (largest tool process)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
