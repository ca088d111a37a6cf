"""scripts/probes/decode_ablate.py patches copies of gemv_w16.cuh by exact text replacement. When
the header changes under it, a variant's replacement stops matching and the probe stops on the
GPU box, after its device time is spent (cpa4 / cpa5 did, once PDL moved the prologue). These
tests apply every variant to the header as it is now, with no GPU and no compiler."""
import importlib.util
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ablate():
    spec = importlib.util.spec_from_file_location("decode_ablate", ROOT / "scripts" / "probes" / "decode_ablate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_variant_patches_the_header_as_it_is(ablate, tmp_path):
    names = ablate.write_sources(str(tmp_path), list(ablate.VARIANTS))
    for n in names:
        text = (tmp_path / f"v_{n}.cuh").read_text()
        assert f"namespace wo_{n} {{" in text
    base = (tmp_path / "v_base.cuh").read_text()
    for n in names:
        if n != "base":
            assert (tmp_path / f"v_{n}.cuh").read_text() != base.replace("wo_base", f"wo_{n}"), n


def test_a_replacement_that_no_longer_matches_stops_the_probe(ablate):
    with pytest.raises(SystemExit, match="matched 0 times"):
        ablate.variant_header("int x;\n", "gone", [("int y;", "int z;")])


@pytest.mark.parametrize("nt", [1, 2])
def test_the_kernels_are_instantiated_at_the_tile_count_of_m(ablate, nt):
    cu = ablate.kernels_cu(["base", "act3"], nt)
    assert f"launch_gemv<fp8lab::wo_act3::kFp8, true, {nt}>" in cu
    assert f"occupancy_gemv<fp8lab::wo_base::kFp8, true, {nt}>" in cu


def test_act3_keeps_one_barrier_per_chunk_and_three_buffers(ablate, tmp_path):
    ablate.write_sources(str(tmp_path), ["base", "act3"])
    base = (tmp_path / "v_base.cuh").read_text()
    act3 = (tmp_path / "v_act3.cuh").read_text()
    assert base.count("__syncthreads();") - act3.count("__syncthreads();") == 1
    assert "(it % 3) * kBufBytes" in act3          # split-K's body; stream-K's keeps its two buffers
    assert base.count("(it & 1) * kBufBytes") - act3.count("(it & 1) * kBufBytes") == 1
    assert "3 * act_buf_bytes<NT>()" in act3


def test_bad_m_is_one_line(ablate, capsys):
    with pytest.raises(SystemExit):
        ablate.main(["--m", "65"])
    assert "--m must be 1..64" in capsys.readouterr().err
