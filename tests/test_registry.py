"""fp8lab.arms.registry: every id the experiments can emit has a label and a colour, arms never
share a colour, and no notebook or module keeps a label or colour table of its own.

The ids are collected from the experiments' and kernels' own constants (none of these modules
imports torch at import time; Triton's variants are read from its source), so a new ceiling,
arm or format added there without a registry row fails here on CPU, not on a GPU box mid-run
(notebook 00's KeyError: 'bf16_mma_sync').
"""

import ast
import re
from pathlib import Path

import pandas as pd
import pytest

from fp8lab.facts import devices
from fp8lab.emulate import formats
from fp8lab import paths
from fp8lab.arms import registry
from fp8lab.experiments import blockwise as bw, ceilings as ce, census, decode as dx, headroom as hr
from fp8lab.experiments import prefill as px, quantisers as qx, roofline as rx, spills, three_arms as ta
from fp8lab.kernels import mma_blockwise as mb, quant_act as qa, weight_only as wo

ROOT = paths.repo_root()
REGISTRY_FILE = ROOT / "fp8lab" / "arms" / "registry.py"
HEX = re.compile(r"^#[0-9A-Fa-f]{6}$")


def _module_constant(path: Path, name: str):
    """A literal module-level constant read from source, for modules that import a GPU stack."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{name} not found in {path}")


def _roofline_precisions() -> set:
    """Precisions fp8lab.experiments.roofline draws roofs for: the spec sheet's, and those a
    ceilings table with every ceiling measured gives."""
    table = pd.DataFrame([{"ceiling": c, "arm": a, "status": "measured", "rate_p50": 1e12}
                          for c, (a, _, _) in ce.CEILINGS.items()])
    roofs = rx.roofs(devices.get("h200"), ce.ceilings_for_roofline(table))
    return set(roofs["precision"])


def emitted() -> dict:
    """kind -> set of ids the experiments can write into a table column or draw."""
    tb_variants = _module_constant(ROOT / "fp8lab" / "kernels" / "triton_blockwise.py", "VARIANTS")
    arms = {
        *bw.ARMS, *bw.OURS, *bw.W8A8,
        *ta.GEMM_ARMS, *ta.W8A8_IMPLS, *ta.PREP_OF, *ta.PREP_OF.values(), *ta.KIND_OF,
        *wo.ARMS.values(), wo.XALU_KERNEL,
        *dx.ARMS, dx.CUBLAS, hr.ARM, hr.CUBLAS,
        *px.ARMS, *px.W8A8_ARMS, *px.W8A16_ARMS,
        *qx.ARMS, *qx.DIAGNOSTIC_ARMS, *qx.TARGET_ARMS, *qa.VARIANTS,
        *(arm for arm, _, _ in ce.CEILINGS.values()),
        spills.ARM, *census.ARM_ACTIVATION,
        *bw.PEERS, *dx.PEERS, *px.PEERS, *qx.PEERS,                # other people's kernels (issue 17)
    }
    return {
        "arm": arms,
        "derived": {a + "+quant" for a in px.W8A8_ARMS},           # notebook 11's "+quant" rows
        "ceiling": set(ce.CEILINGS),
        "format": {*wo.FORMATS, *wo.ACT_DTYPES, *formats.FORMATS, *devices.PRECISIONS,
                   *_roofline_precisions(), *ta.FAMILY_BOUND.values(), *wo.CODE_FORMAT.values()},
        "variant": {*mb.VARIANTS, *tb_variants, *spills.TRITON_VARIANT, *spills.TRITON_VARIANT.values()},
        "quantiser": set(bw.QUANTISERS) - arms,
        "family": set(ta.FAMILY_IDS) - arms,
    }


def missing(ids) -> list:
    """The ids among ``ids`` without a label or a colour."""
    out = []
    for i in sorted(ids):
        try:
            registry.label(i), registry.short_label(i), registry.color(i)
        except registry.UnknownId:
            out.append(i)
    return out


def test_every_emitted_id_has_a_label_and_a_colour():
    ids = set().union(*emitted().values())
    assert missing(ids) == [], f"add these ids to {REGISTRY_FILE.relative_to(ROOT)}"
    for i in ids:
        assert registry.label(i).strip() and registry.short_label(i).strip(), i
        assert HEX.match(registry.color(i)), (i, registry.color(i))


def test_a_new_ceiling_without_a_row_fails(monkeypatch):
    # what broke notebook 00 on the H200: a ceiling added to CEILINGS, no label for it
    monkeypatch.setitem(ce.CEILINGS, "fp4_tensor", ("cublas_fp4", "FLOP/s", "fp4"))
    ids = emitted()
    assert "fp4_tensor" in ids["ceiling"] and "cublas_fp4" in ids["arm"]
    assert missing(set().union(*ids.values())) == ["cublas_fp4", "fp4_tensor"]


def test_ids_have_their_kind():
    """Arms are registered as arms (so they get their own colour), and so on."""
    for kind, ids in emitted().items():
        if kind == "derived":
            continue
        wrong = {i: registry.entry(i).kind for i in ids if registry.entry(i).kind != kind}
        assert not wrong, f"registered with another kind than {kind!r}: {wrong}"


def test_registry_holds_no_stale_ids():
    """Every row is an id something emits: a renamed arm leaves no orphan behind."""
    stale = set(registry.ids()) - set().union(*emitted().values())
    assert not stale, f"rows in {REGISTRY_FILE.relative_to(ROOT)} that nothing emits: {sorted(stale)}"


def test_arm_colours_are_unique():
    arms = registry.ids("arm")
    assert all(registry.entry(a).color for a in arms), "every arm has a colour of its own (not color_of)"
    seen = {}
    for a in arms:
        seen.setdefault(registry.color(a).upper(), []).append(a)
    shared = {c: a for c, a in seen.items() if len(a) > 1}
    assert not shared, f"arms sharing a colour: {shared}"


def test_ceilings_take_the_colour_of_the_arm_that_measures_them():
    for c, (arm, _, _) in ce.CEILINGS.items():
        assert registry.entry(c).color_of == arm, (c, registry.entry(c).color_of, arm)
        assert registry.color(c) == registry.color(arm)


def test_schemes():
    for i in registry.ids():
        assert registry.scheme(i) in (None, *registry.SCHEMES), i
    # the prefill table's scheme column and census's activation rule read the registry
    assert px.SCHEME == {"cublas_bf16": "W16A16", "gemv_w8a16_fp8": "W8A16", "triton_w8a16": "W8A16",
                         "cublaslt_blockwise": "W8A8", "triton_blockwise": "W8A8"}
    for arm in bw.W8A8:
        assert census.ARM_ACTIVATION[arm] == "A8"
    for arm in wo.ARMS.values():
        assert census.ARM_ACTIVATION[arm] == "A16"


def test_labels_compose():
    assert registry.label("triton_w8a16", with_scheme=True) == "triton_w8a16 (W8A16, wgmma)"
    assert registry.label("cublas_bf16", with_scheme=True) == "cuBLAS BF16 (W16A16)"
    assert registry.label("triton_blockwise+quant") == "triton_blockwise + act. quantisation"
    assert registry.color("triton_blockwise+quant") == registry.color("triton_blockwise")
    assert registry.short_label("gemv_w4a16_nvfp4") == "W4A16 NVFP4"
    assert registry.short_label("copy_bandwidth") == registry.label("copy_bandwidth")
    # families compose the route's label and its per-step pass
    assert ta.FAMILIES["best_w8a8"] == "best fp8lab W8A8 + quant_act_warp"
    assert ta.FAMILIES["cublas_bf16"] == "cuBLAS BF16 + dequant_w8_bf16"


@pytest.mark.parametrize("bad", ["bf16_mma_syncc", "quant_act_warp+quant", "", None])
def test_unknown_id_names_itself_and_the_file(bad):
    for fn in (registry.label, registry.short_label, registry.color, registry.scheme):
        with pytest.raises(registry.UnknownId) as e:
            fn(bad)
        assert repr(bad) in str(e.value) and "fp8lab/arms/registry.py" in str(e.value)


def test_plotting_color_delegates_without_a_fallback():
    from fp8lab.report import plotting
    assert plotting.color("cublas_bf16") == registry.color("cublas_bf16")
    with pytest.raises(registry.UnknownId):
        plotting.color("no_such_arm")
    with pytest.raises(TypeError):
        plotting.color("no_such_arm", "#777777")   # no fallback to hide a missing row


# ------------------------------------------------------------------------- no second tables
def _strings(node) -> list:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List)):
        return [s for e in node.elts for s in _strings(e)]
    return []


LABELS = {registry.label(i) for i in registry.ids()} | {registry.short_label(i) for i in registry.ids()}


def _looks_like_text(s: str, ids: set) -> bool:
    """A colour, a scheme, a registry label, or legend-like text (with a space) that is not an id.
    (Units such as 'B/s' and line styles such as 'D-' are not.)"""
    return (bool(HEX.match(s)) or s in registry.SCHEMES
            or (s not in ids and (s in LABELS or bool(re.search(r"\s", s)))))


def own_tables(source: str, ids: set) -> list:
    """(line, what) for each dict literal keyed by registry ids (or by computed keys such as
    ``wo.ARMS['fp8']``) whose values carry colours or legend text, and each ``.color(id,
    fallback)`` call."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Dict) and node.keys:
            const = [k.value for k in node.keys if isinstance(k, ast.Constant)]
            keyed = any(k in ids for k in const) or (len(const) < len(node.keys) and
                                                     not any(isinstance(k, str) and k not in ids for k in const))
            texts = [s for v in node.values for s in _strings(v) if _looks_like_text(s, ids)]
            if keyed and texts:
                found.append((node.lineno, f"dict of ids to {texts[:2]}"))
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "color"
                and len(node.args) + len(node.keywords) > 1):
            found.append((node.lineno, "color() with a fallback"))
    return found


