"""fp8lab.peers on CPU: the catalog, discovery with fake probes, not-run rows for every missing
peer in every notebook's sweep (never an exception, never a gap), the one peer style, and
Marlin's kernel compiling for sm_90 with nvcc when its source has been unpacked."""

import math
import shutil

import pandas as pd
import pytest

from fp8lab import peers
from fp8lab.arms import registry
from fp8lab.experiments import blockwise as bw, decode as dx, prefill as px, quantisers as qx
from fp8lab.peers import build, discover, harness, sweeps
from fp8lab.arms import peer_catalog


def _missing(pid):
    return discover.Availability(pid, False, reason="nothing here (fake)", install=peer_catalog.get(pid).install)


def _present(pid):
    return discover.Availability(pid, True, version="9.9")


def test_catalog_rows_are_complete_and_registered():
    for pid, p in peer_catalog.PEERS.items():
        assert pid.startswith(registry.PEER_PREFIX) and registry.is_peer(pid)
        assert p.kind in peer_catalog.KINDS and p.discover in ("import", "build")
        assert p.install.strip() and p.licence.strip() and p.weight and p.scales and p.act
        assert set(p.notebooks) <= set(peer_catalog.NOTEBOOKS)
        assert peer_catalog.NOTEBOOKS[p.notebooks[0]] == p.kind
        assert registry.entry(pid).kind == "arm" and registry.color(pid)
    # the seed's subject is in 08 and 11; every notebook's arm list is its peers
    assert "peer_marlin_int4" in dx.PEERS and "peer_marlin_int4" in px.PEERS
    assert bw.PEERS == peer_catalog.ids_for("05") and "peer_torchao_blockwise" in bw.PEERS
    assert set(qx.PEERS) == {"peer_vllm_quant_group", "peer_sglang_quant_group", "peer_torchao_quant_group",
                             "peer_vllm_cuda_quant_group", "peer_sglang_jit_quant_group"}
    with pytest.raises(ValueError, match="unknown peer"):
        peer_catalog.get("peer_nope")


def test_carried_says_which_can_reach_the_offline_box():
    assert peer_catalog.get("peer_torchao_blockwise").carries and peer_catalog.get("peer_marlin_int4").carries
    assert peer_catalog.get("peer_deepgemm").carries and peer_catalog.get("peer_deepgemm").discover == "build"
    for pid in ("peer_vllm_blockwise", "peer_sglang_blockwise"):
        assert not peer_catalog.get(pid).carries
    # vLLM's Marlin GEMMs reach it as their source (kernels-community's copy), not as vLLM's wheel
    assert all(peer_catalog.get(p).carries and peer_catalog.get(p).discover == "build"
               for p in ("peer_vllm_marlin_fp8", "peer_vllm_marlin_int8", "peer_vllm_marlin_int4"))


