"""fp8lab.experiments.census: the ptxas type probe, the census of fp8lab-style kernel
sources, user binaries, and the C1 verdict logic (which must be able to say 'differs')."""

import shutil
from pathlib import Path

import pandas as pd
import pytest

from fp8lab import sass
from fp8lab.experiments import census
from fp8lab.tools import have_tool

FIX = Path(__file__).parent / "fixtures" / "sass"
needs_ptxas = pytest.mark.skipif(not (have_tool("ptxas") and have_tool("cuobjdump")),
                                 reason="ptxas and cuobjdump needed")
needs_nvcc = pytest.mark.skipif(not (have_tool("nvcc") and have_tool("cuobjdump")),
                                reason="nvcc and cuobjdump needed")


# ---------------------------------------------------------------------------------------
# The ptxas probe

@needs_ptxas
def test_probe_sm89_mma_sync():
    p = census.probe_mma_types(["sm_89"], ("bf16", "e4m3"), wgmma=False)
    assert len(p) == 4
    row = p.set_index(["a", "b"])
    assert bool(row.loc[("bf16", "bf16"), "accepted"])
    assert row.loc[("bf16", "bf16"), "sass_mma"] == "HMMA.16816.F32.BF16"
    assert bool(row.loc[("e4m3", "e4m3"), "accepted"])
    assert row.loc[("e4m3", "e4m3"), "sass_mma"] == "QMMA.16832.F32.E4M3.E4M3"
    for pair in (("bf16", "e4m3"), ("e4m3", "bf16")):
        assert not bool(row.loc[pair, "accepted"])
        assert row.loc[pair, "error"]  # ptxas said why
    c = census.probe_checks(p)
    assert c["n_mixed"] == 2 and c["n_mixed_accepted"] == 0 and c["controls_ok"]


@needs_ptxas
def test_probe_sm90_mma_sync_fp8_is_emulated_and_wgmma_is_not():
    p = census.probe_mma_types(["sm_90"], ("bf16", "e4m3"), wgmma=True)
    row = p.set_index(["instruction", "a", "b"])
    e4 = row.loc[("mma.sync", "e4m3", "e4m3")]
    assert bool(e4["accepted"])
    assert "QMMA" not in e4["sass_mma"] and e4["sass_mma"].startswith("HMMA")
    assert e4["sass_fp8_converts"] > 0
    wg = row.loc[("wgmma", "e4m3", "e4m3")]
    assert bool(wg["accepted"]) and wg["sass_mma"].startswith("QGMMA") and "E4M3" in wg["sass_mma"]
    assert row.loc[("wgmma", "bf16", "bf16"), "sass_mma"].startswith("HGMMA")
    assert not bool(row.loc[("wgmma", "bf16", "e4m3"), "accepted"])
    assert census.probe_checks(p)["n_mixed_accepted"] == 0


def test_probe_rejects_unknown_type():
    with pytest.raises(ValueError, match="probe types must be among"):
        census.probe_mma_types(["sm_89"], ("bf16", "fp4"))


# ---------------------------------------------------------------------------------------
# The verdict logic, on synthetic censuses (so every branch is exercised)

def _kernel(binary, kernel, opcodes, arch="sm_89"):
    return [dict(binary=binary, arch=arch, kernel=kernel, demangled=kernel, opcode=op,
                 family=sass.opcode_family(op), count=n) for op, n in opcodes.items()]


def _summary(rows):
    return census.kernel_summary(pd.DataFrame(rows).assign(arm=""))


def _probe(mixed_accepted=False, controls=True):
    rows = []
    for a, b in (("bf16", "bf16"), ("e4m3", "e4m3"), ("bf16", "e4m3"), ("e4m3", "bf16")):
        mixed = a != b
        acc = mixed_accepted if mixed else controls
        rows.append(dict(instruction="mma.sync", arch="sm_89", a=a, b=b, accepted=acc,
                         a_bits=16 if a == "bf16" else 8, b_bits=16 if b == "bf16" else 8,
                         mixed_16x8=mixed))
    return pd.DataFrame(rows)


A16_OK = _kernel("w.so", "gemm_w8a16_kernel", {"HMMA.16816.F32.BF16": 64, "LOP3.LUT": 200, "PRMT": 50})
A8_OK = _kernel("w.so", "gemm_w8a8_kernel", {"QMMA.16832.F32.E4M3.E4M3": 64})
A16_BAD = _kernel("w.so", "gemm_w4a16_kernel", {"QMMA.16832.F32.E4M3.E4M3": 8, "HMMA.16816.F32.BF16": 8})


