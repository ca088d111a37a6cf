"""Roofline arithmetic, seed 001's derived decode floors (claim B4) and seed 003's
issue-slot model (claim C8).

Everything here is plain arithmetic on numbers passed in (spec-sheet rows from
``fp8lab.facts.devices`` or ceilings measured by notebook 00), so it runs anywhere and is
tested on CPU.

Units: FLOP, bytes, seconds, FLOP/s, bytes/s throughout; helpers that print use
TFLOP/s, GB/s and ms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Optional

import numpy as np

__all__ = [
    "attainable", "ridge_point", "arithmetic_intensity", "bound_times", "roofline_curve",
    "SEED001_B4", "b4_floors", "b4_compare",
    "issue_slot_utilisation", "NVFP4_BYTES_PER_ELEMENT", "SEED003_C8",
    "c8_seed_reproduction", "c8_predictions",
]


# ---------------------------------------------------------------------------------
# roofline
# ---------------------------------------------------------------------------------
def positive(name: str, v: float) -> float:
    """``v`` as a float, or ValueError unless it is a positive finite number."""
    v = float(v)
    if not (v > 0) or math.isinf(v):
        raise ValueError(f"{name} must be a positive finite number, got {v!r}")
    return v



def positive_array(name: str, x, what: str = "") -> np.ndarray:
    """``x`` as a float array, or ValueError unless every element is > 0 (``what``: its unit)."""
    x = np.asarray(x, dtype=float)
    if np.any(~(x > 0)):
        raise ValueError(f"{name} must be > 0{what}")
    return x


def scalar_or_array(out: np.ndarray):
    """A 0-d result as a float, anything else as it is (the functions here take either)."""
    return float(out) if out.ndim == 0 else out


def arithmetic_intensity(flop: float, nbytes: float) -> float:
    """FLOP per byte of device memory traffic."""
    return positive("flop", flop) / positive("bytes", nbytes)


def ridge_point(peak_flops: float, bandwidth_Bps: float) -> float:
    """Intensity (FLOP/byte) where the compute roof meets the memory roof."""
    return positive("peak_flops", peak_flops) / positive("bandwidth", bandwidth_Bps)


def attainable(intensity, peak_flops: float, bandwidth_Bps: float):
    """The roofline: min(peak, intensity x bandwidth), elementwise over intensity."""
    peak = positive("peak_flops", peak_flops)
    bw = positive("bandwidth", bandwidth_Bps)
    x = positive_array("intensity", intensity, " (FLOP per byte)")
    return scalar_or_array(np.minimum(peak, x * bw))


def bound_times(flop: float, nbytes: float, rates: Mapping[str, float],
                bandwidth_Bps: Optional[float] = None) -> dict:
    """Floor time (s) of a problem under each compute rate in ``rates`` (FLOP/s) and,
    if given, under the memory bandwidth (key 'memory'). The largest is the floor."""
    out = {k: positive("flop", flop) / positive(f"rate {k}", r) for k, r in rates.items()}
    if bandwidth_Bps is not None:
        out["memory"] = positive("bytes", nbytes) / positive("bandwidth", bandwidth_Bps)
    return out


def roofline_curve(peak_flops: float, bandwidth_Bps: float, lo: float = 1 / 8,
                   hi: float = 4096, n: int = 256):
    """(intensity, attainable FLOP/s) arrays on a log grid, for plotting."""
    if not (0 < lo < hi):
        raise ValueError(f"need 0 < lo < hi, got lo={lo} hi={hi}")
    x = np.geomspace(lo, hi, n)
    return x, attainable(x, peak_flops, bandwidth_Bps)


# ---------------------------------------------------------------------------------
# B4: seed 001's derived floors for a B=256 decode step on H200
# ---------------------------------------------------------------------------------
#: The seed's own inputs and its printed results (seed 001, "Derived cost"):
#: 4.238 G FP8 weight parameters (7 sites/layer x 43 layers), B = 256 tokens,
#: FLOP = 2 x 256 x 4.238e9 = 2.170 TFLOP over 4.238 GB of FP8 weights (1 byte each),
#: at the H200 rates it names. Its printed times are what B4 is checked against.
SEED001_B4 = {
    "params": 4.238e9,
    "batch": 256,
    "bytes_per_param": 1.0,
    "flop_printed": 2.170e12,
    "bytes_printed": 4.238e9,
    "rates": {  # what the seed used (FLOP/s and bytes/s)
        "fp32": 67e12, "bf16": 989.5e12, "fp8": 1979e12, "hbm": 4.8e12,
    },
    "times_ms_printed": {"fp32": 32.4, "bf16": 2.19, "fp8": 1.10, "hbm": 0.88},
    # the seed's measured scalar kernel (its own engine, not reproducible here)
    "scalar_measured_ms": 524.0,
    "scalar_fraction_of_fp32_printed": 0.068,
}


def b4_floors(fp32_flops: float, bf16_flops: float, fp8_flops: float,
              bandwidth_Bps: float, *, params: float = SEED001_B4["params"],
              batch: int = SEED001_B4["batch"],
              bytes_per_param: float = SEED001_B4["bytes_per_param"]) -> dict:
    """Floors (ms) of seed 001's decode step for the given rates: 2 x batch x params
    FLOP under each compute rate, params x bytes_per_param bytes under bandwidth."""
    flop = 2.0 * positive("batch", batch) * positive("params", params)
    nbytes = positive("params", params) * positive("bytes_per_param", bytes_per_param)
    t = bound_times(flop, nbytes, {"fp32": fp32_flops, "bf16": bf16_flops, "fp8": fp8_flops},
                    bandwidth_Bps)
    return {"flop": flop, "bytes": nbytes,
            "fp32": t["fp32"] * 1e3, "bf16": t["bf16"] * 1e3, "fp8": t["fp8"] * 1e3,
            "hbm": t["memory"] * 1e3}


def b4_compare(spec, measured: Optional[Mapping[str, float]] = None, tol: float = 0.02):
    """Seed 001's printed floors beside ours, as a DataFrame with one row per bound.

    ``spec`` is a DeviceSpec (the H200 row); ``measured`` optionally maps 'fp32',
    'bf16', 'fp8' (FLOP/s) and 'hbm' (bytes/s) to ceilings measured on a card.
    Column ``spec_matches_seed`` is True where our spec-sheet arithmetic lands within
    ``tol`` (relative) of the seed's printed number.
    """
    import pandas as pd

    s = SEED001_B4
    ours = b4_floors(spec.peak_flops("fp32"), spec.peak_flops("bf16"),
                     spec.peak_flops("fp8"), spec.bandwidth_Bps)
    meas = None
    if measured is not None:
        missing = {"fp32", "bf16", "fp8", "hbm"} - set(measured)
        if missing:
            raise ValueError(f"measured ceilings need keys fp32, bf16, fp8, hbm; missing {sorted(missing)}")
        meas = b4_floors(measured["fp32"], measured["bf16"], measured["fp8"], measured["hbm"])
    spec_rates = {"fp32": spec.peak_flops("fp32"), "bf16": spec.peak_flops("bf16"),
                  "fp8": spec.peak_flops("fp8"), "hbm": spec.bandwidth_Bps}
    rows = []
    for bound in ("fp32", "bf16", "fp8", "hbm"):
        seed_ms = s["times_ms_printed"][bound]
        rel = ours[bound] / seed_ms - 1.0
        rows.append({
            "bound": bound,
            "unit": "bytes/s" if bound == "hbm" else "FLOP/s",
            "seed_rate": s["rates"][bound],
            "seed_ms": seed_ms,
            "spec_rate": spec_rates[bound],
            "spec_ms": ours[bound],
            "spec_vs_seed": rel,
            "spec_matches_seed": abs(rel) <= tol,
            "measured_rate": None if meas is None else measured[bound],
            "measured_ms": None if meas is None else meas[bound],
        })
    df = pd.DataFrame(rows)
    df.attrs["flop"] = ours["flop"]
    df.attrs["bytes"] = ours["bytes"]
    return df


# ---------------------------------------------------------------------------------
# C8: seed 003's issue-slot model
# ---------------------------------------------------------------------------------
#: NVFP4 weight bytes per element: a 4-bit E2M1 code plus one E4M3 scale byte per 16
#: elements (the per-tensor FP32 scale is negligible). This is our derivation from the
#: format, not a number the seed prints.
NVFP4_BYTES_PER_ELEMENT = 0.5 + 1.0 / 16

#: What seed 003 states (section 6.8 and 4.3/4.4) that the C8 reproduction uses.
SEED003_C8 = {
    # thread instructions per weight element, NVFP4 Marlin at M=1 (ncu, per thread / (K x N))
    "nvfp4_instr_per_element": 3.66,
    # ncu's measured issue-slot use for NVFP4 on the 3090 and the model's printed predictions
    "rtx3090_issue_measured": 0.325,
    "rtx3090_issue_predicted": 0.32,
    "rtx5090_issue_predicted": 0.22,
    # Marlin's measured DRAM bandwidth use at M=1 on the 3090, all formats (section 4.3);
    # the NVFP4 row of the seed's table is not in our copy, so the range is used
    "rtx3090_dram_fraction_range": (0.91, 0.94),
    # SM clock the seed's ncu runs ran at (section 4.4: ncu fixed the clock at 1.69 GHz)
    "rtx3090_ncu_clock_hz": 1.69e9,
    # 5090: the seed's own spec inputs (section 6.8) and "bandwidth used up"
    "rtx5090_sms": 170, "rtx5090_clock_hz": 2.41e9, "rtx5090_bw_Bps": 1792e9,
    "rtx5090_dram_fraction": 1.0,
}


def issue_slot_utilisation(instr_per_element: float, elements_per_s: float, sms: int,
                           clock_hz: float, *, schedulers_per_sm: int = 4,
                           threads_per_instruction: int = 32) -> float:
    """Seed 003's model: utilisation = instructions per element x elements per second
    / issue capacity, with capacity = SMs x schedulers x clock.

    One scheduler issues one *warp* instruction per clock. The seed counts
    instructions per thread (ncu's thread-level counts divided by K x N), so a warp
    instruction retires ``threads_per_instruction`` (32) of them; pass 1 if
    ``instr_per_element`` is already in warp instructions.
    """
    ipe = positive("instr_per_element", instr_per_element)
    eps = positive("elements_per_s", elements_per_s)
    cap = (positive("sms", sms) * positive("schedulers_per_sm", schedulers_per_sm)
           * positive("clock_hz", clock_hz) * positive("threads_per_instruction",
                                                         threads_per_instruction))
    return ipe * eps / cap


def elements_per_s(bandwidth_Bps: float, dram_fraction: float, bytes_per_element: float) -> float:
    """Weight elements streamed per second by a DRAM-bound kernel."""
    if not (0 < dram_fraction <= 1.0):
        raise ValueError(f"dram_fraction must be in (0, 1], got {dram_fraction!r}")
    return positive("bandwidth", bandwidth_Bps) * dram_fraction / positive(
        "bytes_per_element", bytes_per_element)


def c8_seed_reproduction(spec_3090, spec_5090) -> dict:
    """The model's predictions with the seed's inputs, the spec sheet supplying SM
    counts and bandwidths. Returns the 3090 prediction at both ends of the seed's
    DRAM range and the 5090 prediction from our spec row and from the seed's own
    5090 numbers."""
    s = SEED003_C8
    ipe = s["nvfp4_instr_per_element"]
    b = NVFP4_BYTES_PER_ELEMENT
    lo, hi = s["rtx3090_dram_fraction_range"]
    u3090 = [issue_slot_utilisation(ipe, elements_per_s(spec_3090.bandwidth_Bps, f, b),
                                    spec_3090.sms, s["rtx3090_ncu_clock_hz"],
                                    schedulers_per_sm=spec_3090.schedulers_per_sm)
             for f in (lo, hi)]
    u5090_spec = issue_slot_utilisation(
        ipe, elements_per_s(spec_5090.bandwidth_Bps, s["rtx5090_dram_fraction"], b),
        spec_5090.sms, spec_5090.clock_hz, schedulers_per_sm=spec_5090.schedulers_per_sm)
    u5090_seed = issue_slot_utilisation(
        ipe, elements_per_s(s["rtx5090_bw_Bps"], s["rtx5090_dram_fraction"], b),
        s["rtx5090_sms"], s["rtx5090_clock_hz"])
    return {"rtx3090_low": u3090[0], "rtx3090_high": u3090[1],
            "rtx5090_spec": u5090_spec, "rtx5090_seed_inputs": u5090_seed}


def c8_predictions(specs, instr_per_element: float = SEED003_C8["nvfp4_instr_per_element"],
                   bytes_per_element: float = NVFP4_BYTES_PER_ELEMENT,
                   dram_fraction: float = 1.0):
    """Predicted issue-slot use of a DRAM-bound weight-only kernel on each spec-sheet
    device, at the datasheet bandwidth x ``dram_fraction`` and boost clock: how much
    instruction headroom dequantisation has before it, not DRAM, sets the time."""
    import pandas as pd

    rows = []
    for s in specs:
        eps = elements_per_s(s.bandwidth_Bps, dram_fraction, bytes_per_element)
        u = issue_slot_utilisation(instr_per_element, eps, s.sms, s.clock_hz,
                                   schedulers_per_sm=s.schedulers_per_sm)
        rows.append({"device": s.key, "name": s.name, "sms": s.sms,
                     "clock_mhz": s.boost_clock_mhz, "bandwidth_gbs": s.mem_bw_gbs,
                     "instr_per_element": instr_per_element,
                     "bytes_per_element": bytes_per_element, "dram_fraction": dram_fraction,
                     "elements_per_s": eps, "issue_utilisation": u,
                     # the instruction budget per element at which issue becomes the limit
                     "instr_per_element_at_full_issue": instr_per_element / u})
    return pd.DataFrame(rows)
