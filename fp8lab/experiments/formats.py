"""Sweep behind notebook 01: every code of every format through every dequant trick.

Each function returns a tidy DataFrame; nothing here prints or plots, so the same sweep runs
under pytest, papermill, or a plain script.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pandas as pd

from fp8lab import dequant as dq
from fp8lab import formats

__all__ = ["trick_codes", "code_values", "trick_summary", "representable", "format_table"]


def _layout(n_codes: int, per_word: int, seed: int) -> np.ndarray:
    """(per_word * n_codes, per_word) logical codes: block ``p`` puts every code at
    position ``p``, the other positions random (neighbours must not leak in)."""
    rng = np.random.default_rng(seed)
    blocks = []
    for pos in range(per_word):
        blk = rng.integers(0, n_codes, size=(n_codes, per_word))
        blk[:, pos] = np.arange(n_codes)
        blocks.append(blk)
    return np.concatenate(blocks)


def trick_codes(key: tuple[str, str, str], seed: int = 0) -> pd.DataFrame:
    """One row per (code, word position) for one trick: the pattern emitted, its value after
    the folded factor, and the independent reference (ml_dtypes / integer arithmetic)."""
    trick = dq.TRICKS[key]
    spec = formats.get_format(trick.fmt)
    epw = trick.elements_per_word
    grid = _layout(spec.n_codes, epw, seed)
    res = trick.run(trick.pack(grid.reshape(-1)))
    bits = res.bits.reshape(grid.shape)
    vals = res.values().reshape(grid.shape)
    rows = np.arange(grid.shape[0])
    pos = rows // spec.n_codes  # block index == the position swept in that block
    code = grid[rows, pos]
    got_bits = bits[rows, pos]
    got = vals[rows, pos]
    ref = formats.decode(trick.fmt, code)
    finite = np.isfinite(ref)
    same = (got == ref) & (np.signbit(got) == np.signbit(ref))
    # A non-finite reference is "exact" only if the trick keeps it non-finite of the same kind.
    same_nonfinite = (np.isnan(ref) & np.isnan(got)) | (np.isinf(ref) & (got == ref))
    return pd.DataFrame(
        {
            "fmt": trick.fmt,
            "target": trick.target,
            "trick": trick.name,
            "code": code,
            "position": pos,
            "pattern": got_bits.astype(np.int64),
            "factor_log2": int(np.log2(res.factor)),
            "decoded": got,
            "reference": ref,
            "finite": finite,
            "exact": np.where(finite, same, same_nonfinite),
        }
    )


def _fmt_pattern(p: int) -> str:
    return f"0x{p:04X}"


def code_values(seed: int = 0) -> pd.DataFrame:
    """Every code of every dequantised format x every trick: one row per code (positions
    folded: ``positions_agree`` says every word position gave the same pattern)."""
    frames = []
    for key in dq.TRICKS:
        df = trick_codes(key, seed)
        g = df.groupby("code", sort=True)
        agg = g.agg(
            pattern=("pattern", "first"),
            n_patterns=("pattern", "nunique"),
            decoded=("decoded", "first"),
            reference=("reference", "first"),
            exact=("exact", "all"),
            factor_log2=("factor_log2", "first"),
        ).reset_index()
        agg.insert(0, "trick", key[2])
        agg.insert(0, "target", key[1])
        agg.insert(0, "fmt", key[0])
        agg["positions_agree"] = agg.pop("n_patterns") == 1
        agg["pattern"] = agg["pattern"].map(_fmt_pattern)
        table = formats.code_table(key[0]).set_index("code")
        agg["hex"] = agg["code"].map(table["hex"])
        agg["cls"] = agg["code"].map(table["cls"])
        agg["note"] = _notes(agg)
        frames.append(agg)
    cols = ["fmt", "target", "trick", "code", "hex", "cls", "reference", "pattern", "factor_log2",
            "decoded", "exact", "positions_agree", "note"]
    return pd.concat(frames, ignore_index=True)[cols]


def _notes(agg: pd.DataFrame) -> list[str]:
    notes = []
    for cls, dec, ex in zip(agg["cls"], agg["decoded"], agg["exact"]):
        if cls in ("nan", "inf") and np.isfinite(dec):
            notes.append(f"{cls} code decodes to finite {dec:g} (no special case in the trick)")
        elif cls in ("nan", "inf"):
            notes.append(f"{cls} kept")
        elif not ex:
            notes.append("MISMATCH")
        else:
            notes.append("")
    return notes


def _nonfinite_handling(df: pd.DataFrame) -> str:
    nf = df[~df["finite"]]
    if nf.empty:
        return "no NaN/inf codes"
    parts = []
    for cls_name, mask in (("NaN", np.isnan(nf["reference"])), ("inf", np.isinf(nf["reference"]))):
        sub = nf[mask]
        if sub.empty:
            continue
        dec = sub["decoded"]
        if np.isfinite(dec).all():
            mags = sorted(set(np.abs(dec)))
            shown = ", ".join(f"±{m:g}" for m in mags)
            parts.append(f"{cls_name} -> finite {shown}")
        elif sub["exact"].all():
            parts.append(f"{cls_name} kept")
        else:
            parts.append(f"{cls_name} mixed")
    return "; ".join(parts)


def trick_summary(seed: int = 0) -> pd.DataFrame:
    """One row per (format, target, trick): codes checked, bit-exact count, mismatches,
    NaN/inf handling, instructions per word and per element, the folded factor, and the
    instruction sequence the emulator executed."""
    rows = []
    for key, trick in dq.TRICKS.items():
        df = trick_codes(key, seed)
        res = trick.run(trick.pack(np.zeros(trick.elements_per_word, dtype=np.int64)))
        per_code = df.groupby("code").agg(finite=("finite", "first"), exact=("exact", "all"))
        fin = per_code[per_code["finite"]]
        rows.append(
            {
                "fmt": key[0],
                "target": key[1],
                "trick": key[2],
                "summary": trick.summary,
                "elements_per_word": trick.elements_per_word,
                "codes": int(len(per_code)),
                "element_checks": int(len(df)),
                "finite_codes": int(len(fin)),
                "bit_exact": int(fin["exact"].sum()),
                "mismatches": int((~fin["exact"]).sum()),
                "nonfinite_codes": int((~per_code["finite"]).sum()),
                "nonfinite_handling": _nonfinite_handling(df),
                "factor_log2": int(df["factor_log2"].iloc[0]),
                "ops_per_word": res.ops_per_word,
                "ops_per_element": res.ops_per_element,
                "op_mix": " ".join(f"{op}x{n}" for op, n in res.op_counts.items()),
                "integer_ops_only": all(
                    i.op.startswith(("LOP3", "SHF", "PRMT")) for i in res.trace
                ),
                "sequence": " ; ".join(f"{i.op} {i.asm}" for i in res.trace),
            }
        )
    return pd.DataFrame(rows)


def representable(fmts=("e4m3", "e5m2", "e2m1", "int4", "int8")) -> pd.DataFrame:
    """Is every finite value of each format representable in fp16 / bf16? Checked by a plain
    cast (numpy / ml_dtypes), independent of any bit trick: the arithmetic fact behind B2."""
    rows = []
    for fmt in fmts:
        v = formats.decode(fmt, np.arange(formats.get_format(fmt).n_codes))
        v = v[np.isfinite(v)]
        for target, dtype in (("fp16", np.float16), ("bf16", ml_dtypes.bfloat16)):
            back = v.astype(dtype).astype(np.float64)
            ok = (back == v) & (np.signbit(back) == np.signbit(v))
            rows.append({"fmt": fmt, "target": target, "finite_codes": int(v.size),
                         "representable": int(ok.sum())})
    return pd.DataFrame(rows)


def format_table() -> pd.DataFrame:
    """Every code of every format (E4M3, E5M2, E2M1, UE8M0, INT4, INT8) with value and class."""
    return formats.all_code_tables()
