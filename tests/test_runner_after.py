"""The manifest's ``after``: parsed and validated, honoured by every runner."""

import json
import threading
import time

import pytest
import yaml

from fp8lab.run import notebooks, runner


def _manifest(tmp_path, entries):
    nbdir = tmp_path / "notebooks"
    nbdir.mkdir(exist_ok=True)
    m = nbdir / "manifest.yaml"
    m.write_text(yaml.safe_dump({"notebooks": entries}))
    return m


def _e(nid, after=None, kind="host"):
    e = {"id": nid, "name": f"{nid}_nb", "title": nid, "kind": kind, "timeout": 60}
    if after is not None:
        e["after"] = after
    return e


def test_after_all_and_ids(tmp_path):
    m = _manifest(tmp_path, [_e("20"), _e("21"), _e("22", after=["20", "21_nb", "20"]),
                             _e("29", after="all")])
    specs = {s.id: s for s in notebooks.load_manifest(m)}
    assert specs["20"].after == ()
    assert specs["22"].after == ("20_nb", "21_nb")            # ids or names, once each
    assert specs["29"].after == ("20_nb", "21_nb", "22_nb")
    picked = notebooks.select(list(specs.values()), ["29", "21"])
    assert notebooks.waits_for(specs["29"], picked) == ["21_nb"]   # only what runs too
    # --only 29,21: the one-process runner must still run 21 first
    assert [s.id for s in notebooks.dependency_order(picked)] == ["21", "29"]


@pytest.mark.parametrize("after, msg", [
    (["99"], r"after names '99', which is not a notebook listed before it; ids listed before it: 20, 21"),
    (["23"], r"after names '23', which is not a notebook listed before it"),     # listed later
    (["22"], "after names the notebook itself"),
    ([], "non-empty list"),
    ("some", "must be 'all' or a non-empty list"),
])
def test_after_is_validated(tmp_path, after, msg):
    m = _manifest(tmp_path, [_e("20"), _e("21"), _e("22", after=after), _e("23")])
    with pytest.raises(ValueError, match=msg):
        notebooks.load_manifest(m)


def test_the_roofline_waits_for_every_other_notebook():
    specs = notebooks.load_manifest()
    roof = next(s for s in specs if s.name == "07_roofline")
    assert set(roof.after) == {s.name for s in specs} - {"07_roofline"}


def test_gpu_workers_hold_a_notebook_until_its_after_finished(tmp_path, no_gpu, monkeypatch):
    """Two fake GPUs, four notebooks: 21 is short and 22 fails at once, so without
    ``after`` the worker that ran them would start 29 while 20 still runs."""
    m = _manifest(tmp_path, [_e("20", kind="gpu"), _e("21"), _e("22"), _e("29", after="all")])
    for s in notebooks.load_manifest(m):
        s.path.write_text("{}")                 # exists; never executed (faked below)
    monkeypatch.setattr(notebooks, "notebook_parameters", lambda path: {"mode": {}})
    span, lock = {}, threading.Lock()

    def fake(spec, params, out_dir, *, timeout=None, kernel="python3", env=None):
        t0 = time.monotonic()
        time.sleep({"20_nb": 1.5, "21_nb": 0.2, "22_nb": 0.0, "29_nb": 0.1}[spec.name])
        with lock:
            span[spec.name] = (t0, time.monotonic(), env["CUDA_VISIBLE_DEVICES"])
        ok = spec.name != "22_nb"
        return notebooks.Outcome(spec.name, ok, 0.1, out_dir / spec.path.name, cell=None if ok else 1,
                              error=None if ok else "AssertionError: planned")
    monkeypatch.setattr(notebooks, "execute_one", fake)
    lines = []
    rc = runner.run(manifest=m, run_dir=tmp_path / "r", progress=False, echo=lines.append,
                    gpus="0,1", stagger_s=0)
    assert rc == 1                                           # 22 failed ...
    assert set(span) == {"20_nb", "21_nb", "22_nb", "29_nb"}  # ... and 29 still ran
    start_29 = span["29_nb"][0]
    for dep in ("20_nb", "21_nb", "22_nb"):
        assert start_29 >= span[dep][1], f"29 started before {dep} finished"
    assert {v[2] for v in span.values()} == {"0", "1"}        # both workers were used
    rows = [o["name"] for o in json.loads((tmp_path / "r" / "run.json").read_text())["notebooks"]]
    assert rows == ["20_nb", "21_nb", "22_nb", "29_nb"]
