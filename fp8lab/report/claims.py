"""The claims ledger: every claim from the three seed write-ups, and the verdicts that
notebooks record for them from what they measured.

A notebook builds ``Verdict`` rows from its measurements and calls ``record(run, rows)``;
they land in ``data/<device>/<notebook>/verdicts.csv`` with provenance like any table.
``python -m fp8lab claims`` regenerates the README's ledger from data/ (``--check``
fails when the README is stale).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Optional

import pandas as pd

from . import results
from ..paths import data_dir, repo_root

VERDICTS = ("holds", "holds-in-kind", "differs", "not-run")
#: What a verdict row measured. ``seed``: the system the seed itself measured (Marlin, CUTLASS's
#: Ada blockwise example, cuBLAS / cuBLASLt, vLLM's kernels); ``analogue``: fp8lab's own kernel of
#: the same design; ``arithmetic``: the seed's published numbers (or the spec sheet) re-derived,
#: no device in the loop. A claim may have one row per subject per notebook.
SUBJECTS = ("seed", "analogue", "arithmetic")


@dataclasses.dataclass(frozen=True)
class Claim:
    id: str
    seed: str            # which write-up
    claim: str           # one line
    seed_figure: str     # the seed's number
    seed_hardware: str
    where: str           # compile (CPU) / CPU / GPU / ...


_S0, _S1, _S3 = ("000 Blockwise FP8 on Ada", "001 ArcKernels WMMA W8A16 PR",
                 "003 weight-only FP8/NVFP4 on a 3090")
CLAIMS: dict[str, Claim] = {c.id: c for c in [
    Claim("A1", _S0, "per-slice scaling at 64x128x128 / 64x64x128 / 3 stages spills; per-block promotion does not",
          "REG 255, STACK 600 B (per-slice)", "sm_89 (L4), nvcc", "compile (CPU)"),
    Claim("A2", _S0, "16 tiles x 3 main loops = 48 kernels compile-checked for registers and spills without a GPU",
          "48 variants checked in Docker", "no GPU", "compile (CPU)"),
    Claim("A3", _S0, "per-block fix ~4.8x faster at o_proj M=4096; spilling kernel ~4x slower than Triton",
          "6536 -> 1374 us", "L4", "GPU"),
    Claim("A4", _S0, "all 48 variants correct vs a float reference; FP8 relative error ~2e-3",
          "rel. err ~2e-3", "L4", "GPU"),
    Claim("A5", _S0, "one weight scale per threadblock is right only when the N tile is 128; per-warp lookup is right",
          "latent bug, fixed", "L4", "GPU"),
    Claim("A6", _S0, "one tile does not fit all M: decode wants small tiles, prefill big ones",
          "tile picked by M", "L4", "GPU"),
    Claim("A7", _S0, "threadblock swizzle matters: down_proj M=4096",
          "7144 -> 5614 us (-21%)", "L4", "GPU"),
    Claim("A8", _S0, "M=1 should stream the weights far faster; Marlin beats the W8A8 kernel at M=1",
          "175 us for 16 MB", "L4", "GPU"),
    Claim("A9", _S0, "down_proj at large M stays ~10% behind Triton after tuning",
          "6159 vs 5584 us", "L4", "GPU"),
    Claim("B1", _S1, "the scalar shared-memory kernel cannot exceed ~1/4 of FP32 peak; measured 6.8%",
          "6.8% of FP32 peak", "H200 (derived)", "GPU"),
    Claim("B2", _S1, "FP8 e4m3 -> fp16/bf16 conversion is exact for every code",
          "exact for every code", "(arithmetic)", "CPU"),
    Claim("B3", _S1, "a WMMA W8A16 GEMM with per-128-K promotion realises 50-70% of the BF16 tensor rate",
          "50-70% of BF16 peak", "H200 (derived)", "GPU"),
    Claim("B4", _S1, "B=256 decode step floors: 2.170 TFLOP, 4.238 GB",
          "FP32 32.4 / BF16 2.19 / FP8 1.10 / HBM 0.88 ms", "H200 spec", "derive + GPU"),
    Claim("B5", _S1, "cuBLASLt blockwise FP8 (1x128 / 128x128) works on Hopper with cuBLAS >= 12.9 and reaches the FP8 rate",
          "2x the BF16 ceiling", "H200 (derived)", "GPU"),
    Claim("B6", _S1, "a 1024-thread 1x128 quantiser uses 32/1024 threads and 128 serial atomics; warp-per-group fixes it",
          "31/32 of each block idle", "H200 (code reading)", "GPU"),
    Claim("B7", _S1, "no M threshold without a sweep: the winning arm per M comes from measuring every M",
          "no threshold", "-", "GPU"),
    Claim("B8", _S1, "the tensor-core W8A16 path is numerically better than the scalar path",
          "exact conversion, scale per 128-K", "(arithmetic)", "GPU + CPU"),
    Claim("B9", _S1, "WMMA needs a 16-byte-multiple leading dimension: +8 pad valid, +1 not",
          "(128+8)*2 = 272 B", "(docs)", "compile / GPU"),
    Claim("C1", _S3, "weight-only (A16) kernels issue only HMMA; FP8 tensor instructions only with FP8 activations",
          "480 Marlin A16 kernels: HMMA only", "sm_80 / sm_120 SASS", "SASS census (CPU)"),
    Claim("C2", _S3, "Marlin's E4M3 -> FP16 dequant: and/shift/or, ~7 instructions per 4 values, bias folded into the scale, exact",
          "~7 instr. per 4 values", "(source)", "CPU (emulator)"),
    Claim("C3", _S3, "decode (M=1) weight-only GEMM is DRAM-bound: 91-94% of DRAM bandwidth, 13-33% of issue slots",
          "91-94% DRAM, 13-33% issue", "RTX 3090", "GPU (+ ncu)"),
    Claim("C4", _S3, "same-width FP vs INT formats run at the same effective bandwidth at M=1",
          "within 1.5%", "RTX 3090", "GPU"),
    Claim("C5", _S3, "dequant costs 1.8-2.9 instructions per weight element (FP8: 1.81)",
          "1.8-2.9 instr./element", "RTX 3090", "GPU (ncu) + SASS"),
    Claim("C6", _S3, "locked SM clocks: decode unchanged >= 1200 MHz; 4-bit loses 15-16% at 900 MHz, cuBLAS BF16 36%",
          "see seed table", "RTX 3090", "GPU, clock locking"),
    Claim("C7", _S3, "prefill M=8192: weight-only GEMM at 95-97% of cuBLAS BF16 at the same clock; cuBLAS ~99% of spec per GHz",
          "95-97%", "RTX 3090", "GPU"),
    Claim("C8", _S3, "issue-slot model: instr/element x elements/s / (SMs x 4 x clock) predicts ncu",
          "32% vs 32.5% (3090), ~22% (5090)", "RTX 3090", "model + GPU (ncu)"),
    Claim("C9", _S3, "W8A8 doubles the prefill compute ceiling; at decode quantising activations does not help",
          "2x (FP8), 4x (FP4)", "RTX 3090 (derived)", "GPU"),
]}


@dataclasses.dataclass
class Verdict:
    """One verdict row, computed by a notebook from what it measured."""
    claim: str
    verdict: str
    our_figure: str
    reason: str = ""
    seed_figure: str | None = None
    seed_hardware: str | None = None
    #: ``seed`` / ``analogue`` / ``arithmetic`` (SUBJECTS): what the row measured.
    subject: str | None = None
    #: the rule that produced the verdict, one line, rendered by the verdict function from the
    #: same constants it decides with (e.g. f"holds if ratio >= {BAR}").
    rule: str | None = None
    #: tells apart two rows of one claim with the same subject (e.g. two analogue kernels);
    #: shown beside the subject in the ledger.
    variant: str = ""

    def __post_init__(self):
        if self.claim not in CLAIMS:
            raise ValueError(f"unknown claim id {self.claim!r}; known: {', '.join(CLAIMS)}")
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")
        if not isinstance(self.our_figure, str) or not self.our_figure.strip():
            raise ValueError("our_figure must say what was measured (a non-empty string)")
        if self.verdict != "holds" and not self.reason.strip():
            raise ValueError(f"verdict {self.verdict!r} for {self.claim} needs a reason")
        if self.subject is None or self.subject not in SUBJECTS:
            raise ValueError(f"verdict for {self.claim} needs a subject, one of {SUBJECTS}; got {self.subject!r}")
        if not isinstance(self.rule, str) or not self.rule.strip() or "\n" in self.rule:
            raise ValueError(f"verdict for {self.claim} needs its rule: one line saying how the verdict was decided")
        c = CLAIMS[self.claim]
        self.seed_figure = self.seed_figure or c.seed_figure
        self.seed_hardware = self.seed_hardware or c.seed_hardware


COLUMNS = ["claim", "subject", "variant", "verdict", "seed_figure", "seed_hardware", "our_figure", "device",
           "device_name", "notebook", "run", "time", "reason", "rule"]


#: the columns a notebook shows of a verdict table
SHOWN = ["claim", "subject", "verdict", "our_figure", "reason", "rule", "device_name"]


def record_or_recorded(run: "results.Run", make) -> Optional[pd.DataFrame]:
    """The verdicts a notebook shows: when this run measured its device (``make`` is not None),
    ``make()`` recorded; otherwise the verdict table the last measuring run recorded (the last
    device that has one), or None. Columns: :data:`SHOWN` (a table recorded before the subject
    and rule columns existed shows them blank)."""
    if make is not None:
        df = record(run, make())
    else:
        df = None
        for dev in results.devices_with(run.notebook, "verdicts"):
            df = results.load_table(dev, run.notebook, "verdicts")
    return None if df is None else df.reindex(columns=SHOWN)


def record_if_measured(run: "results.Run", device: str, verdicts: list[Verdict]) -> list[Verdict]:
    """``verdicts`` computed from ``device``'s tables, recorded (``record``) only when this run
    measured that device; a redraw, or another device's tables, only shows them. Returns them."""
    if run.mode == "measure" and device == run.device:
        record(run, verdicts)
    return verdicts


