"""Probe (issue 22, target 1 at M = 16): the rows GEMV's tensor-core form beside split-K and cuBLAS BF16.

The rows schedule's CUDA-core kernel streams 0.86-0.99 of copy at M = 1 and falls to 0.34-0.43 at
M = 4 and 0.09-0.12 at M = 16 (notebook 08, H200, 648d9df). Its tensor-core form (gemv_rows_mma.cuh,
``form="mma"``) is opt-in until it has been timed beside the others: this probe times it with
notebook 08's machinery (``decode.measure_decode``: float64 check at every M, rotated weights, CUDA
graph replays, the copy rate measured in the same run), then gemv_w16's split-K schedule and cuBLAS
BF16 on the same shapes and Ms. With ``--cuda-form`` the CUDA-core rows kernel too; with ``--mma32`` the tensor-core form at 32 rows per
CTA (``form="mma32"``: each warp's activations serve two 16-row tiles, half the activation loads per
weight byte).

Prints, per (format, M), the fraction of the copy rate of each kernel, its access pattern alone (the
tensor-core form's loads-only twin) and the form's ratio to its own M = 1 rate and to split-K; writes
probe_rows_forms.csv into --out (or $OUT).

    python scripts/probes/rows_forms.py [--shapes a,b] [--ms 1,4,16,64] [--fmts fp8,int8,int4] [--rep-ms 20]
                                        [--cuda-form] [--mma32] [--out DIR]
"""
from __future__ import annotations

import argparse
import os
import sys

SHAPES = "qwen3-8b:gate_up,llama3-8b:down_proj,llama3-70b:down_proj"


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--ms", default="1,4,16,64")
    ap.add_argument("--fmts", default="fp8,int8,int4")
    ap.add_argument("--rep-ms", type=float, default=20.0)
    ap.add_argument("--cuda-form", action="store_true", help="also time the CUDA-core rows kernel")
    ap.add_argument("--mma32", action="store_true",
                    help="also time the tensor-core form at 32 rows per CTA (form 'mma32') and its pattern")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    a = ap.parse_args(argv)
    try:
        a.ms = [int(m) for m in a.ms.split(",")]
    except ValueError:
        ap.error(f"--ms must be comma-separated integers, got {a.ms!r}")
    a.shapes, a.fmts = a.shapes.split(","), a.fmts.split(",")
    from fp8lab.facts import shapes
    from fp8lab.kernels import gemv_rows

    for s in a.shapes:
        try:
            shapes.get(s)
        except (KeyError, ValueError):
            ap.error(f"unknown shape {s!r}")
    bad = [f for f in a.fmts if f not in gemv_rows.MMA_FORMATS]
    if bad:
        ap.error(f"the tensor-core rows form takes formats {gemv_rows.MMA_FORMATS}, got {bad}")
    if not a.ms or min(a.ms) < 1:
        ap.error("--ms must be positive")
    return a


def table(df):
    """Per (shape, fmt, M): each kernel's fraction of copy; the form's over its M = 1 rate and split-K."""
    import pandas as pd

    key = df["schedule"].where(df["schedule"] != "rows", "rows_" + df["grid"].str.split().str[0])
    d = df.assign(kernel=key.where(df["schedule"] != "", "cublas_bf16"))
    frac = d.pivot_table(index=["shape", "M"], columns=["kernel", "fmt"], values="fraction_of_copy")
    pat = d[d["kernel"].isin(["rows_mma", "rows_mma32"])].pivot_table(
        index=["shape", "M"], columns=["kernel", "fmt"], values="pattern_fraction_of_copy")
    rows = []
    for (sh, M), r in frac.iterrows():
        for fmt in sorted({f for k, f in frac.columns if k == "rows_mma"}):
            mma = r.get(("rows_mma", fmt))
            m1 = frac.loc[(sh, min(frac.loc[sh].index)), ("rows_mma", fmt)]
            row = dict(shape=sh, fmt=fmt, M=M, rows_mma=mma, pattern=pat.loc[(sh, M), ("rows_mma", fmt)],
                       rows_cuda=r.get(("rows_cuda", fmt)), splitk=r.get(("splitk", fmt)),
                       cublas_bf16=r.get(("cublas_bf16", "bf16")), over_m1=mma / m1,
                       over_splitk=mma / r.get(("splitk", fmt)))
            if ("rows_mma32", fmt) in frac.columns:
                m32 = r.get(("rows_mma32", fmt))
                row.update(rows_mma32=m32, pattern32=pat.loc[(sh, M), ("rows_mma32", fmt)], mma32_over_mma=m32 / mma)
            rows.append(row)
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    a = parse(argv)
    import pandas as pd
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("rows_forms: needs a CUDA GPU")
    from fp8lab.experiments import decode as dx

    copy = dx.measure_copy()
    kw = dict(copy=copy, rep_ms=a.rep_ms, same_copy=False)
    parts = [dx.measure_decode(a.shapes, a.ms, a.fmts, cublas=False, schedule="rows", rows_form="mma", **kw)]
    if a.mma32:
        parts.append(dx.measure_decode(a.shapes, a.ms, a.fmts, cublas=False, schedule="rows", rows_form="mma32", **kw))
    if a.cuda_form:
        parts.append(dx.measure_decode(a.shapes, a.ms, a.fmts, cublas=False, schedule="rows", rows_form="cuda",
                                       pattern=False, **kw))
    parts.append(dx.measure_decode(a.shapes, a.ms, a.fmts, cublas=True, schedule="splitk", pattern=False, **kw))
    df = pd.concat(parts, ignore_index=True)
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "probe_rows_forms.csv")
    df.to_csv(path, index=False)
    t = table(df)
    print(f"copy {copy['rate_p50'] / 1e12:.2f} TB/s, {torch.cuda.get_device_name()}")
    print("fraction of the copy rate (rows_mma: the tensor-core rows form; pattern: its loads alone)")
    print(t.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
