"""Sweep behind notebook 01: every code of every format through every dequant trick.

Each function returns a tidy DataFrame; nothing here prints or plots, so the same sweep runs
under pytest, papermill, or a plain script.
"""

from __future__ import annotations

from typing import Optional

import ml_dtypes
import numpy as np
import pandas as pd

from fp8lab.emulate import dequant as dq, formats
from fp8lab.experiments import gemv_sass as gs

__all__ = ["trick_codes", "code_values", "trick_summary", "representable", "format_table", "c2_sass", "b2_verdict",
           "c2_verdict", "folded_bias_log2", "C2_SEED_PER_4", "C2_TOL"]


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


# --------------------------------------------------------------------------------- B2, C2
#: C2: the seed's "~7 instructions per 4 values", and how far a count may be from it and still
#: read as "~7" (the seed rounds; one instruction either way).
C2_SEED_PER_4 = 7
C2_TOL = 1
C2_ARCH = "sm_90"
#: SASS opcode families that convert between number formats: the trick claims none in the dequant.
CONVERSION_FAMILIES = ("F2F", "F2FP", "I2F", "F2I", "I2I", "I2FP", "F2IP")


def _bias(dtype) -> int:
    """IEEE-style exponent bias, 2^(exponent bits - 1) - 1 (e4m3fn keeps it: its all-ones exponent
    holds normal values, so finfo.maxexp would be one too high)."""
    return (1 << (int(ml_dtypes.finfo(dtype).nexp) - 1)) - 1


def folded_bias_log2() -> dict:
    """log2 of the factor the e4m3 trick must fold into the scale, from the formats' biases:
    fp16's bias - e4m3's, bf16's - e4m3's (2^8 and 2^120 in the seed)."""
    e4 = _bias(ml_dtypes.float8_e4m3fn)
    return {"fp16": _bias(np.float16) - e4, "bf16": _bias(ml_dtypes.bfloat16) - e4}


def c2_sass(arch: str = C2_ARCH) -> pd.DataFrame:
    """The E4M3 dequant as ptxas compiled it in a kernel that uses the trick: fp8lab's weight-only
    FP8 decode GEMV (gemv_w8a16_fp8, NT = 1), compiled here with nvcc (no GPU). One row per
    activation dtype: the main loop's instructions of the trick's opcodes (those the emulator's
    sequence uses, with ``gemv_sass.OPCODE_EQUIV`` mapping ptxas's substitutions), the weight
    elements one loop iteration covers, their ratio per 4 values, the conversion opcodes in the
    loop, the float multiplies in the loop, and the dequant probe's isolated count per 32-bit word
    (probe minus its pass-through twin). Raises when nvcc / cuobjdump are missing."""
    from fp8lab.toolchain import sass as sass_mod
    from fp8lab.kernels import weight_only as wo

    loop = gs.gemv_sass_counts(arch, nt=1)
    probe = gs.dequant_sass_counts(arch)
    rows = []
    for act in wo.ACT_DTYPES:
        trick = dq.TRICKS[("e4m3", act, "shift")]
        ops = set(trick.run(trick.pack(np.zeros(trick.elements_per_word, dtype=np.int64))).op_counts)
        d = loop[(loop["fmt"] == "fp8") & (loop["act"] == act)]
        canon = d["opcode"].map(lambda o: gs.OPCODE_EQUIV.get(o, o))
        mine = d[canon.isin(ops)]
        elems = float((d["count"] / d["per_element"]).iloc[0])
        fam = d["opcode"].map(sass_mod.opcode_family)
        conv = d[fam.map(lambda f: f.split(".")[0] in CONVERSION_FAMILIES)]
        mul = d[d["opcode"].str.startswith(("HMUL2", "HFMA2", "FMUL"))]
        pt = probe[(probe["fmt"] == "fp8") & (probe["act"] == act) & (probe["kind"] == "total")]
        rows.append({"arch": arch, "kernel": str(d["arm"].iloc[0]), "act": act,
                     "trick_ops_in_loop": int(mine["count"].sum()), "elements_in_loop": elems,
                     "per_4_values": float(mine["count"].sum()) / elems * 4,
                     "op_mix": " ".join(f"{o}x{c}" for o, c in zip(mine["opcode"], mine["count"])),
                     "conversions_in_loop": int(conv["count"].sum()),
                     "conversion_ops": " ".join(conv["opcode"]),
                     "float_muls_in_loop": int(mul["count"].sum()),
                     "probe_per_word": int(pt["sass"].iloc[0]), "elements_per_word": int(pt["elements_per_word"].iloc[0])})
    return pd.DataFrame(rows)