def _subject(v: Verdict) -> str:
    return v.subject + (f", {v.variant}" if v.variant else "")


def table(verdicts: list[Verdict]) -> pd.DataFrame:
    """Verdicts as a notebook shows them: claim, subject (with the variant), verdict, our figure,
    reason, rule."""
    return pd.DataFrame([dict(claim=v.claim, subject=_subject(v), verdict=v.verdict, our_figure=v.our_figure,
                              reason=v.reason, rule=v.rule) for v in verdicts])


def markdown(v: Verdict, device: str) -> str:
    """One verdict as a paragraph: claim, subject and verdict in bold, the device, what was
    measured, why, and the rule."""
    return f"**{v.claim} ({_subject(v)}): {v.verdict}** ({device}). {v.our_figure}. {v.reason}  \n*Rule:* {v.rule}"


def record(run: "results.Run", verdicts: list[Verdict]) -> pd.DataFrame:
    """Write this run's verdicts (replaces the notebook's verdict table for this device).
    In replot mode nothing is written: verdicts come from the run that measured."""
    if not verdicts:
        raise ValueError("record() needs at least one Verdict")
    for v in verdicts:
        if not isinstance(v, Verdict):
            raise ValueError(f"expected Verdict rows, got {type(v).__name__}")
    ids = [(v.claim, v.subject, v.variant) for v in verdicts]
    if len(set(ids)) != len(ids):
        dup = sorted({f"{c} ({s}{' ' + w if w else ''})" for c, s, w in ids if ids.count((c, s, w)) > 1})
        raise ValueError(f"one verdict per claim, subject and variant per run, got duplicates: {', '.join(dup)}")
    rows = []
    for v in verdicts:
        rows.append({
            "claim": v.claim, "subject": v.subject, "variant": v.variant, "verdict": v.verdict, "seed_figure": v.seed_figure,
            "seed_hardware": v.seed_hardware, "our_figure": v.our_figure,
            "device": run.device, "device_name": run.device_name, "notebook": run.notebook,
            "run": run.meta.get("run_id") or run.meta["time"], "time": run.meta["time"],
            "reason": v.reason, "rule": v.rule,
        })
    df = pd.DataFrame(rows, columns=COLUMNS)
    if run.writes:
        run.write_table("verdicts", df)
    return df


