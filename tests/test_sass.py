"""fp8lab.toolchain.sass: parsing real cuobjdump / nvdisasm output, opcode families, binaries.

The *.sass.txt fixtures are real cuobjdump output of tests/fixtures/sass/mma_pair.cu
(how they were made is in that file's header). Tests that run the tools skip when the
tool is missing.
"""

import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import pandas as pd
import pytest

from fp8lab.toolchain import sass
from fp8lab.toolchain.tools import have_tool

FIX = Path(__file__).parent / "fixtures" / "sass"
E4M3_MANGLED = "_Z8mma_e4m3ILi1EEvPKjS1_Pf"

needs_cuobjdump = pytest.mark.skipif(not have_tool("cuobjdump"), reason="cuobjdump not installed")
needs_nvcc = pytest.mark.skipif(not have_tool("nvcc"), reason="nvcc not installed")


def _text(name):
    return (FIX / name).read_text().splitlines()


def _count_instruction_lines(lines):
    """An independent count: every line with an address comment /*xxxx*/ is one instruction."""
    return sum(1 for ln in lines if re.match(r"^\s*/\*[0-9a-f]{4}\*/\s+\S", ln))


# ---------------------------------------------------------------------------------------
# Single lines

@pytest.mark.parametrize("line, opcode", [
    ("        /*0070*/                   HMMA.16816.F32.BF16 R4, R8, R12, R4 ;   /* 0x0000000c0808723c */",
     "HMMA.16816.F32.BF16"),
    ("        /*0100*/                   @!UPT UIADD3 URZ, URZ, URZ, URZ ;   /* 0x0000003f3f3ff290 */", "UIADD3"),
    ("        /*0100*/                   @P0 BRA 0x2a0 ;", "BRA"),
    ("        /*0100*/                   @!PT LDS RZ, [RZ] ;", "LDS"),
    ("        /*0100*/                   @!P6 STG.E.128 desc[UR4][R2.64], R8 ;", "STG.E.128"),
    ("        /*01f0*/                   NOP;                                   /* 0x0000000000007918 */", "NOP"),
    ("        /*0170*/                   BRA 0x170;", "BRA"),
    ("        /*0160*/                   EXIT ;", "EXIT"),
    ("        /*2080*/                   QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR12], RZ, !UPT ;", 
     "QGMMA.64x128x32.F32.E4M3.E4M3"),
    # The second line of an sm_80/sm_89 instruction carries only its control bits.
    ("                                                          /* 0x000fe40000000f00 */", None),
    ("\t\tFunction : mma_bf16", None),
    ("\tcode for sm_89", None),
    ("", None),
])
def test_parse_instruction(line, opcode):
    assert sass.parse_instruction(line) == opcode


@pytest.mark.parametrize("opcode, family", [
    ("HMMA.16816.F32.BF16", "HMMA"),
    ("HMMA.16816.F32", "HMMA"),
    ("QMMA.16832.F32.E4M3.E4M3", "QMMA"),
    ("QGMMA.64x128x32.F32.E4M3.E4M3", "QGMMA"),
    ("HGMMA.64x128x16.F32.BF16", "HGMMA"),
    ("IMMA.16832.S8.S8", "IMMA"),
    ("HFMA2.MMA", "HFMA2"),          # the FMA pipe, not a tensor core op, despite ".MMA"
    ("F2FP.BF16.F32.PACK_AB", "F2FP.BF16"),   # epilogue pack of fp32 accumulators
    ("F2FP.BF16.PACK_AB", "F2FP.BF16"),       # sm_80 spelling of the same
    ("F2FP.F16.E4M3.UNPACK_B", "F2FP.FP8"),   # weight / operand dequant
    ("F2FP.SATFINITE.E4M3.F32.PACK_AB_MERGE_C", "F2FP.FP8"),  # activation quantise
    ("F2FP.F16.E2M1.UNPACK_B", "F2FP.FP4"),
    ("F2F.F16.F32", "F2F"),
    ("I2F.U32.RP", "I2F"),
    ("LOP3.LUT", "LOP3"),
    ("SHF.R.U32.HI", "SHF"),
    ("LDG.E.128.CONSTANT", "LDG"),
    ("LDSM.16.M88.4", "LDSM"),
    ("STL.64", "STL"),
    ("PRMT", "PRMT"),
])
def test_opcode_family(opcode, family):
    assert sass.opcode_family(opcode) == family


