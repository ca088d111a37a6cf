import re
from pathlib import Path

import pytest

from fp8lab.report import claims, results
from fp8lab import paths


def test_registry_matches_the_shared_claims_list():
    shared = paths.repo_root().parent / "shared" / "CLAIMS.md"
    if not shared.is_file():
        pytest.skip("../shared/CLAIMS.md is not beside this checkout")
    ids = re.findall(r"^\| ([ABC]\d) \|", shared.read_text(), re.M)
    assert ids == list(claims.CLAIMS)


R = dict(subject="arithmetic", rule="holds if every code is exact")


def test_verdict_validation():
    with pytest.raises(ValueError, match="unknown claim id 'Z9'"):
        claims.Verdict("Z9", "holds", "x", **R)
    with pytest.raises(ValueError, match="verdict must be one of"):
        claims.Verdict("B2", "yes", "x", **R)
    with pytest.raises(ValueError, match="needs a reason"):
        claims.Verdict("B2", "differs", "255/256", **R)
    with pytest.raises(ValueError, match="our_figure"):
        claims.Verdict("B2", "holds", " ", **R)
    with pytest.raises(ValueError, match="needs a subject"):
        claims.Verdict("B2", "holds", "x", rule="r")
    with pytest.raises(ValueError, match="needs a subject"):
        claims.Verdict("B2", "holds", "x", subject="ours", rule="r")
    with pytest.raises(ValueError, match="needs its rule"):
        claims.Verdict("B2", "holds", "x", subject="seed")
    with pytest.raises(ValueError, match="needs its rule"):
        claims.Verdict("B2", "holds", "x", subject="seed", rule="two\nlines")
    v = claims.Verdict("B2", "holds", "256/256 exact", **R)
    assert v.seed_figure == claims.CLAIMS["B2"].seed_figure


def test_record_collect_and_ledger(sandbox):
    run = results.start_run("01_formats", device="cpu")
    claims.record(run, [claims.Verdict("B2", "holds", "256/256 exact", reason="NaN codes excluded", **R),
                        claims.Verdict("C2", "holds-in-kind", "8 per 4", reason="one extra op",
                                       subject="analogue", rule="holds if <= 7 per 4"),
                        claims.Verdict("C2", "not-run", "-", reason="Marlin not installed",
                                       subject="seed", rule="holds if <= 7 per 4")])
    with pytest.raises(ValueError, match=r"duplicates: B2 \(arithmetic\)"):
        claims.record(run, [claims.Verdict("B2", "holds", "a", **R), claims.Verdict("B2", "holds", "b", **R)])
    got = claims.collect_verdicts()
    assert list(got["claim"]) == ["B2", "C2", "C2"]
    assert list(got["subject"]) == ["arithmetic", "seed", "analogue"]      # seed rows first
    assert set(got["notebook"]) == {"01_formats"}
    md = claims.ledger_markdown()
    assert "| B2 |" in md and "**holds**: NaN codes excluded" in md and "**holds-in-kind**: one extra op" in md
    assert "| arithmetic |" in md and "| holds if every code is exact |" in md
    assert md.count("pending") == len(claims.CLAIMS) - 2
    # two rows of one subject are told apart by their variant
    claims.record(run, [claims.Verdict("B2", "holds", "a", variant="fp16", **R),
                        claims.Verdict("B2", "holds", "b", variant="bf16", **R)])
    assert "| arithmetic (bf16) |" in claims.ledger_markdown()


def test_readme_markers_roundtrip(sandbox, tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{claims.BEGIN}\nold\n{claims.END}\ntail\n")
    assert claims.update_readme(readme, check=True) is False
    assert claims.update_readme(readme) is False          # rewritten
    assert claims.update_readme(readme, check=True) is True
    text = readme.read_text()
    assert text.startswith("intro\n") and text.endswith("tail\n") and "| A1 |" in text
    readme.write_text("no markers")
    with pytest.raises(ValueError, match="ledger markers"):
        claims.update_readme(readme)


def test_committed_readme_ledger_is_current():
    """The README's ledger must match data/ (regenerate with `python -m fp8lab claims`)."""
    assert claims.update_readme(check=True), "README ledger is stale: run `python -m fp8lab claims`"


def test_record_if_measured_records_only_the_device_this_run_measured(tmp_path, monkeypatch):
    recorded = []
    monkeypatch.setattr(claims, "record", lambda run, vs: recorded.append(list(vs)))
    v = claims.Verdict("A3", "holds", "1.9x", subject="analogue", rule="holds if ratio >= 1.5", variant="k")

    class Run:
        mode, device = "measure", "h200"

    assert claims.record_if_measured(Run, "h200", [v]) == [v] and recorded == [[v]]
    assert claims.record_if_measured(Run, "l4", [v]) == [v] and len(recorded) == 1
    Run.mode = "replot"
    claims.record_if_measured(Run, "h200", [v])
    assert len(recorded) == 1
    t = claims.table([v])
    assert list(t.columns) == ["claim", "subject", "verdict", "our_figure", "reason", "rule"]
    assert t.iloc[0]["subject"] == "analogue, k"
    assert claims.markdown(v, "h200") == "**A3 (analogue, k): holds** (h200). 1.9x.   \n*Rule:* holds if ratio >= 1.5"
