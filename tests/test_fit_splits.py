"""scripts/fit_splits.py (CPU): the fit tool scores the package's constants on the stored H200 sweeps
exactly as the choose_splits test does, and bad input gets one line."""
import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _mod():
    spec = importlib.util.spec_from_file_location("fit_splits", ROOT / "scripts" / "fit_splits.py")
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def test_the_package_constants_score_as_the_choose_splits_test_says():
    fs = _mod()
    from fp8lab.kernels import weight_only as wo
    pts = fs.points(fs.DEFAULT_CSVS, (wo.REDUCE_M_EXPONENT,))
    misses = []
    g, n2, worst, n = fs.score(pts, wo.SPLIT_KNEE_CTAS_PER_SM, wo.SPLIT_GENERATION_BYTES, wo.REDUCE_BYTE_COST,
                               wo.REDUCE_M_EXPONENT, misses=misses)
    assert n == 228 and not misses
    assert g > 0.99 and n2 >= 205 and worst > 0.75
    # a model that never splits is scored worse on the same points: the score can fail
    g1, *_ = fs.score(pts, 0.0, 0.0, 1e9, wo.REDUCE_M_EXPONENT)
    assert g1 < g - 0.05


def test_a_missing_table_is_one_line(tmp_path, capsys):
    fs = _mod()
    assert fs.main([str(tmp_path / "nope.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"fit_splits: no such table: {tmp_path / 'nope.csv'}"]
