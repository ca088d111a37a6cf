"""The spec sheet: datasheet ceilings for the GPUs fp8lab cares about.

Every number here is a *lead*, not a measurement: notebook 00 measures the real
ceilings on the card it runs on and shows them beside these, as a fraction.

Conventions (one per column, so rows compare):

* tensor rates are **dense** (NVIDIA datasheets print the 2:4-sparse figure, twice
  as large, with an asterisk; those are halved here) and with **FP32 accumulate**
  (GeForce parts run FP32-accumulate tensor math at half their FP16-accumulate
  rate; every GEMM in fp8lab accumulates in FP32, so that is the rate that binds);
* ``fp32_tflops`` is the plain CUDA-core rate, 2 FLOP per FMA;
* bandwidth is in GB/s (1e9 bytes/s), L2 in MiB, memory in GB as sold;
* ``boost_clock_mhz`` is the clock the datasheet rates were computed at;
* a rate the chip does not have (FP8 on Ampere, FP4 before Blackwell) is ``None``.

Each row names its source. Where a number is not on a vendor datasheet (SM count,
L2 size of some parts) the source says where it comes from and ``notes`` says how
sure it is.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Optional

__all__ = ["DeviceSpec", "SPECS", "get", "spec_for", "spec_table", "PRECISIONS"]

#: precision name -> DeviceSpec field with its dense TFLOP/s
PRECISIONS = {"fp32": "fp32_tflops", "bf16": "bf16_tflops", "fp8": "fp8_tflops",
              "fp4": "fp4_tflops"}


@dataclass(frozen=True)
class DeviceSpec:
    key: str                    # slug used in data/<key>/ (lower-case, no spaces)
    name: str                   # marketing name
    arch: str                   # Ampere / Ada / Hopper / Blackwell
    cc: str                     # compute capability, e.g. "9.0"
    sms: int
    boost_clock_mhz: float
    mem_bw_gbs: float           # GB/s, 1e9 bytes/s
    l2_mib: float
    mem_gb: float
    fp32_tflops: float          # CUDA cores, dense
    bf16_tflops: float          # tensor, dense, FP32 accumulate
    fp8_tflops: Optional[float]  # tensor e4m3/e5m2, dense, FP32 accumulate
    fp4_tflops: Optional[float]  # tensor e2m1 (NVFP4/MXFP4), dense
    source: str
    fp32_lanes_per_sm: int = 128  # FP32 FMA lanes per SM (64 on GA100)
    schedulers_per_sm: int = 4    # warp schedulers (issue slots per clock) per SM
    notes: str = ""

    # ---- derived quantities, all SI units ---------------------------------------
    @property
    def bandwidth_Bps(self) -> float:
        """Memory bandwidth in bytes/s."""
        return self.mem_bw_gbs * 1e9

    @property
    def l2_bytes(self) -> int:
        return int(self.l2_mib * 2**20)

    @property
    def clock_hz(self) -> float:
        return self.boost_clock_mhz * 1e6

    def peak_flops(self, precision: str) -> Optional[float]:
        """Dense peak in FLOP/s for 'fp32', 'bf16', 'fp8' or 'fp4' (None if absent)."""
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {sorted(PRECISIONS)}, got {precision!r}")
        v = getattr(self, PRECISIONS[precision])
        return None if v is None else v * 1e12

    def fp32_from_clock(self) -> float:
        """FP32 FLOP/s implied by SMs x lanes x 2 x boost clock: a consistency check
        on the row (it should match ``fp32_tflops`` within rounding)."""
        return self.sms * self.fp32_lanes_per_sm * 2 * self.clock_hz

    def issue_slots_per_s(self) -> float:
        """Warp-instruction issue capacity: SMs x schedulers x clock (one issue per
        scheduler per clock)."""
        return self.sms * self.schedulers_per_sm * self.clock_hz

    def ridge_point(self, precision: str) -> Optional[float]:
        """FLOP per byte at which this precision's peak meets the memory roof."""
        p = self.peak_flops(precision)
        return None if p is None else p / self.bandwidth_Bps


_ADA_WP = ("NVIDIA Ada Lovelace GPU architecture whitepaper v2.1, appendix A "
           "(images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf)")
_AMPERE_WP = ("NVIDIA Ampere GA102 GPU architecture whitepaper v2.1, appendix A "
              "(images.nvidia.com/aem-dam/en-zz/Solutions/geforce/ampere/pdf/"
              "NVIDIA-ampere-GA102-GPU-Architecture-Whitepaper-V1.pdf)")