def b2_verdict(tricks: pd.DataFrame, rep: pd.DataFrame, cv: pd.DataFrame) -> "claims.Verdict":
    """B2 (subject arithmetic): every finite E4M3 code is exact in fp16 and bf16, by a plain cast
    (``representable``) and through every E4M3 trick in every word position (``trick_summary``):
    holds, else differs. A holds row carries the non-finite codes' fate from ``code_values`` (the
    NaN codes decode to finite values through the bit trick) as its caveat."""
    from fp8lab.report import claims

    e4 = tricks[tricks["fmt"] == "e4m3"]
    r4 = rep[rep["fmt"] == "e4m3"]
    rule = (f"holds if every finite e4m3 code is bit-exact in fp16 and bf16 by plain cast and through each of the "
            f"{len(e4)} e4m3 tricks in every word position; else differs")
    if e4.empty or r4.empty:
        return claims.Verdict("B2", "not-run", "no e4m3 rows in the tables", reason="the sweep did not run",
                              subject="arithmetic", rule=rule)
    n_fin = int(e4["finite_codes"].iloc[0])
    n_ok = int(e4["bit_exact"].min())
    cast_ok = int(r4["representable"].min())
    fig = (f"{n_ok}/{n_fin} finite e4m3 codes bit-exact in fp16 and bf16 through every trick "
           f"({len(e4)} tricks x every word position); plain cast: {cast_ok}/{int(r4['finite_codes'].iloc[0])}")
    bad_tricks = e4[e4["bit_exact"] != e4["finite_codes"]]
    bad_cast = r4[r4["representable"] != r4["finite_codes"]]
    if len(bad_tricks) or len(bad_cast):
        return claims.Verdict("B2", "differs", fig, subject="arithmetic", rule=rule, reason="; ".join(
            [f"{r['target']} {r['trick']}: {int(r['mismatches'])} mismatches" for _, r in bad_tricks.iterrows()]
            + [f"plain cast to {r['target']}: {int(r['finite_codes'] - r['representable'])} not representable"
               for _, r in bad_cast.iterrows()]))
    nf = cv[(cv["fmt"] == "e4m3") & cv["cls"].isin(["nan", "inf"])]
    caveat = ""
    if len(nf):
        hexes = ", ".join(sorted(nf["hex"].unique()))
        fin = nf[np.isfinite(nf["decoded"].astype(float))]
        if len(fin):
            mags = ", ".join(f"±{m:g}" for m in sorted(set(np.abs(fin["decoded"].astype(float)))))
            which = sorted(set(fin["trick"]))
            caveat = (f"caveat: the {nf['code'].nunique()} non-finite codes ({hexes}) decode to finite {mags} through "
                      f"the bit trick{'s' if len(which) > 1 else ''} ({', '.join(which)}), not NaN")
        else:
            caveat = f"the non-finite codes ({hexes}) stay non-finite through every trick"
    return claims.Verdict("B2", "holds", fig, reason=caveat, subject="arithmetic", rule=rule)


def c2_verdict(tricks: pd.DataFrame, sass_df: Optional[pd.DataFrame], why_not: str = "") -> "claims.Verdict":
    """C2 (subject analogue: Marlin itself is not here; fp8lab's weight-only FP8 GEMV uses the same
    trick). Holds if, in the GEMV's compiled main loop, the trick's integer opcodes come to
    C2_SEED_PER_4 +- C2_TOL per 4 E4M3 values for both fp16 and bf16 with no conversion opcode in
    the loop, the factor the emulated trick folds into the scale is the exponent-bias difference
    (fp16 and bf16), and every finite E4M3 and E2M1 code decodes exactly; else differs. No SASS
    (``sass_df`` None, ``why_not`` says why): not-run."""
    from fp8lab.report import claims

    lo, hi = C2_SEED_PER_4 - C2_TOL, C2_SEED_PER_4 + C2_TOL
    bias = folded_bias_log2()
    rule = (f"holds if the compiled GEMV main loop has {lo}-{hi} and/shift/or instructions per 4 e4m3 values "
            f"(fp16 and bf16), no conversion opcode, the folded factor is 2^{bias['fp16']} (fp16) / 2^{bias['bf16']} "
            f"(bf16), and every finite e4m3 and e2m1 code is exact; else differs")
    if sass_df is None or sass_df.empty:
        return claims.Verdict("C2", "not-run", "no SASS of a kernel using the trick",
                              reason=why_not or "the SASS count did not run", subject="analogue", rule=rule)
    sh = tricks[tricks["trick"] == "shift"].set_index(["fmt", "target"])
    fold = {t: int(sh.loc[("e4m3", t), "factor_log2"]) for t in ("fp16", "bf16")}
    exact = {f: bool((tricks.loc[tricks["fmt"] == f, "bit_exact"] == tricks.loc[tricks["fmt"] == f, "finite_codes"]).all())
             for f in ("e4m3", "e2m1")}
    s = sass_df.set_index("act")
    fig = (f"{s['kernel'].iloc[0]} main loop ({s['arch'].iloc[0]}, nvcc): "
           + "; ".join(f"{a}: {r['per_4_values']:.2f} per 4 values ({r['op_mix']}), {r['conversions_in_loop']} "
                       f"conversions, {r['float_muls_in_loop']} float multiplies" for a, r in s.iterrows())
           + f"; isolated probe: {int(s['probe_per_word'].iloc[0])} per word of {int(s['elements_per_word'].iloc[0])}; "
           f"folded 2^{fold['fp16']} (fp16) / 2^{fold['bf16']} (bf16); e4m3 exact: {exact['e4m3']}, e2m1 exact: {exact['e2m1']}")
    why = [f"{a}: {r['per_4_values']:.2f} per 4 values" for a, r in s.iterrows() if not lo <= r["per_4_values"] <= hi]
    why += [f"{a}: conversions in the loop ({r['conversion_ops']})" for a, r in s.iterrows() if r["conversions_in_loop"]]
    why += [f"{t}: folds 2^{fold[t]}, the bias difference is 2^{bias[t]}" for t in fold if fold[t] != bias[t]]
    why += [f"{f} codes not all exact" for f, ok in exact.items() if not ok]
    if why:
        return claims.Verdict("C2", "differs", fig, reason="; ".join(why), subject="analogue", rule=rule)
    return claims.Verdict("C2", "holds", fig, subject="analogue", rule=rule)