def test_verdict_holds():
    v = census.c1_verdict(_summary(A16_OK + A8_OK), _probe())
    assert v["verdict"] == "holds", v
    assert "1/1 A16 kernels" in v["our_figure"]


def test_verdict_differs_when_a16_kernel_issues_qmma():
    v = census.c1_verdict(_summary(A16_OK + A8_OK + A16_BAD), _probe())
    assert v["verdict"] == "differs"
    assert "gemm_w4a16_kernel" in v["reason"]


def test_verdict_differs_when_ptxas_takes_a_mixed_pair():
    v = census.c1_verdict(_summary(A16_OK + A8_OK), _probe(mixed_accepted=True))
    assert v["verdict"] == "differs"


def test_verdict_holds_in_kind_without_a16_kernels():
    v = census.c1_verdict(_summary(A8_OK), _probe())
    assert v["verdict"] == "holds-in-kind"
    assert "A16 half was not observed" in v["reason"]


def test_verdict_broken_probe_is_not_evidence():
    v = census.c1_verdict(_summary(A8_OK), _probe(controls=False))
    assert v["verdict"] == "not-run"
    assert "probe controls" in v["reason"]


def test_verdict_not_run_with_nothing():
    v = census.c1_verdict(pd.DataFrame(), None)
    assert v["verdict"] == "not-run" and v["reason"]


def test_a8_emulated_noted():
    emul = _kernel("k.cubin", "gemm_w8a8_kernel",
                   {"HMMA.16816.F32": 16, "F2FP.F16.E4M3.UNPACK_B": 32}, arch="sm_90")
    s = _summary(A8_OK + emul)
    c = census.c1_checks(s)
    assert c["n_a8"] == 2 and c["n_a8_fp8_mma"] == 1
    assert c["a8_emulated"] == [{"label": "gemm_w8a8_kernel", "arch": "sm_90"}]
    assert "necessary for QMMA/QGMMA, not sufficient" in census.c1_verdict(s, _probe())["reason"]


# ---------------------------------------------------------------------------------------
# Census of kernel sources and binaries

@needs_nvcc
def test_census_fp8lab_sources(tmp_path):
    shutil.copy(FIX / "mma_pair.cu", tmp_path / "mma_pair.cu")
    (tmp_path / "mma_pair_ext.cu").write_text("#error a binding: the census must not compile me\n")
    (tmp_path / "broken.cu").write_text("__global__ void k() { this is not C++; }\n")
    cen, builds = census.census_fp8lab(["sm_80", "sm_89"], triton=False, kernels_dir=tmp_path)
    assert set(builds["arm"]) == {"mma_pair", "broken"}
    ok = builds.set_index(["arm", "arch"])["ok"]
    assert ok[("mma_pair", "sm_80")] and ok[("mma_pair", "sm_89")]
    assert not ok[("broken", "sm_80")]
    assert builds.set_index(["arm", "arch"]).loc[("broken", "sm_89"), "reason"]
    s = census.kernel_summary(cen).set_index(["arch", "kernel"])
    assert s.loc[("sm_89", "_Z8mma_e4m3ILi1EEvPKjS1_Pf"), "mma_families"] == "QMMA"
    assert s.loc[("sm_80", "mma_bf16"), "mma_families"] == "HMMA"
    assert set(s["arm"]) == {"mma_pair"}


def test_census_sources_skip_bindings(tmp_path):
    for name in ("a.cu", "a_ext.cu", "a_check.cu", "b.cuh"):
        (tmp_path / name).write_text("")
    assert [p.name for p in census.census_sources(tmp_path)] == ["a.cu"]


@pytest.mark.skipif(not have_tool("cuobjdump"), reason="cuobjdump needed")
def test_census_binaries(tmp_path, mma_pair_cubin):
    df = census.census_binaries([mma_pair_cubin], ["sm_89"], kernel_filter="e4m3")
    assert set(df["kernel"]) == {"_Z8mma_e4m3ILi1EEvPKjS1_Pf"}
    with pytest.raises(ValueError, match="holds no SASS for sm_80"):
        census.census_binaries([mma_pair_cubin], ["sm_80"])


def test_label_for_mma_blockwise():
    d = "void fp8lab::mma_blockwise_kernel<fp8lab::TileConfig<64, 128, 64, 64, 3>, 1, 0>(fp8lab::MmaParams)"
    assert census._label("mma_blockwise", "x", d) == "mma_blockwise per_block 64x128x128 w64x64 s3"