_ROWS = [
    DeviceSpec(
        key="l4", name="NVIDIA L4", arch="Ada", cc="8.9", sms=58, boost_clock_mhz=2040,
        mem_bw_gbs=300, l2_mib=48, mem_gb=24,
        fp32_tflops=30.3, bf16_tflops=121.0, fp8_tflops=242.5, fp4_tflops=None,
        source=("NVIDIA L4 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/l4/): "
                "FP32 30.3, BF16 242 and FP8 485 TFLOPS with sparsity, 300 GB/s; "
                "SMs, clock, L2 from " + _ADA_WP),
        notes="tensor rates halved from the datasheet's sparse figures"),
    DeviceSpec(
        key="l40s", name="NVIDIA L40S", arch="Ada", cc="8.9", sms=142, boost_clock_mhz=2520,
        mem_bw_gbs=864, l2_mib=96, mem_gb=48,
        fp32_tflops=91.6, bf16_tflops=362.05, fp8_tflops=733.0, fp4_tflops=None,
        source=("NVIDIA L40S GPU datasheet (nvidia.com/en-us/data-center/l40s/): FP32 91.6, "
                "BF16 362.05 / 733 sparse, FP8 733 / 1466 sparse TFLOPS, 864 GB/s; "
                "SMs and L2 from the AD102 configuration in " + _ADA_WP),
        notes="data-centre Ada: FP32-accumulate tensor math at full rate"),
    DeviceSpec(
        key="rtx-4090", name="NVIDIA GeForce RTX 4090", arch="Ada", cc="8.9", sms=128,
        boost_clock_mhz=2520, mem_bw_gbs=1008, l2_mib=72, mem_gb=24,
        fp32_tflops=82.6, bf16_tflops=165.2, fp8_tflops=330.3, fp4_tflops=None,
        source=_ADA_WP + " (RTX 4090 column: BF16 with FP32 accumulate 165.2, "
                         "FP8 with FP32 accumulate 330.3 dense)",
        notes="GeForce: FP16-accumulate rates are twice these"),
    DeviceSpec(
        key="rtx-3090", name="NVIDIA GeForce RTX 3090", arch="Ampere", cc="8.6", sms=82,
        boost_clock_mhz=1695, mem_bw_gbs=936, l2_mib=6, mem_gb=24,
        fp32_tflops=35.6, bf16_tflops=71.0, fp8_tflops=None, fp4_tflops=None,
        source=_AMPERE_WP + " (RTX 3090 column: BF16 with FP32 accumulate 71 dense); "
                            "seed 003 quotes the same 71 TFLOPS at 1695 MHz and 936 GB/s",
        notes="no FP8 or FP4 tensor cores"),
    DeviceSpec(
        key="rtx-5090", name="NVIDIA GeForce RTX 5090", arch="Blackwell", cc="12.0", sms=170,
        boost_clock_mhz=2407, mem_bw_gbs=1792, l2_mib=96, mem_gb=32,
        fp32_tflops=104.8, bf16_tflops=209.5, fp8_tflops=419.0, fp4_tflops=1676.0,
        source=("NVIDIA RTX Blackwell GPU architecture whitepaper, appendix (RTX 5090: "
                "BF16 with FP32 accumulate 209.5 dense, FP8 with FP32 accumulate 419 dense, "
                "FP4 1676 dense / 3352 'AI TOPS' sparse), nvidia.com RTX 5090 page "
                "(170 SMs as 21,760 CUDA cores, 2.41 GHz boost, 1792 GB/s)"),
        notes=("GeForce: FP32-accumulate rates are half the FP16-accumulate ones; "
               "seed 003 uses 170 SMs, 2.41 GHz and 1792 GB/s")),
    DeviceSpec(
        key="a100", name="NVIDIA A100 SXM4 80GB", arch="Ampere", cc="8.0", sms=108,
        boost_clock_mhz=1410, mem_bw_gbs=2039, l2_mib=40, mem_gb=80,
        fp32_tflops=19.5, bf16_tflops=312.0, fp8_tflops=None, fp4_tflops=None,
        fp32_lanes_per_sm=64,
        source=("NVIDIA A100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/a100/): "
                "FP32 19.5, BF16 312 / 624 sparse TFLOPS, 2039 GB/s (80GB SXM); SMs, clock, "
                "L2 from the NVIDIA A100 Tensor Core GPU architecture whitepaper"),
        notes="GA100 has 64 FP32 lanes per SM"),
    DeviceSpec(
        key="h100", name="NVIDIA H100 SXM5 80GB", arch="Hopper", cc="9.0", sms=132,
        boost_clock_mhz=1980, mem_bw_gbs=3350, l2_mib=50, mem_gb=80,
        fp32_tflops=67.0, bf16_tflops=989.5, fp8_tflops=1979.0, fp4_tflops=None,
        source=("NVIDIA H100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h100/), "
                "SXM column: FP32 67, BF16 1979* and FP8 3958* TFLOPS (*sparse), 3.35 TB/s; "
                "SMs, clock and L2 from the NVIDIA H100 Tensor Core GPU architecture whitepaper"),
        notes="tensor rates halved from the datasheet's sparse figures"),
    DeviceSpec(
        key="h200", name="NVIDIA H200", arch="Hopper", cc="9.0", sms=132,
        boost_clock_mhz=1980, mem_bw_gbs=4800, l2_mib=60, mem_gb=141,
        fp32_tflops=67.0, bf16_tflops=989.5, fp8_tflops=1979.0, fp4_tflops=None,
        source=("NVIDIA H200 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h200/), "
                "SXM column: FP32 67, BF16 1979* and FP8 3958* TFLOPS (*sparse), 4.8 TB/s, "
                "141 GB; 132 SMs, 60 MiB L2 and 1980 MHz max SM clock read off the device "
                "(cudaGetDeviceProperties / NVML); seed 001 uses 67, 989.5, 1979 and 4.8"),
        notes="same SMs and clocks as H100 SXM; more and faster HBM3e"),
    DeviceSpec(
        key="b200", name="NVIDIA B200", arch="Blackwell", cc="10.0", sms=148,
        boost_clock_mhz=1980, mem_bw_gbs=8000, l2_mib=126, mem_gb=180,
        fp32_tflops=75.0, bf16_tflops=2250.0, fp8_tflops=4500.0, fp4_tflops=9000.0,
        source=("NVIDIA HGX B200 datasheet (nvidia.com/en-us/data-center/hgx/), 8-GPU totals "
                "divided by 8: FP32 600 -> 75, BF16 36 P* -> 2.25 P dense, FP8 72 P* -> 4.5 P, "
                "FP4 144 P* -> 9 P dense TFLOPS (*sparse), 64 TB/s -> 8 TB/s, 1.44 TB -> 180 GB; "
                "148 SMs from public device queries"),
        notes=("least certain row: the clock is the one implied by 75 TFLOPS FP32 on 148 SMs; "
               "public L2 figures for B200 disagree (65-126 MB): bench takes L2 from the "
               "device, not from this row")),
]

