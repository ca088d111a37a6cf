"""Probe (issue 22, targets 2 and 3 at M = 1): the 4-bit rows GEMVs, 4 and 8 rows per CTA, beside split-K.

NVFP4 had no rows kernel: its decode ran the tile layout's split-K GEMV only, at 0.60-0.85 of copy
beside INT4's rows kernel at 0.75-0.94 (notebook 08, H100, d3424a1). gemv_rows.cuh now has NVFP4 rows
kernels (e2m1 codes into fp16 by byte permutes, one e4m3 block scale per 16 in fp32) and, for both
4-bit formats, an opt-in form of 8 rows per CTA (``form="cuda8"``): each thread's activation
conversion serves 8 rows instead of 4, which cuts the SASS per weight (static, M = 1 loop bodies:
INT4 3.9 -> 2.9 instructions per code, NVFP4 4.1 -> 3.1) at four CTAs per SM instead of eight. This
probe times both forms with notebook 08's machinery (``decode.measure_decode``: float64 check,
rotated weights, CUDA graph replays, the copy rate measured in the same run) beside gemv_w16's split-K
schedule and cuBLAS BF16.

Prints, per (shape, M), each kernel's fraction of the copy rate, the forms' access patterns alone
(their loads-only twins), NVFP4 over INT4 in each form (target 3: within 5%) and cuda8 over cuda;
writes probe_rows_4bit.csv into --out (or $OUT).

    python scripts/probes/rows_4bit.py [--shapes a,b] [--ms 1,4] [--rep-ms 20] [--out DIR]
"""
from __future__ import annotations

import argparse
import os
import sys

SHAPES = "qwen3-8b:gate_up,llama3-8b:gate_up,llama3-8b:down_proj,llama3-70b:qkv,llama3-70b:down_proj"
FMTS = ("int4", "nvfp4")


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--ms", default="1")
    ap.add_argument("--rep-ms", type=float, default=20.0)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    a = ap.parse_args(argv)
    try:
        a.ms = [int(m) for m in a.ms.split(",")]
    except ValueError:
        ap.error(f"--ms must be comma-separated integers, got {a.ms!r}")
    if not a.ms or min(a.ms) < 1:
        ap.error("--ms must be positive")
    a.shapes = a.shapes.split(",")
    from fp8lab.facts import shapes

    for s in a.shapes:
        try:
            shapes.get(s)
        except (KeyError, ValueError):
            ap.error(f"unknown shape {s!r}")
    return a


def table(df):
    """Per (shape, M): int4 / nvfp4 in each form and split-K, their patterns, cuBLAS BF16; nvfp4 over
    int4 per form; cuda8 over cuda per format."""
    import pandas as pd

    key = df["schedule"].where(df["schedule"] != "rows", "rows_" + df["grid"].str.split().str[0])
    d = df.assign(kernel=key.where(df["schedule"] != "", "cublas_bf16"))
    frac = d.pivot_table(index=["shape", "M"], columns=["kernel", "fmt"], values="fraction_of_copy")
    pat = d[d["kernel"].str.startswith("rows_")].pivot_table(
        index=["shape", "M"], columns=["kernel", "fmt"], values="pattern_fraction_of_copy")
    rows = []
    for (sh, M), r in frac.iterrows():
        row = dict(shape=sh, M=M)
        for fmt in FMTS:
            for k in ("rows_cuda", "rows_cuda8", "splitk"):
                row[f"{fmt}_{k.removeprefix('rows_')}"] = r.get((k, fmt))
            for k in ("rows_cuda", "rows_cuda8"):
                row[f"{fmt}_{k.removeprefix('rows_')}_pattern"] = pat.loc[(sh, M)].get((k, fmt)) if (sh, M) in pat.index else None
        row["cublas_bf16"] = r.get(("cublas_bf16", "bf16"))
        for k in ("cuda", "cuda8"):
            row[f"nv_over_int4_{k}"] = row[f"nvfp4_{k}"] / row[f"int4_{k}"]
        best = {f: max(v for v in (row[f"{f}_cuda"], row[f"{f}_cuda8"], row[f"{f}_splitk"]) if v == v) for f in FMTS}
        row["nv_over_int4_best"] = best["nvfp4"] / best["int4"]
        for f in FMTS:
            row[f"{f}_cuda8_over_cuda"] = row[f"{f}_cuda8"] / row[f"{f}_cuda"]
        rows.append(row)
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    a = parse(argv)
    import pandas as pd
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("rows_4bit: needs a CUDA GPU")
    from fp8lab.experiments import decode as dx

    copy = dx.measure_copy()
    kw = dict(copy=copy, rep_ms=a.rep_ms, same_copy=False)
    parts = [dx.measure_decode(a.shapes, a.ms, list(FMTS), cublas=False, schedule="rows", rows_form=form, **kw)
             for form in ("cuda", "cuda8")]
    parts.append(dx.measure_decode(a.shapes, a.ms, list(FMTS), cublas=True, schedule="splitk", pattern=False, **kw))
    df = pd.concat(parts, ignore_index=True)
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "probe_rows_4bit.csv")
    df.to_csv(path, index=False)
    t = table(df)
    print(f"copy {copy['rate_p50'] / 1e12:.2f} TB/s, {torch.cuda.get_device_name()}")
    print("fraction of the copy rate (cuda: 4 rows per CTA, cuda8: 8; *_pattern: that form's loads alone)")
    with pd.option_context("display.width", 250, "display.max_columns", 40):
        print(t.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