def collect_verdicts() -> pd.DataFrame:
    """Every recorded verdict in data/, one row per (claim, device, notebook)."""
    frames = []
    root = data_dir()
    for path in sorted(root.glob("*/*/verdicts.csv")):
        device, notebook = path.parent.parent.name, path.parent.name
        frames.append(results.load_table(device, notebook, "verdicts"))
    if not frames:
        return pd.DataFrame(columns=COLUMNS)
    df = pd.concat(frames, ignore_index=True)
    for col in COLUMNS:            # a table recorded before a column existed reads it as blank
        if col not in df.columns:
            df[col] = ""
    order = {cid: i for i, cid in enumerate(CLAIMS)}
    sorder = {s: i for i, s in enumerate(SUBJECTS)}
    keys = {"claim": order, "subject": sorder}
    return df[COLUMNS].sort_values(by=["claim", "subject", "device"],
                                   key=lambda s: s.map(keys[s.name]).fillna(len(sorder)) if s.name in keys else s,
                                   kind="stable").reset_index(drop=True)


def _cell(x) -> str:
    s = "" if x is None or (isinstance(x, float) and pd.isna(x)) else str(x)
    return s.replace("|", "\\|").replace("\n", " ")


def _subject_cell(r) -> str:
    subject, variant = _cell(r["subject"]), _cell(r["variant"])
    return (subject + (f" ({variant})" if variant else "")) or "—"