# Dicts keyed by ids whose text is not a label: why each is allowed.
ALLOWED = {
    ("fp8lab/kernels/triton_blockwise.py", "GPU_DISABLED"): "the reason a variant is off on GPUs",
    ("fp8lab/experiments/blockwise.py", "REFERENCES"): "what each float64 reference computes",
    ("fp8lab/toolchain/binaries.py", "_DTYPE_NAMES"): "SASS / PTX operand types of other people's kernels",
    ("fp8lab/toolchain/binaries.py", "known = {"): "Marlin's scalar-type ids decoded (exponent, mantissa)",
}


def _allowed(path: Path, source: str, line: int) -> bool:
    rel = path.relative_to(ROOT).as_posix()
    text = source.splitlines()[line - 1]
    return any(rel == f and text.lstrip().startswith(name) for f, name in ALLOWED)


def _sources():
    files = sorted((ROOT / "fp8lab").rglob("*.py")) + sorted((ROOT / "notebooks").glob("*.py"))
    return [p for p in files if p != REGISTRY_FILE]


def test_no_module_or_notebook_keeps_its_own_labels_or_colours():
    ids = set(registry.ids())
    bad = []
    for path in _sources():
        src = path.read_text()
        bad += [f"{path.relative_to(ROOT)}:{line}: {what}" for line, what in own_tables(src, ids)
                if not _allowed(path, src, line)]
    assert not bad, ("labels and colours of registry ids live in fp8lab/arms/registry.py only:\n"
                     + "\n".join(bad))


@pytest.mark.parametrize("src, hits", [
    ('LABELS = {"copy_bandwidth": "copy bandwidth", "fp32_fma": "FP32 FMA (own kernel)"}', 1),
    ('COLOR = {"triton_w8a16": "#CC79A7"}', 1),
    ('ARM_LABEL = {wo.ARMS["fp8"]: "W8A16 FP8 (e4m3)", dx.CUBLAS: "cuBLAS BF16"}', 1),
    ('c = plotting.color(arm, FALLBACK.get(arm))', 1),
    ('STYLE = {"quant_act_naive": "o-", "per_slice": "s-"}', 0),           # line styles: not labels
    ('PREP_OF = {"triton_blockwise": "quant_act_warp"}', 0),               # ids to ids
    ('STALL = {"long_scoreboard": "#0072B2"}', 0),                         # not registry ids
])
def test_the_scan_finds_tables(src, hits):
    assert len(own_tables(src, set(registry.ids()))) == hits

