"""vLLM's Marlin GEMMs built from kernels-community's copy of their source (fp8lab.peers.vllm_marlin):
the gather, what a missing source or build says, and the package over its operators."""
import subprocess
import sys
import types
from pathlib import Path

import pytest

from fp8lab.peers import discover, vllm_marlin
from fp8lab.peers.discover import PeerUnavailable

ROOT = Path(__file__).resolve().parent.parent


def _fake_kernels_community(tmp_path) -> Path:
    """A git repository laid out as kernels-community's vllm-quantization, with one file more."""
    repo = tmp_path / "kc"
    base = repo / vllm_marlin.KC_DIR
    for rel in (*vllm_marlin.CU_SOURCES, "gptq_marlin/kernel.h", "core/scalar_type.hpp", "core/other.hpp",
                "torch-ext/vllm_quantization/scalar_type.py", "torch-ext/vllm_quantization/marlin.py",
                "torch-ext/vllm_quantization/utils/marlin_utils.py", "tests/test_x.py",
                "cutlass_w8a8/c3x/scaled_mm_blockwise_sm90_fp8.cu", "cutlass_extensions/common.hpp", "core/math.hpp",
                "cutlass_w8a8/scaled_mm_c2x.cu"):
        (base / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / rel).write_text(f"// {rel}\n")
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    return repo / ".git"


def test_gather_unpacks_only_what_the_build_reads_without_the_folder_prefix(tmp_path):
    git_dir = _fake_kernels_community(tmp_path)
    dest = tmp_path / "src"
    commit = vllm_marlin.gather(dest, str(git_dir), commit="HEAD")
    assert len(commit) == 40
    assert (dest / "gptq_marlin" / "gptq_marlin.cu").exists() and (dest / "core" / "scalar_type.hpp").exists()
    assert not (dest / "core" / "other.hpp").exists() and not (dest / "tests").exists()
    # vLLM's CUTLASS blockwise GEMM builds from vLLM's sdist now (fp8lab.peers.vllm_cutlass), not from this unpack
    assert not (dest / "cutlass_w8a8").exists() and not (dest / "cutlass_extensions").exists()
    assert not (dest / vllm_marlin.KC_DIR).exists()
    assert vllm_marlin.source_stamp(dest)["commit"] == commit
    assert vllm_marlin.missing_source(dest) is None
    # again: replaced, not mixed; files it did not unpack are never replaced
    assert vllm_marlin.gather(dest, str(git_dir), commit="HEAD") == commit
    other = tmp_path / "other"
    other.mkdir()
    (other / "mine.txt").write_text("x")
    with pytest.raises(FileExistsError):
        vllm_marlin.gather(other, str(git_dir), commit="HEAD")
    assert (other / "mine.txt").exists()


