import pytest

from fp8lab.facts import shapes


def test_seed_shapes_are_there():
    o = shapes.get("qwen3-8b:o_proj")
    assert (o.N, o.K) == (4096, 4096)
    d = shapes.get("qwen3-8b:down_proj")
    assert (d.N, d.K) == (4096, 12288)


def test_every_K_is_a_multiple_of_the_scale_block():
    for s in shapes.shapes():
        assert s.K % 128 == 0, s


def test_bad_names():
    with pytest.raises(ValueError, match="unknown model"):
        shapes.shapes("gpt-5")
    with pytest.raises(ValueError, match="unknown site"):
        shapes.shapes("qwen3-8b", ["lm_head"])
    with pytest.raises(ValueError, match="model:site"):
        shapes.get("o_proj")