def ledger_markdown() -> str:
    """The README ledger: every claim, with each device's verdict or 'pending'; one row per
    subject (seed / analogue / arithmetic) and the rule that decided it."""
    v = collect_verdicts()
    lines = ["| ID | claim | seed figure (hardware) | subject | our figure | device | verdict | rule | notebook |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for cid, c in CLAIMS.items():
        rows = v[v["claim"] == cid] if len(v) else v
        if not len(rows):
            lines.append(f"| {cid} | {_cell(c.claim)} | {_cell(c.seed_figure)} ({_cell(c.seed_hardware)}) "
                         f"| — | — | — | pending | — | — |")
            continue
        for _, r in rows.iterrows():
            verdict = f"**{r['verdict']}**"
            if _cell(r["reason"]):          # caveats of a holds row are shown too
                verdict += f": {_cell(r['reason'])}"
            lines.append(f"| {cid} | {_cell(c.claim)} | {_cell(r['seed_figure'])} ({_cell(r['seed_hardware'])}) "
                         f"| {_subject_cell(r)} | {_cell(r['our_figure'])} | {_cell(r['device_name'])} "
                         f"| {verdict} | {_cell(r['rule']) or '—'} "
                         f"| `{_cell(r['notebook'])}` ({_cell(r['time'])[:10]}) |")
    return "\n".join(lines) + "\n"


BEGIN, END = "<!-- ledger:begin (generated by `python -m fp8lab claims`) -->", "<!-- ledger:end -->"


def render_readme(text: str) -> str:
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)
    if not pattern.search(text):
        raise ValueError(f"README has no ledger markers ({BEGIN} ... {END})")
    from . import peer_table, walltimes
    return peer_table.render_readme(walltimes.render(pattern.sub(lambda _: BEGIN + "\n" + ledger_markdown() + END, text)))


def update_readme(path: Path | None = None, check: bool = False) -> bool:
    """Rewrite the README's ledger; with check=True only report whether it is current.
    Returns True when the README was already current."""
    path = Path(path or repo_root() / "README.md")
    text = path.read_text()
    new = render_readme(text)
    if new == text:
        return True
    if not check:
        results.atomic_write_bytes(path, new.encode())
    return False
