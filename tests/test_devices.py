"""The spec sheet: every row complete, self-consistent and findable by the names
torch and nvidia-smi use."""

import math

import pytest

from fp8lab.facts import devices
from fp8lab.report import provenance

EXPECTED = {"l4", "l40s", "rtx-4090", "rtx-3090", "rtx-5090", "a100", "h100", "h200", "b200"}


def test_sheet_has_the_devices_the_issue_names():
    assert set(devices.SPECS) == EXPECTED


@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_row_is_complete_and_sourced(key):
    s = devices.get(key)
    assert s.key == key
    for field in ("sms", "boost_clock_mhz", "mem_bw_gbs", "l2_mib", "mem_gb", "fp32_tflops",
                  "bf16_tflops"):
        v = getattr(s, field)
        assert isinstance(v, (int, float)) and v > 0, (key, field, v)
    # a source that names where the numbers come from, not a placeholder
    assert len(s.source) > 40 and "nvidia" in s.source.lower()
    assert s.schedulers_per_sm == 4


@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_fp32_rate_matches_sms_lanes_and_clock(key):
    # an independent check on each row: the datasheet FP32 rate must follow from
    # SMs x FP32 lanes x 2 FLOP x boost clock (a typo in any of them shows here)
    s = devices.get(key)
    assert s.fp32_from_clock() == pytest.approx(s.fp32_tflops * 1e12, rel=0.015)


def test_precision_support_follows_the_architecture():
    for s in devices.SPECS.values():
        if s.arch == "Ampere":
            assert s.fp8_tflops is None and s.fp4_tflops is None, s.key
        else:
            assert s.fp8_tflops is not None, s.key
        assert (s.fp4_tflops is not None) == (s.arch == "Blackwell"), s.key


def test_dense_fp8_is_twice_dense_bf16_where_both_exist():
    # every part on the sheet doubles the tensor rate from 16-bit to 8-bit operands at
    # the same accumulate width; a sparse figure left un-halved would break this
    for s in devices.SPECS.values():
        if s.fp8_tflops is not None:
            assert s.fp8_tflops == pytest.approx(2 * s.bf16_tflops, rel=0.02), s.key


def test_ridge_points_match_the_h200_page():
    # /work/.library/device/H200.md: ~206 FLOP/byte dense bf16 on H200, ~295 on H100
    assert devices.get("h200").ridge_point("bf16") == pytest.approx(206, abs=1)
    assert devices.get("h100").ridge_point("bf16") == pytest.approx(295, abs=1)
    assert devices.get("rtx-3090").ridge_point("fp8") is None


def test_units():
    h = devices.get("h200")
    assert h.bandwidth_Bps == 4.8e12
    assert h.l2_bytes == 60 * 2**20
    assert h.peak_flops("fp8") == pytest.approx(1.979e15)
    assert h.issue_slots_per_s() == pytest.approx(132 * 4 * 1.98e9)
    with pytest.raises(ValueError, match="precision must be one of"):
        h.peak_flops("fp16")


@pytest.mark.parametrize("name,key", [
    ("NVIDIA H200", "h200"), ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA L40S", "l40s"),
    ("NVIDIA L4", "l4"), ("NVIDIA GeForce RTX 4090", "rtx-4090"),
    ("NVIDIA GeForce RTX 3090", "rtx-3090"), ("NVIDIA GeForce RTX 5090", "rtx-5090"),
    ("NVIDIA A100-SXM4-80GB", "a100"), ("NVIDIA B200", "b200"), ("h200", "h200"),
])
def test_spec_for_torch_names_and_data_keys(name, key):
    assert devices.spec_for(name).key == key
    # the data/ folder name fp8lab derives from the same device name finds the row too
    assert devices.spec_for(provenance.device_slug(name)).key == key


def test_unknown_and_bad_names():
    assert devices.spec_for("NVIDIA A10") is None
    assert devices.spec_for("NVIDIA L40") is None      # not the L40S, not the L4
    with pytest.raises(ValueError, match="non-empty"):
        devices.spec_for("")
    with pytest.raises(ValueError, match="known keys"):
        devices.get("v100")


def test_spec_table():
    df = devices.spec_table()
    assert set(df["key"]) == EXPECTED
    h = df.set_index("key").loc["h200"]
    assert h["ridge_fp8_flop_per_byte"] == pytest.approx(1979e12 / 4.8e12)
    assert math.isnan(df.set_index("key").loc["a100", "ridge_fp8_flop_per_byte"])