SPECS: dict[str, DeviceSpec] = {row.key: row for row in _ROWS}

# torch.cuda.get_device_name() / nvidia-smi spellings -> key. Order matters: the
# first pattern that matches wins, so the more specific ones come first.
_NAME_PATTERNS = [
    (r"\bl40s\b", "l40s"),
    (r"\bl4\b", "l4"),
    (r"rtx\s*4090", "rtx-4090"),
    (r"rtx\s*3090", "rtx-3090"),
    (r"rtx\s*5090", "rtx-5090"),
    (r"\ba100\b", "a100"),
    (r"\bh100\b", "h100"),
    (r"\bh200\b", "h200"),
    (r"\bb200\b", "b200"),
]


def get(key: str) -> DeviceSpec:
    """The row for a key ('h200', 'rtx-3090', ...); ValueError naming the known keys."""
    try:
        return SPECS[key]
    except KeyError:
        raise ValueError(f"no spec-sheet row {key!r}; known keys: {', '.join(SPECS)}") from None


def spec_for(name: str) -> Optional[DeviceSpec]:
    """The row for a device name as torch or nvidia-smi spell it ('NVIDIA H200',
    'NVIDIA GeForce RTX 3090', 'NVIDIA A100-SXM4-80GB') or for a data/ key ('h200').
    None when the card is not on the sheet (its notebook then shows measured
    ceilings without a spec column)."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"device name must be a non-empty string, got {name!r}")
    low = name.strip().lower()
    if low in SPECS:
        return SPECS[low]
    norm = re.sub(r"[-_]", " ", low)
    for pattern, key in _NAME_PATTERNS:
        if re.search(pattern, norm):
            return SPECS[key]
    return None


def spec_table():
    """The sheet as a DataFrame, one row per device, plus the derived columns the
    notebooks plot (ridge points in FLOP/byte)."""
    import pandas as pd

    rows = []
    for s in _ROWS:
        d = dataclasses.asdict(s)
        d["fp32_tflops_from_clock"] = s.fp32_from_clock() / 1e12
        for prec in ("bf16", "fp8", "fp4"):
            r = s.ridge_point(prec)
            d[f"ridge_{prec}_flop_per_byte"] = r
        rows.append(d)
    return pd.DataFrame(rows)