@pytest.mark.parametrize("pid, N, K, want", [
    ("peer_marlin_int4", 256, 128, 256 * 128 // 2 + 2 * 256),            # INT4 + fp16 scale per 128
    ("peer_gemlite_w8a16_fp8", 256, 384, 256 * 384 + 4 * 256),          # e4m3 + fp32 per channel
    ("peer_gemlite_w4a16_int4", 256, 256, 256 * 128 + 2 * 2 * 256 * 2),  # INT4 + bf16 scale and zero
    ("peer_gemlite_w4a16_nvfp4", 16, 32, 16 * 16 + 16 * 2 + 4),         # e2m1 + e4m3 per 16 + fp32
    ("peer_torchao_blockwise", 129, 256, 129 * 256 + 4 * 2 * 2),        # a ragged N block still has a scale
    ("peer_vllm_marlin_int8", 256, 384, 256 * 384 + 2 * 256),           # INT8 + bf16 per channel
    ("peer_vllm_marlin_fp8", 256, 384, 256 * 384 + 2 * 256),            # e4m3 + bf16 per channel
])
def test_weight_stream_bytes(pid, N, K, want):
    assert peer_catalog.weight_stream_bytes(pid, N, K) == want


def test_quantisers_have_no_weight_stream():
    with pytest.raises(ValueError, match="activations"):
        peer_catalog.weight_stream_bytes("peer_vllm_quant_group", 128, 128)


def test_availability_from_a_probe_and_the_gpu_generation():
    discover.reset()

    def raises(p):
        raise discover.PeerUnavailable(f"{p.module} is not installed")

    a = discover.availability("peer_gemlite_w8a16_fp8", probe=raises, sm=90)
    assert not a.ok and a.status() == ("not-run: gemlite is not installed; install: pip install "
                                       "gemlite==0.6.0.post2")
    ok = discover.availability("peer_gemlite_w8a16_fp8", probe=lambda p: None, sm=None)
    assert ok.ok and ok.reason == ""
    # DeepGEMM needs Hopper: sm_89 is not-run, sm_90 runs
    assert not discover.availability("peer_deepgemm", probe=lambda p: None, sm=89).ok
    assert "sm_90+" in discover.availability("peer_deepgemm", probe=lambda p: None, sm=89).reason
    assert discover.availability("peer_deepgemm", probe=lambda p: None, sm=90).ok


def test_a_package_that_breaks_at_import_is_a_reason_not_a_crash(monkeypatch):
    import importlib

    def boom(name):
        raise OSError("libcudart.so.12: cannot open shared object file")

    monkeypatch.setattr(importlib, "import_module", boom)
    discover.reset()
    a = discover.availability("peer_torchao_blockwise", sm=None)
    assert not a.ok and "fails at import: OSError: libcudart" in a.reason
    discover.reset()


def _assert_not_run(df, host_cols, n, cols=None):
    assert list(df.columns) == (cols or sweeps.columns(host_cols))
    assert len(df) == n
    assert df["status"].str.startswith("not-run: nothing here (fake); install: ").all()
    assert (df["install"] != "").all() and df["time_p50_s"].isna().all()
    assert df["arm"].map(registry.is_peer).all()


def test_every_sweep_gives_a_not_run_row_per_point_for_a_missing_peer():
    d = sweeps.decode(["qwen3-8b:o_proj", "llama3-70b:down_proj"], [1, 16], dx.PEERS, copy={"rate_p50": 4e12},
                      avail=_missing)
    _assert_not_run(d, dx.COLUMNS, 2 * 2 * len(dx.PEERS))
    assert set(d[d["arm"] == "peer_marlin_int4"]["M"]) == {1, 16}
    p = sweeps.prefill("llama3-70b:o_proj", [1, 8192], px.PEERS, avail=_missing)
    _assert_not_run(p, px.COLUMNS, 2 * len(px.PEERS))
    assert (p["scheme"] == p["arm"].map(registry.scheme)).all()
    b = sweeps.blockwise(["qwen3-8b:o_proj"], [1, 128, 4096], bw.PEERS, avail=_missing)
    _assert_not_run(b, bw.COLUMNS, 3 * len(bw.PEERS))
    assert (b["quant"] == "none").all() and (b["weight_bytes"] > 0).all()
    q = sweeps.quantisers([1, 4096], [7168], qx.PEERS, avail=_missing)
    _assert_not_run(q, qx.COLUMNS, 2 * len(qx.PEERS), cols=sweeps.quantiser_columns())


def test_a_sweep_refuses_another_notebooks_peer():
    with pytest.raises(ValueError, match="not peers of notebook 08"):
        sweeps.decode(["qwen3-8b:o_proj"], [1], ["peer_torchao_blockwise"], copy={"rate_p50": 1.0}, avail=_missing)


def test_status_rows_keep_text_columns_text():
    cols = sweeps.columns(dx.COLUMNS)
    r = harness.status_row(cols, dict(shape="s", M=1, arm="peer_marlin_int4"), "peer_marlin_int4", "not-run: x")
    assert r["timing_method"] == "" and r["schedule"] == "" and r["library"].startswith("Marlin")
    assert set(r) == set(cols)


def test_peers_table_names_every_peer():
    t = peers.table(avail=_missing)
    assert list(t["peer"]) == list(peer_catalog.PEERS) and (t["here"] == "no").all()
    assert t.loc[t["peer"] == "peer_torchao_blockwise", "offline_box"].item() == "wheel 3.4 MB"


def test_one_style_for_peers():
    assert registry.style("peer_marlin_int4") == registry.PEER_STYLE
    assert registry.style("gemv_w4a16_int4") == registry.OWN_STYLE
    assert registry.style("peer_torchao_blockwise")["ls"] != registry.style("triton_blockwise")["ls"]


def test_missing_marlin_source_names_the_script(tmp_path, monkeypatch):
    monkeypatch.setenv(discover.MARLIN_SRC_ENV, str(tmp_path))
    with pytest.raises(FileNotFoundError, match="peers_offline.py --sources"):
        build.source_files()
    from fp8lab.peers.__main__ import main

    assert main(["check-compile"]) == 2


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_marlin_kernel_compiles_for_sm90():
    """The CPU proof for the GPU box: Marlin's kernel file, from its own source, builds for
    sm_90 with the flags torch's extension builder passes (needs the unpacked source)."""
    try:
        build.source_files()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    r = build.compile_check("sm_90")
    assert r["ok"], r["errors"]


# ------------------------------------------------------------------------------ report (CPU)
from fp8lab.peers import report  # noqa: E402


def _decode_peers(frac_by_shape, status="measured"):
    rows = []
    for shape, f in frac_by_shape.items():
        rows.append(dict(shape=shape, M=1, arm=report.MARLIN, status=status, fraction_of_copy=f, bw_p50=f * 4e12,
                         bw_p20=f * 3.9e12, bw_p80=f * 4.1e12, version="0.1.1"))
    return pd.DataFrame(rows)


def test_marlin_seed_rows_from_the_decode_rules():
    """C3 / C4 / C5's seed rows go through notebook 08's own rules on the Marlin rows: timed but
    not profiled is not-run with its timing shown; no Marlin at all says how to get it."""
    df = _decode_peers({"a": 0.62, "b": 0.49})
    c3 = next(v for v in dx.c3_verdicts(df, None) if v.subject == "seed")
    assert c3.verdict == "not-run" and "49%-62% of the copy" in c3.our_figure and c3.variant == "original Marlin"
    c4 = next(v for v in dx.c4_verdicts(df.assign(fmt="int4")) if v.subject == "seed")
    assert c4.verdict == "not-run" and "peer_marlin_int4" in c4.reason and "not measured" not in c4.reason
    none = next(v for v in dx.c3_verdicts(df.iloc[:0], None) if v.subject == "seed")
    assert none.verdict == "not-run" and "peers_offline.py --sources" in none.reason
    assert set(dx.MARLIN_ARMS) == {"peer_marlin_int4", "peer_vllm_marlin_fp8", "peer_vllm_marlin_int8",
                                   "peer_vllm_marlin_int4"}


def test_c4_seed_row_judges_vllms_fp8_marlin_against_its_int8_twin():
    """The seed's C4 pair among the Marlins: vLLM's FP8 and INT8 Marlin (same bytes, same scales)."""
    rows = []
    for shape, (fp, it) in {"a": (3.0e12, 2.97e12), "b": (3.1e12, 3.03e12)}.items():
        rows += [dict(shape=shape, M=1, arm="peer_vllm_marlin_fp8", fmt="fp8", bw_p50=fp),
                 dict(shape=shape, M=1, arm="peer_vllm_marlin_int8", fmt="int8", bw_p50=it)]
    c4 = next(v for v in dx.c4_verdicts(pd.DataFrame(rows)) if v.subject == "seed")
    assert c4.variant == "vLLM Marlin" and c4.verdict == "holds-in-kind"        # +1.0% and +2.3%
    assert "fp8/int8 +2.3% (b)" in c4.our_figure and "+2.3%" in c4.reason


def test_marlin_c7_seed_row_is_prefills_own_rule_with_its_variant():
    cub = dict(M=8192, arm="cublas_bf16", with_quant=False, tflops_per_ghz=400.0, tflops_p50=700.0,
               sm_mhz_median=1750.0)
    mar = dict(M=8192, arm=report.MARLIN, with_quant=False, tflops_per_ghz=200.0, tflops_p50=380.0,
               sm_mhz_median=1830.0)
    seed = [v for v in px.c7_verdicts(pd.DataFrame([cub, mar])) if v.subject == "seed" and v.variant != "cuBLAS vs spec"]
    assert len(seed) == 1 and seed[0].variant == "original Marlin" and seed[0].verdict == "differs"
    assert "peer_marlin_int4 200 vs cuBLAS BF16 400" in seed[0].our_figure


def test_versus_best_peer_picks_each_side_best():
    host = pd.DataFrame([dict(shape="s", M=1, arm="gemv_w8a16_fp8", bw_p50=4.0),
                         dict(shape="s", M=1, arm="gemv_w4a16_int4", bw_p50=3.0),
                         dict(shape="s", M=16, arm="gemv_w8a16_fp8", bw_p50=2.0)])
    peer = pd.DataFrame([dict(shape="s", M=1, arm=report.MARLIN, status="measured", bw_p50=5.0),
                         dict(shape="s", M=1, arm="peer_gemlite_w8a16_fp8", status="not-run: x", bw_p50=math.nan)])
    t = report.versus_best_peer(host, peer, ["gemv_w8a16_fp8", "gemv_w4a16_int4"])
    assert len(t) == 1 and t.iloc[0]["own_arm"] == "gemv_w8a16_fp8" and t.iloc[0]["best_peer"] == report.MARLIN
    assert t.iloc[0]["own_over_peer"] == pytest.approx(0.8)
    # lower-is-better metric: the ratio still reads > 1 when fp8lab's arm is ahead
    host2 = host.assign(time_p50_s=[1.0, 2.0, 3.0])
    peer2 = peer.assign(time_p50_s=[2.0, math.nan])
    t2 = report.versus_best_peer(host2, peer2, ["gemv_w8a16_fp8"], metric="time_p50_s", higher=False)
    assert t2.iloc[0]["own_over_peer"] == pytest.approx(2.0)
    assert report.versus_best_peer(host, None, ["gemv_w8a16_fp8"]).empty


def test_status_table_and_drawing():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    df = pd.concat([_decode_peers({"a": 0.9}), pd.DataFrame([dict(shape="a", M=1, arm="peer_gemlite_w8a16_fp8",
                                                                   status="not-run: gemlite is not installed",
                                                                   version="")])])
    t = report.status_table(df, peers=["peer_gemlite_w4a16_nvfp4"])
    assert list(t["peer"]) == [report.MARLIN, "peer_gemlite_w8a16_fp8", "peer_gemlite_w4a16_nvfp4"]
    assert list(t["measured"]) == ["1/1", "0/1", "0/0"]
    assert t.iloc[1]["status"].startswith("not-run: gemlite") and t.iloc[2]["status"] == "no rows"
    fig, ax = plt.subplots()
    # a device without a peers table, or with none measured, draws nothing (no KeyError on `where`)
    assert report.draw(ax, None, "M", "bw_p50", where={"shape": "a"}) == []
    assert report.draw(ax, df.iloc[1:], "M", "bw_p50", where={"shape": "a"}) == []
    assert report.draw(ax, df, "M", "bw_p50", scale=1e12, lo="bw_p20", hi="bw_p80") == [report.MARLIN]
    line = ax.get_lines()[0]
    assert line.get_linestyle() == registry.PEER_STYLE["ls"] and line.get_color() == registry.color(report.MARLIN)
    plt.close(fig)


def test_draw_fastest_follows_the_fastest_peer_at_each_point():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dg, ta = "peer_deepgemm", "peer_torchao_blockwise"
    rows = [dict(arm=dg, M=1, quant="none", status="measured", t=3.0),
            dict(arm=ta, M=1, quant="none", status="measured", t=2.0),     # torchao fastest at M = 1
            dict(arm=dg, M=16, quant="none", status="measured", t=1.0),
            dict(arm=ta, M=16, quant="none", status="measured", t=4.0),
            dict(arm=dg, M=128, quant="none", status="measured", t=5.0),
            dict(arm=ta, M=128, quant="none", status="not-run: gone", t=0.5),  # not measured: never picked
            dict(arm=dg, M=16, quant="own quantiser", status="measured", t=0.1)]  # other rows: filtered out
    df = pd.DataFrame(rows)
    fig, ax = plt.subplots()
    assert report.draw_fastest(ax, None, "M", "t") == []
    assert report.draw_fastest(ax, df, "M", "t", where={"quant": "nothing"}) == []
    assert not ax.get_lines()
    ids = report.draw_fastest(ax, df, "M", "t", scale=0.5, where={"quant": "none"})
    assert ids == [dg, ta]                         # DeepGEMM fastest at two of three points
    (line,) = ax.get_lines()
    assert list(line.get_xdata()) == [1, 16, 128] and list(line.get_ydata()) == [4.0, 2.0, 10.0]
    assert line.get_linestyle() == ":" and line.get_color() == registry.color(dg)
    assert line.get_label() == "fastest peer, GEMM only: DeepGEMM FP8, torchao blockwise FP8"
    plt.close(fig)


def test_readme_peers_table_is_the_catalogs():
    from fp8lab import paths

    text = (paths.repo_root() / "README.md").read_text()
    i, j = text.index(peers.README_BEGIN), text.index(peers.README_END)
    assert text[i + len(peers.README_BEGIN) + 1:j] == peers.readme_table(), \
        "run `python -m fp8lab claims` after changing fp8lab/arms/peer_catalog.py or data/"
    for p in peer_catalog.PEERS.values():
        assert f"`{p.id}`" in text


def test_readme_peers_table_says_where_each_peer_ran_from_the_tables(tmp_path):
    """The 'in data/' column comes from the committed peers tables and their sidecars (no typed
    'run on the H200 at ...'): notebook, device, commit, rows measured, the other statuses."""
    import json

    def table(dev, nb, commit, rows):
        d = tmp_path / dev / nb
        d.mkdir(parents=True)
        pd.DataFrame(rows).to_csv(d / "peers.csv", index=False)
        (d / "peers.meta.json").write_text(json.dumps({"device_name": "NVIDIA H200", "git": {"commit": commit}}))

    table("h200", "05_arms_over_m", "4dd77051de", [dict(arm="peer_deepgemm", status="measured")] * 3
          + [dict(arm="peer_deepgemm", status="failed-check: relerr 0.2"),
             dict(arm="peer_vllm_blockwise", status="not-run: vllm is not installed"),
             dict(arm="cublas_bf16", status="measured")])
    table("h200", "08_decode_bandwidth", "545c5c9", [dict(arm="peer_marlin_int4", status="measured")])
    seen = peers.in_data(tmp_path)
    assert set(seen) == {"peer_deepgemm", "peer_vllm_blockwise", "peer_marlin_int4"}
    assert peers.in_data_cell(seen["peer_deepgemm"]) == "05 H200 @4dd7705: 3/4 measured (1 failed-check)"
    assert peers.in_data_cell(seen["peer_vllm_blockwise"]) == "05 H200 @4dd7705: 1 not-run"
    assert peers.in_data_cell(seen.get("peer_gemlite_w8a16_fp8")) == "no committed table has it"
    md = peers.readme_table(tmp_path)
    row = next(line for line in md.splitlines() if line.startswith("| `peer_marlin_int4`"))
    assert "| 08 H200 @545c5c9: 1/1 measured |" in row
    # the README's text is rewritten between its markers only
    text = f"a\n{peers.README_BEGIN}\nold\n{peers.README_END}\nb\n"
    assert peers.render_readme(text).startswith(f"a\n{peers.README_BEGIN}\n| peer |")
    assert peers.render_readme(text).endswith(f"{peers.README_END}\nb\n") and peers.render_readme("x") == "x"


def test_the_peers_parameter():
    assert sweeps.resolve("all", "08") == list(dx.PEERS)
    assert sweeps.resolve([], "05") == [] and sweeps.resolve(None, "05") == []
    assert sweeps.resolve(["peer_torchao_blockwise"], "05") == ["peer_torchao_blockwise"]
    with pytest.raises(ValueError, match="peers must be 'all'"):
        sweeps.resolve("peer_marlin_int4", "08")              # a bare id, not a list
    with pytest.raises(ValueError, match="not peers of notebook 11"):
        sweeps.resolve(["peer_marlin"], "11")


def test_marlin_without_l2_hint_patches_exactly_the_hinted_copy():
    from fp8lab.peers import build
    src = ('  asm volatile(\n    "{\\n"\n    "   .reg .b64 p;\\n"\n'
           '    "   createpolicy.fractional.L2::evict_first.b64 p, 1.0;"\n'
           '    "   cp.async.cg.shared.global.L2::cache_hint [%0], [%1], %2, p;\\n"\n    "}\\n" :: );\n')
    out = build.without_l2_hint(src)
    assert "createpolicy" not in out and "cache_hint" not in out
    assert "cp.async.cg.shared.global [%0], [%1], %2;" in out
    with pytest.raises(ValueError, match="found it 0 times"):
        build.without_l2_hint("no such copy")
    with pytest.raises(ValueError, match="found it 2 times"):
        build.without_l2_hint(src + src)


def test_marlin_variant_falls_back_only_when_the_probe_fails(monkeypatch):
    from fp8lab.peers import discover
    monkeypatch.delenv(discover.MARLIN_VARIANT_ENV, raising=False)
    calls = []

    def fake(variant, timeout=180.0):
        calls.append(variant)
        return (variant != "as-is", "error: AcceleratorError: illegal instruction" if variant == "as-is" else "ok")
    monkeypatch.setattr(discover, "probe_marlin", fake)
    discover.MARLIN_CHOICE.clear()
    assert discover.choose_marlin_variant() == "no-l2-hint" and calls == ["as-is", "no-l2-hint"]
    assert "illegal instruction" in discover.MARLIN_CHOICE["why"]
    discover.MARLIN_CHOICE.clear()
    monkeypatch.setattr(discover, "probe_marlin", lambda v, timeout=180.0: (False, f"error {v}"))
    with pytest.raises(discover.PeerUnavailable, match="no Marlin build passed.*error as-is.*error no-l2-hint"):
        discover.choose_marlin_variant()
    discover.MARLIN_CHOICE.clear()
    monkeypatch.setenv(discover.MARLIN_VARIANT_ENV, "bogus")
    with pytest.raises(discover.PeerUnavailable, match="must be one of"):
        discover.choose_marlin_variant()
    discover.MARLIN_CHOICE.clear()


def test_marlin_source_holds_the_hinted_copy_once():
    from fp8lab.peers import build, discover
    cu = discover.marlin_src() / "marlin" / "marlin_cuda_kernel.cu"
    if not cu.exists():
        pytest.skip(f"Marlin's source is not at {cu.parent}")
    assert "createpolicy" not in build.without_l2_hint(cu.read_text())


def test_peer_imports_cache_their_triton_autotuning_and_nothing_else(monkeypatch, tmp_path):
    """A peer module imported through discover gets TRITON_CACHE_AUTOTUNING while it imports
    (its autotuners are built then); the setting is gone afterwards, so fp8lab's own tune per run."""
    import os
    import sys
    monkeypatch.delenv("TRITON_CACHE_AUTOTUNING", raising=False)
    (tmp_path / "fakepeer_mod.py").write_text("import os\nSEEN = os.environ.get('TRITON_CACHE_AUTOTUNING')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("fakepeer_mod", None)
    mod = discover.import_peer_module("fakepeer_mod")
    assert mod.SEEN == "1" and "TRITON_CACHE_AUTOTUNING" not in os.environ
    monkeypatch.setenv("TRITON_CACHE_AUTOTUNING", "0")
    with discover.triton_autotune_cache():
        assert os.environ["TRITON_CACHE_AUTOTUNING"] == "1"
    assert os.environ["TRITON_CACHE_AUTOTUNING"] == "0"


def test_marlin_prebuild_reuses_a_build_of_the_same_source_and_variant(tmp_path):
    import json

    from fp8lab.peers import build

    src = tmp_path / "src"
    src.mkdir()
    (src / ".fp8lab-source.json").write_text(json.dumps({"commit": "2f6d7c1"}))
    out = tmp_path / "out"
    out.mkdir()
    assert build._built(out, "as-is", src) is None                    # nothing built
    so = out / "marlin_cuda.cpython-312-x86_64-linux-gnu.so"
    so.write_bytes(b"")
    info = dict(variant="as-is", source_commit="2f6d7c1", source=str(src))
    (out / "build_info.json").write_text(json.dumps(info))
    assert build._built(out, "as-is", src) == so
    assert build._built(out, "no-l2-hint", src) is None               # another variant
    (src / ".fp8lab-source.json").write_text(json.dumps({"commit": "0000000"}))
    assert build._built(out, "as-is", src) is None                    # the source moved on


def _fake_tuned_peer(tmp_path, monkeypatch, module: str, kernel: str, configs: str, args: str):
    """A module holding one Triton-autotuned kernel, imported as a peer's (discover)."""
    import sys

    (tmp_path / f"{module}.py").write_text(
        "import triton\n\n"
        f"@triton.autotune(configs=[{configs}], key=[])\n"
        "@triton.jit\n"
        f"def {kernel}({args}):\n"
        "    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop(module, None)
    return discover.import_peer_module(module)


def test_peer_autotuners_time_each_config_for_the_peer_budget_and_no_other(monkeypatch, tmp_path):
    """An autotuner whose kernel lives in a module imported through discover times each config
    for PEER_AUTOTUNE_MS (the row's config says so); an autotuner given its own benchmarker, or
    one of a module that is not a peer, is left alone."""
    triton = pytest.importorskip("triton")
    mod = _fake_tuned_peer(tmp_path, monkeypatch, "fakepeer_tuned", "kern",
                           "triton.Config({}, num_warps=4), triton.Config({}, num_warps=8)", "x")
    if not discover._BENCH["installed"]:
        pytest.skip("this Triton's Autotuner has no do_bench cached property")
    bench = mod.kern.do_bench
    w, r = discover.PEER_AUTOTUNE_MS
    assert bench.func is triton.testing.do_bench and bench.keywords == {"warmup": w, "rep": r}
    assert f"{w} + {r} ms" in discover.autotune_note()

    def own(fn, quantiles):
        return [1.0, 1.0, 1.0]

    @triton.jit
    def not_a_peer(x):
        pass

    assert triton.autotune(configs=[triton.Config({})], key=[], do_bench=own)(not_a_peer).do_bench is own
    assert __name__.split(".")[0] not in discover._PEER_MODULES      # this module's autotuners keep Triton's


def test_a_peer_row_says_which_config_its_autotuner_ran(monkeypatch, tmp_path):
    """Inside autotune_choices, a peer's autotuner notes the config it ran with (the row's
    ``config`` then names it); Triton's Autotuner.run is wrapped only while a block is open, and
    an autotuner that is not a peer's is never noted."""
    triton = pytest.importorskip("triton")
    from triton.runtime import autotuner as at

    mod = _fake_tuned_peer(tmp_path, monkeypatch, "fakepeer_noted", "noted_kern",
                           "triton.Config({'BLOCK': 64}, num_warps=4, num_stages=3)",
                           "x, BLOCK: triton.language.constexpr")
    tuner = mod.noted_kern
    tuner.best_config = tuner.configs[0]
    plain = at.Autotuner.run
    with discover.autotune_choices() as chosen:
        assert at.Autotuner.run is not plain
        discover.record_choice(tuner)
    assert at.Autotuner.run is plain
    assert chosen == {"noted_kern": "BLOCK=64, num_warps=4, num_stages=3"}
    assert (discover.with_choices("W_group_mode 2", chosen)
            == "W_group_mode 2; ran noted_kern [BLOCK=64, num_warps=4, num_stages=3]")
    assert discover.with_choices("", {}) == ""
    discover.record_choice(tuner)                       # no block open: nothing noted anywhere

    @triton.jit
    def ours(x):
        pass

    mine = triton.autotune(configs=[triton.Config({})], key=[])(ours)
    mine.best_config = mine.configs[0]
    with discover.autotune_choices() as chosen2:
        discover.record_choice(mine)
    assert chosen2 == {}


def test_c5_seed_row_judges_vllms_marlins_one_kernel_per_format():
    """Both Marlins profiled: the seed row is vLLM's kernels (the seed's FP8 Marlin is vLLM's), one per
    format, never the mean of the original and vLLM's INT4; the original is quoted beside."""
    rows = [dict(arm="peer_vllm_marlin_fp8", fmt="fp8", dequant_inst_per_element=1.06),
            dict(arm="peer_vllm_marlin_int8", fmt="int8", dequant_inst_per_element=2.56),
            dict(arm="peer_vllm_marlin_int4", fmt="int4", dequant_inst_per_element=2.00),
            dict(arm="peer_marlin_int4", fmt="int4", dequant_inst_per_element=1.67)]
    seed = next(v for v in dx.c5_verdicts(pd.DataFrame(rows)) if v.subject == "seed")
    assert seed.variant == "vLLM Marlin" and "int4 2.00" in seed.our_figure and "1.83" not in seed.our_figure
    assert "beside (not judged): peer_marlin_int4 1.67" in seed.our_figure and seed.verdict == "differs"
    only = next(v for v in dx.c5_verdicts(pd.DataFrame(rows[3:])) if v.subject == "seed")
    assert only.variant == "original Marlin" and "beside" not in only.our_figure
    assert dx._marlin_variant(pd.DataFrame(rows)) == "original and vLLM Marlin"


def test_a_peer_without_a_quantiser_of_its_own_is_drawn_gemm_only():
    """06's with-quantiser figure draws a peer that has only GEMM-alone rows by those, never not at all."""
    from fp8lab.peers import report

    rows = [dict(arm="peer_deepgemm", quant="none", status="measured"),
            dict(arm="peer_deepgemm", quant=report.QUANT_OWN, status="measured"),
            dict(arm="peer_vllm_cutlass_blockwise", quant="none", status="measured"),
            dict(arm="peer_sglang_blockwise", quant="none", status="not-run: x; install: y")]
    assert report.without_own_quantiser(pd.DataFrame(rows)) == ["peer_vllm_cutlass_blockwise"]
    assert report.without_own_quantiser(None) == [] and report.without_own_quantiser(pd.DataFrame(rows[:2])) == []


def test_vllm_triton_gemm_is_found_under_todays_name_and_the_old_one():
    # vLLM renamed its Triton block-FP8 GEMM (0.34's fp8_utils has only w8a8_triton_block_scaled_mm);
    # the adapter takes either and says which names it looked for when neither is there
    import types

    from fp8lab.peers import adapters

    new, old = (lambda *a, **k: "new"), (lambda *a, **k: "old")
    assert adapters._vllm_triton_block_mm(types.SimpleNamespace(w8a8_triton_block_scaled_mm=new)) is new
    assert adapters._vllm_triton_block_mm(types.SimpleNamespace(w8a8_block_fp8_matmul=old)) is old
    assert adapters._vllm_triton_block_mm(types.SimpleNamespace(w8a8_triton_block_scaled_mm=new,
                                                                w8a8_block_fp8_matmul=old)) is new
    with pytest.raises(discover.PeerUnavailable, match="w8a8_triton_block_scaled_mm, w8a8_block_fp8_matmul"):
        adapters._vllm_triton_block_mm(types.SimpleNamespace(per_token_group_quant_fp8=new))


def test_sgl_kernel_quantiser_gets_fp32_scales_and_its_first_kernel_whatever_its_signature():
    # sgl-kernel 0.3.21: left None, enable_v2 makes the quantiser import sglang.srt.utils (the whole
    # sglang package); older versions have neither flag
    from fp8lab.peers import adapters

    def v0321(input, output_q, output_s, group_size, eps, fp8_min, fp8_max, scale_ue8m0=False,
              fuse_silu_and_mul=False, masked_m=None, enable_v2=None):
        pass

    def older(input, output_q, output_s, group_size, eps, fp8_min, fp8_max, scale_ue8m0=False):
        pass

    def oldest(input, output_q, output_s, group_size, eps, fp8_min, fp8_max):
        pass

    assert adapters._sgl_group_quant_kwargs(v0321) == {"scale_ue8m0": False, "enable_v2": False}
    assert adapters._sgl_group_quant_kwargs(older) == {"scale_ue8m0": False}
    assert adapters._sgl_group_quant_kwargs(oldest) == {}