@pytest.mark.parametrize("opcode, acc_ops, bits", [
    ("HMMA.16816.F32", ("f32", "f16"), 16),          # fp16 operands are not spelled out
    ("HMMA.16816.F16", ("f16", "f16"), 16),
    ("HMMA.16816.F32.BF16", ("f32", "bf16"), 16),
    ("HMMA.1684.F32.TF32", ("f32", "tf32"), 19),
    ("QMMA.16832.F32.E4M3.E5M2", ("f32", "e4m3.e5m2"), 8),
    ("QGMMA.64x128x32.F32.E4M3.E4M3", ("f32", "e4m3.e4m3"), 8),
    ("HGMMA.64x8x16.F32.BF16", ("f32", "bf16"), 16),
    ("IMMA.16832.S8.S8", ("s32", "s8.s8"), 8),
    ("FFMA", None, None),
])
def test_mma_operands(opcode, acc_ops, bits):
    assert sass.mma_operands(opcode) == acc_ops
    assert sass.mma_operand_bits(opcode) == bits


# ---------------------------------------------------------------------------------------
# Whole fixtures (real cuobjdump output)

def test_parse_sm80_fixture():
    lines = _text("mma_pair_sm_80.sass.txt")
    df = sass.parse_sass(lines, binary="x.cubin")
    assert list(df.columns) == sass.COLUMNS
    assert set(df["arch"]) == {"sm_80"}
    assert set(df["kernel"]) == {"mma_bf16", E4M3_MANGLED}
    assert int(df["count"].sum()) == _count_instruction_lines(lines)
    bf16 = df[df["kernel"] == "mma_bf16"].set_index("opcode")["count"]
    assert bf16["HMMA.16816.F32.BF16"] == 1
    # sm_80 has no e4m3 mma: the e4m3 kernel compiled without its mma (the #if in the .cu).
    e4 = df[df["kernel"] == E4M3_MANGLED]
    assert not e4["family"].str.endswith("MMA").any()


def test_parse_sm89_fixture_has_qmma():
    lines = _text("mma_pair_sm_89.sass.txt")
    df = sass.parse_sass(lines)
    assert int(df["count"].sum()) == _count_instruction_lines(lines)
    s = sass.mma_summary(df).set_index("kernel")
    assert s.loc[E4M3_MANGLED, "mma_families"] == "QMMA"
    assert s.loc[E4M3_MANGLED, "mma_types"] == "QMMA:e4m3.e4m3"
    assert s.loc[E4M3_MANGLED, "operand_bits"] == 8
    assert s.loc[E4M3_MANGLED, "mma_fp8"] == 1
    assert s.loc["mma_bf16", "mma_types"] == "HMMA:bf16"
    assert s.loc["mma_bf16", "operand_bits"] == 16
    assert s.loc["mma_bf16", "mma_fp8"] == 0


def test_parse_sm90_fixture_e4m3_mma_sync_becomes_hmma():
    """On sm_90 ptxas runs mma.sync e4m3 as 12 FP8->F16 unpacks and two f16 HMMAs."""
    lines = _text("mma_pair_sm_90.sass.txt")
    df = sass.parse_sass(lines)
    assert int(df["count"].sum()) == _count_instruction_lines(lines)
    e4 = df[df["kernel"] == E4M3_MANGLED].set_index("opcode")["count"]
    assert e4["HMMA.16816.F32"] == 2
    assert e4["F2FP.F16.E4M3.UNPACK_B"] == 12
    assert "QMMA.16832.F32.E4M3.E4M3" not in e4
    s = sass.mma_summary(df).set_index("kernel")
    assert s.loc[E4M3_MANGLED, "mma_fp8"] == 0
    assert s.loc[E4M3_MANGLED, "fp8_converts"] == 12
    assert s.loc[E4M3_MANGLED, "mma_types"] == "HMMA:f16"


def test_nvdisasm_fixture_matches_cuobjdump():
    a = sass.parse_sass(_text("mma_pair_sm_90.sass.txt"))
    b = sass.parse_sass(_text("mma_pair_sm_90.nvdisasm.txt"))
    assert set(b["arch"]) == {"sm_90"}
    key = ["kernel", "opcode"]
    mma = lambda d: d[d["family"].str.endswith("MMA") | d["family"].str.startswith("F2FP")]  # noqa: E731
    assert mma(a).set_index(key)["count"].to_dict() == mma(b).set_index(key)["count"].to_dict()


def test_fatbin_with_several_elfs():
    """A shared object's dump: empty ELFs, then one ELF per arch; arch taken per ELF."""
    lines = _text("pair_so.sass.txt")
    df = sass.parse_sass(lines, binary="pair.so")
    assert int(df["count"].sum()) == _count_instruction_lines(lines)
    assert set(df["arch"]) == {"sm_80", "sm_89"}
    s = sass.mma_summary(df).set_index(["arch", "kernel"])
    assert s.loc[("sm_89", E4M3_MANGLED), "mma_families"] == "QMMA"
    assert s.loc[("sm_80", E4M3_MANGLED), "mma_families"] == "none"
    only89 = sass.parse_sass(lines, arch="sm_89")
    assert set(only89["arch"]) == {"sm_89"}
    only_bf16 = sass.parse_sass(lines, kernel_filter=r"bf16")
    assert set(only_bf16["kernel"]) == {"mma_bf16"}