def test_peers_offline_gathers_it_from_a_local_git_directory(tmp_path):
    git_dir = _fake_kernels_community(tmp_path)
    head = subprocess.run(["git", f"--git-dir={git_dir}", "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    dest = tmp_path / "dest"
    code = (f"import sys; sys.path.insert(0, {str(ROOT / 'scripts')!r}); sys.path.insert(0, {str(ROOT)!r}); "
            f"from fp8lab.peers import vllm_marlin; vllm_marlin.KC_COMMIT = {head!r}; "
            "import peers_offline; sys.exit(peers_offline.main(sys.argv[1:]))")
    r = subprocess.run([sys.executable, "-c", code, "--sources", "--source-peers", "vllm-marlin",
                        "--kernels-community-git", str(git_dir), "--vllm-marlin-dest", str(dest)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "vLLM Marlin (kernels-community vllm-quantization)" in r.stdout
    assert (dest / "gptq_marlin" / "kernel_bf16_kfe4m3fn.cu").exists()


def test_a_missing_source_or_build_is_one_line_with_what_to_run(tmp_path, monkeypatch):
    monkeypatch.setenv(vllm_marlin.SRC_ENV, str(tmp_path / "nothing"))
    monkeypatch.setenv(vllm_marlin.BUILD_ENV, str(tmp_path / "nobuild"))
    why = vllm_marlin.missing_source()
    assert why.startswith(f"vLLM Marlin's source is not at {tmp_path / 'nothing'}") and "peers_offline.py" in why
    with pytest.raises(PeerUnavailable, match="peers_offline.py"):
        vllm_marlin.package()
    assert vllm_marlin.prebuild_ready() == (False, why)
    discover.reset()
    for peer in ("peer_vllm_marlin_fp8", "peer_vllm_marlin_int8", "peer_vllm_marlin_int4"):
        a = discover.availability(peer, sm=90)
        assert not a.ok and "\n" not in a.reason and "peers_offline.py" in a.install
    discover.reset()


def test_a_source_without_a_build_says_to_build_it(tmp_path, monkeypatch):
    git_dir = _fake_kernels_community(tmp_path)
    src = tmp_path / "src"
    vllm_marlin.gather(src, str(git_dir), commit="HEAD")
    monkeypatch.setenv(vllm_marlin.SRC_ENV, str(src))
    monkeypatch.setenv(vllm_marlin.BUILD_ENV, str(tmp_path / "nobuild"))
    with pytest.raises(PeerUnavailable, match="python -m fp8lab.peers build vllm-marlin"):
        vllm_marlin.package()
    assert vllm_marlin.built() is None


def test_the_cli_refuses_to_build_without_its_source_in_one_line(tmp_path):
    import os

    env = {**os.environ, vllm_marlin.SRC_ENV: str(tmp_path / "nothing"), vllm_marlin.BUILD_ENV: str(tmp_path / "b")}
    r = subprocess.run([sys.executable, "-m", "fp8lab.peers", "build", "vllm-marlin"], capture_output=True,
                       text=True, timeout=120, cwd=str(ROOT), env=env)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().startswith("cannot build vLLM Marlin: ") and len(r.stderr.strip().splitlines()) == 1


def test_the_catalog_rows_are_source_builds_with_the_c4_pair():
    from fp8lab.arms import peer_catalog

    rows = {p: peer_catalog.get(p) for p in ("peer_vllm_marlin_fp8", "peer_vllm_marlin_int8", "peer_vllm_marlin_int4")}
    assert all(r.discover == "build" and r.module == "fp8lab_vllm_marlin" and r.carries for r in rows.values())
    fp8, int8 = rows["peer_vllm_marlin_fp8"], rows["peer_vllm_marlin_int8"]
    # the pair differs only in dequant: one byte per weight, one scale per output channel each
    assert (fp8.fmt, int8.fmt) == ("fp8", "int8") and fp8.group == int8.group == 0 and fp8.scales == int8.scales


@pytest.mark.torch
@pytest.mark.skipif(vllm_marlin.missing_source() is not None, reason="vLLM Marlin's source is not unpacked here")
def test_its_python_utilities_import_over_stand_in_operators():
    pytest.importorskip("torch")
    ops = types.SimpleNamespace(gptq_marlin_gemm=lambda *a: None, gptq_marlin_repack=lambda *a: None)
    for k in [k for k in sys.modules if k.startswith(vllm_marlin.PACKAGE)]:
        del sys.modules[k]
    try:
        pkg = vllm_marlin.assemble(vllm_marlin.src_dir(), ops)
        assert callable(pkg.marlin_utils_test.marlin_quantize) and callable(pkg.marlin_utils_fp8.marlin_quant_fp8_torch)
        st = pkg.scalar_types
        assert (st.uint4b8.size_bits, st.uint8b128.size_bits, st.float8_e4m3fn.size_bits) == (4, 8, 8)
        assert sys.modules[vllm_marlin.PACKAGE + "._ops"].ops is ops
    finally:
        for k in [k for k in sys.modules if k.startswith(vllm_marlin.PACKAGE)]:
            del sys.modules[k]


def test_a_git_directory_without_the_pinned_commit_is_one_line(tmp_path):
    git_dir = _fake_kernels_community(tmp_path)
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "peers_offline.py"), "--sources", "--source-peers",
                        "vllm-marlin", "--kernels-community-git", str(git_dir), "--vllm-marlin-dest",
                        str(tmp_path / "d")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith(f"vLLM Marlin not gathered: {git_dir} does not hold "
                                                        "kernels-community commit 8836a017f1ba")


# ------------------------------------------------------------------------------ GPU
@pytest.mark.gpu
@pytest.mark.parametrize("peer", ["peer_vllm_marlin_fp8", "peer_vllm_marlin_int8", "peer_vllm_marlin_int4"])
@pytest.mark.parametrize("N, K, M", [(192, 384, 1), (320, 1280, 7), (1088, 2304, 33), (4160, 896, 129)])
def test_vllm_marlin_is_right_at_shapes_it_was_not_tuned_on(peer, N, K, M):
    """Each of vLLM's Marlin GEMMs built here, on odd shapes its layouts take (N % 64, K % 128),
    checked on every row against float64 on the weights its own quantiser encoded, with a
    NaN-poisoned output allocation (harness.check): nothing left unwritten, relative error < 1e-2.
    Skips only where the source was never unpacked; a source that does not build or probe fails."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    if vllm_marlin.missing_source() is not None:
        pytest.skip(vllm_marlin.missing_source())
    from fp8lab.peers import adapters, harness

    if vllm_marlin.built() is None:
        vllm_marlin.build()
    prep = adapters.WEIGHT_ONLY[peer](adapters.dense_weight(N, K, seed=N + K))
    x = torch.randn(M, K, device="cuda", generator=torch.Generator("cuda").manual_seed(M)).to(torch.bfloat16)
    err, nan_left = harness.check(prep, x, rows=M)
    assert nan_left == 0, f"{peer} left {nan_left} outputs unwritten at N={N} K={K} M={M}"
    assert err < 1e-2, f"{peer} relative error {err:.2e} at N={N} K={K} M={M}"


def test_the_host_stubs_of_its_kernel_templates_are_not_static_where_nvcc_can_say_so(tmp_path):
    """nvcc 13 makes the host stubs of __global__ templates static by default: the GEMM's host file
    then cannot reach the instantiations in the kernel files (an undefined Marlin<...> at link)."""
    fake = tmp_path / "nvcc"
    fake.write_text("#!/bin/sh\necho '--static-global-template-stub {true|false}'\n")
    fake.chmod(0o755)
    assert vllm_marlin.stub_flags(str(fake)) == ["-static-global-template-stub=false"]
    old = tmp_path / "nvcc12"
    old.write_text("#!/bin/sh\necho '--some-other-flag'\n")
    old.chmod(0o755)
    assert vllm_marlin.stub_flags(str(old)) == [] and vllm_marlin.stub_flags(str(tmp_path / "none")) == []


def _object(tmp_path, name: str, code: str) -> Path:
    src = tmp_path / f"{name}.cpp"
    src.write_text(code)
    subprocess.run(["g++", "-c", "-O0", str(src), "-o", str(tmp_path / f"{name}.o")], check=True)
    return tmp_path / f"{name}.o"


def test_the_link_check_sees_kernels_the_host_launches_but_cannot_reach(tmp_path):
    """The H200's link failure at e6504f8 in miniature: the host object references FP8 Marlin<...>
    instantiations; a kernel object whose instantiations are static (nvcc 13's default stubs) does
    not provide them, one with external (weak) instantiations does."""
    decl = "namespace marlin { template <class T, long id> void Marlin(); }\n"
    host = _object(tmp_path, "host", decl + "void launch() { marlin::Marlin<float, 2814749767172868l>(); "
                   "marlin::Marlin<double, 2814749767172868l>(); marlin::Marlin<float, 7l>(); }\n")
    good = _object(tmp_path, "good", "namespace marlin { template <class T, long id> void Marlin() {} }\n"
                   "template void marlin::Marlin<float, 2814749767172868l>();\n"
                   "template void marlin::Marlin<double, 2814749767172868l>();\n")
    bad = _object(tmp_path, "bad", "namespace marlin { template <class T, long id> static void Marlin() {} }\n"
                  "template void marlin::Marlin<float, 2814749767172868l>();\n"
                  "template void marlin::Marlin<double, 2814749767172868l>();\n")
    assert vllm_marlin.unresolved_kernels(host, good, scalar="[fd]") == ([], 2)   # the other id is not FP8's
    assert vllm_marlin.unresolved_kernels(host, bad, scalar="f")[1] == 1          # one activation type at a time
    missing, n = vllm_marlin.unresolved_kernels(host, bad, scalar="[fd]")
    assert n == 2 and len(missing) == 2 and all(m.startswith("_ZN6marlin6MarlinI") for m in missing)


def test_its_gemm_and_a_kernel_file_compile_and_link_up_for_sm90():
    """CPU proof of the build: gptq_marlin.cu and the bf16 FP8 kernel file with the build's flags
    (nvcc, CPU torch headers), every FP8 kernel the GEMM launches defined with external linkage."""
    import os
    import shutil

    if not os.environ.get("FP8LAB_SLOW"):
        pytest.skip("runs nvcc on two files (~150 s on 2 cores): set FP8LAB_SLOW=1")
    if vllm_marlin.missing_source() is not None or shutil.which("nvcc") is None:
        pytest.skip("needs vLLM Marlin's unpacked source and nvcc")
    try:
        r = vllm_marlin.compile_check()
    except FileNotFoundError as e:            # no torch headers here
        pytest.skip(str(e))
    assert r["ok"], (r["errors"], r["unresolved"][:3], r["referenced"])
