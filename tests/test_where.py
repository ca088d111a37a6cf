"""From one arm id to its kernel, entry point, reference, count, tests, rows and figures
(fp8lab.arms.where: the declared half; fp8lab.run.where: what the checkout says)."""
import ast
from pathlib import Path

import pytest

from fp8lab.arms import registry, where
from fp8lab.run import cli, where as locate_mod

ROOT = Path(__file__).resolve().parent.parent


def _defined(module: str, name: str) -> bool:
    path = ROOT / (module.replace(".", "/") + ".py")
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return True
    return False


def test_every_arm_that_is_not_a_peer_is_declared():
    missing = [a for a in registry.ids("arm") if not registry.is_peer(a) and where.where(a) is None]
    assert missing == []
    assert set(where.WHERE) <= set(registry.ids("arm"))               # no row for an id the registry lacks


@pytest.mark.parametrize("arm_id", sorted(where.WHERE))
def test_declared_paths_and_entries_exist(arm_id):
    w = where.WHERE[arm_id]
    assert w.sources or w.library, arm_id                              # a kernel of ours, or the library's
    for p in w.sources:
        assert (ROOT / p).is_file(), (arm_id, p)
    for entry in (w.call, w.reference):
        if entry is not None:
            module, name = entry.split(":")
            assert _defined(module, name), (arm_id, entry)


def _fake_checkout(root: Path):
    for d in ("tests", "notebooks", "fp8lab/experiments", "data/h200/08_decode_bandwidth",
              "figures/h200/08_decode_bandwidth", "data/h200/05_arms_over_m"):
        (root / d).mkdir(parents=True)
    (root / "tests" / "test_a.py").write_text("def test():\n    run('gemv_w8a16_fp8')\n")
    (root / "tests" / "test_b.py").write_text("x = 'gemv_w8a16_fp8_xalu'\n")           # another id: not a mention
    (root / "notebooks" / "08_decode.py").write_text("# gemv_w8a16_fp8 at M = 1\n")
    (root / "fp8lab/experiments" / "decode.py").write_text("ARMS = ['gemv_w8a16_fp8']\n")
    (root / "data/h200/08_decode_bandwidth" / "decode.csv").write_text(
        "shape,arm,time\ns,gemv_w8a16_fp8,1\ns,gemv_w8a16_fp8,2\ns,gemv_w8a16_int8,3\n")
    (root / "data/h200/08_decode_bandwidth" / "other.csv").write_text("kernel,n\ngemv_w8a16_fp8,1\n")   # no arm column
    (root / "data/h200/05_arms_over_m" / "arms.csv").write_text("arm,t\ngemv_w8a16_fp8+quant,1\n")


def test_locate_reads_the_checkout(tmp_path):
    _fake_checkout(tmp_path)
    info = locate_mod.locate("gemv_w8a16_fp8", root=tmp_path)
    assert [p.name for p in info["tests"]] == ["test_a.py"]
    assert [p.name for p in info["notebooks"]] == ["08_decode.py"] and [p.name for p in info["experiments"]] == ["decode.py"]
    rows = {p.relative_to(tmp_path).as_posix(): n for p, n in info["tables"].items()}
    assert rows == {"data/h200/08_decode_bandwidth/decode.csv": 2, "data/h200/05_arms_over_m/arms.csv": 1}
    assert [d.relative_to(tmp_path).as_posix() for d in info["figures"]] == ["figures/h200/08_decode_bandwidth"]
    text = locate_mod.report(info)
    assert "gemv_w16.cuh" in text and "fp8lab.kernels.weight_only:reference" in text
    assert registry.label("gemv_w8a16_fp8") in text and "data/h200/08_decode_bandwidth/decode.csv: 2" in text


def test_locate_a_measured_arm_in_this_checkout():
    info = locate_mod.locate("mma_blockwise")
    assert info["tables"] and info["tests"] and info["where"].sources[0].endswith("mma_blockwise.cuh")


def test_cli_arm(capsys):
    assert cli.main(["arm", "gemv_fp8"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not an arm id" in err[0] and "gemv_w8a16_fp8" in err[0]   # one line, a hint
    assert cli.main(["arm"]) == 0
    listed = {ln.split()[0] for ln in capsys.readouterr().out.splitlines()}
    assert listed == set(registry.ids("arm"))
    assert cli.main(["arm", "cublaslt_blockwise"]) == 0
    assert "library    cuBLASLt" in capsys.readouterr().out