def test_duplicate_kernel_counted_once():
    lines = _text("mma_pair_sm_89.sass.txt")
    twice = lines + ["", "Fatbin elf code:", "================", "arch = sm_89", ""] + lines
    df = sass.parse_sass(twice)
    assert df.attrs["duplicates"] == 2
    assert int(df["count"].sum()) == _count_instruction_lines(lines)


def test_parse_streams_a_generator_of_many_kernels():
    """Large binaries are streamed: parse_sass takes any iterator, and keeps no text."""
    def gen(n_kernels=3000):
        yield "\tcode for sm_80"
        for i in range(n_kernels):
            yield f"\t\tFunction : k{i}"
            for j in range(10):
                op = "HMMA.16816.F32.BF16" if j == 3 else "FFMA"
                yield f"        /*{j * 16:04x}*/                   {op} R1, R2, R3, R4 ;"
                yield "                                                   /* 0x000fe40000000f00 */"
    df = sass.parse_sass(gen())
    assert df["kernel"].nunique() == 3000
    assert int(df.loc[df["family"] == "HMMA", "count"].sum()) == 3000
    assert int(df["count"].sum()) == 30000


# ---------------------------------------------------------------------------------------
# Classification

def _vllm_scalar_type_id(exponent, mantissa, signed, bias=0, finite_values_only=False, nan_repr=0):
    """vLLM's ScalarType::id() packing (csrc/core/scalar_type.hpp), written out here
    independently of fp8lab.toolchain.sass's decoder."""
    fields = [(exponent, 8), (mantissa, 8), (int(signed), 1), (bias & 0xFFFFFFFF, 32),
              (int(finite_values_only), 1), (nan_repr, 8)]
    out, off = 0, 0
    for v, bits in fields:
        out |= (v & ((1 << bits) - 1)) << off
        off += bits
    return out


@pytest.mark.parametrize("name, act", [
    ("void marlin::Marlin<__nv_bfloat16, 1099528409600L, 256, 1, 8, 8, true, false, 0>(int4 const*)", "A16"),
    ("void marlin::Marlin<half, 1099528409600L, 256, 1, 8, 8, true, false, 0>(int4 const*)", "A16"),
    (f"void marlin::Marlin<{_vllm_scalar_type_id(8, 7, True)}l, 3l, 5l, 256, 1>(int4 const*)", "A16"),
    (f"void marlin::Marlin<{_vllm_scalar_type_id(5, 10, True)}l, 3l, 5l, 256, 1>(int4 const*)", "A16"),
    (f"void marlin::Marlin<{_vllm_scalar_type_id(4, 3, True, 0, True, 2)}l, 3l, 5l, 256>(int4 const*)", "A8"),
    (f"void marlin_moe_wna16::Marlin<{_vllm_scalar_type_id(0, 7, True)}l, 3l>(int4 const*)", "A8"),
    ("void gemv_w8a16_fp8_kernel<128>(unsigned char const*)", "A16"),
    ("void marlin_moe_wna16::permute_cols_kernel(int4 const*)", "A16"),
    ("cutlass::Kernel<cutlass_w8a8_fp8_blockwise>(Params)", "A8"),
    ("void fused_add_rms_norm_kernel<float>(float*)", "unknown"),
])
def test_classify_activation(name, act):
    got, rule = sass.classify_activation(name)
    assert got == act, rule


def test_mma_summary_empty():
    s = sass.mma_summary(pd.DataFrame(columns=sass.COLUMNS))
    assert len(s) == 0 and "mma_families" in s.columns


# ---------------------------------------------------------------------------------------
# Real binaries through cuobjdump

@needs_cuobjdump
def test_cubin_census_and_demangle(mma_pair_cubin):
    df = sass.sass_census(mma_pair_cubin)
    assert set(df["binary"]) == {"mma_pair_sm_89.cubin"}
    assert set(df["arch"]) == {"sm_89"}
    # the census equals a parse of cuobjdump's own text for the same cubin
    from fp8lab.toolchain.tools import run_tool
    raw = sass.parse_sass(run_tool("cuobjdump", ["-sass", mma_pair_cubin]).stdout.splitlines())
    key = ["kernel", "opcode"]
    assert df.set_index(key)["count"].to_dict() == raw.set_index(key)["count"].to_dict()
    # and its tensor-core instructions are those of the committed cuobjdump fixture
    ref = sass.parse_sass(_text("mma_pair_sm_89.sass.txt"))
    mma = lambda d: {k: v for k, v in d.set_index(key)["count"].to_dict().items() if "MMA" in k[1]}  # noqa: E731
    assert mma(df) == mma(ref) and mma(df)
    dm = dict(zip(df["kernel"], df["demangled"]))
    if shutil.which("cu++filt") or shutil.which("c++filt"):
        assert dm[E4M3_MANGLED].startswith("void mma_e4m3<1>(")
    assert dm["mma_bf16"] == "mma_bf16"  # extern "C": nothing to demangle
    # cuobjdump ignores -arch for a bare cubin; the parser filters anyway.
    assert len(sass.sass_census(mma_pair_cubin, arch="sm_90")) == 0


@pytest.fixture(scope="module")
def pair_so(tmp_path_factory):
    if not have_tool("nvcc"):
        pytest.skip("nvcc not installed")
    out = tmp_path_factory.mktemp("so") / "_C.so"
    subprocess.run(["nvcc", "-shared", "-Xcompiler", "-fPIC", "-cudart", "shared",
                    "-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_89,code=sm_89",
                    "-o", str(out), str(FIX / "mma_pair.cu")], check=True, capture_output=True)
    return out


@needs_cuobjdump
def test_shared_object_census(pair_so):
    df = sass.sass_census(pair_so)
    assert set(df["arch"]) == {"sm_80", "sm_89"}
    s = sass.mma_summary(df).set_index(["arch", "kernel"])
    assert s.loc[("sm_89", E4M3_MANGLED), "mma_types"] == "QMMA:e4m3.e4m3"
    assert s.loc[("sm_80", "mma_bf16"), "mma_types"] == "HMMA:bf16"
    only = sass.sass_census(pair_so, arch="sm_80")
    assert set(only["arch"]) == {"sm_80"}


@needs_cuobjdump
def test_wheel_census(pair_so, tmp_path):
    if not shutil.which("gcc"):
        pytest.skip("gcc needed for the host-only shared object")
    host = tmp_path / "host.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-x", "c", "-", "-o", str(host)],
                   input="int f(void) { return 1; }\n", text=True, check=True)
    whl = tmp_path / "fakepkg-0.1-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.write(pair_so, "fakepkg/_C.abi3.so")
        z.write(host, "fakepkg/_host.so")
        z.writestr("fakepkg/__init__.py", "")
        z.writestr("fakepkg-0.1.dist-info/METADATA", "Name: fakepkg\n")
    df = sass.sass_census(whl)
    assert set(df["binary"]) == {f"{whl.name}!fakepkg/_C.abi3.so"}
    assert df.attrs["skipped"] == ["fakepkg/_host.so"]
    assert "QMMA.16832.F32.E4M3.E4M3" in set(df["opcode"])
    # A wheel with no device code at all is an error, not an empty table.
    empty = tmp_path / "hostonly-0.1-py3-none-any.whl"
    with zipfile.ZipFile(empty, "w") as z:
        z.write(host, "hostonly/_host.so")
    with pytest.raises(ValueError, match="no shared object or cubin"):
        sass.sass_census(empty)


# ---------------------------------------------------------------------------------------
# Bad input

def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file"):
        sass.sass_census(tmp_path / "nope.so")


def test_not_a_binary(tmp_path):
    p = tmp_path / "notes.so"
    p.write_text("hello, not an ELF\n")
    with pytest.raises(ValueError, match="not a CUDA binary"):
        sass.sass_census(p)


def test_directory(tmp_path):
    with pytest.raises(ValueError, match="must be a file"):
        sass.sass_census(tmp_path)


def test_bad_zip(tmp_path):
    p = tmp_path / "broken.whl"
    p.write_bytes(b"PK\x03\x04" + b"\0" * 20)
    with pytest.raises(ValueError, match="not a valid wheel"):
        sass.sass_census(p)


@needs_cuobjdump
def test_elf_without_device_code(tmp_path):
    if not shutil.which("gcc"):
        pytest.skip("gcc needed")
    host = tmp_path / "host.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-x", "c", "-", "-o", str(host)],
                   input="int f(void) { return 1; }\n", text=True, check=True)
    with pytest.raises(sass.NoDeviceCode, match="no CUDA device code"):
        sass.sass_census(host)
    assert issubclass(sass.NoDeviceCode, ValueError)


@pytest.mark.parametrize("arch", ["hopper", "sm9", "compute_90", ""])
def test_bad_arch(arch):
    with pytest.raises(ValueError, match="arch must look like"):
        sass.normalise_arch(arch)


def test_good_arch_spellings():
    assert sass.normalise_arch(90) == "sm_90"
    assert sass.normalise_arch("sm90") == "sm_90"
    assert sass.normalise_arch("sm_90a") == "sm_90a"
