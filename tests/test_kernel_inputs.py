"""The kernel wrappers' input checks on the CPU: each validator takes the ``torch`` module as
an argument, so a stand-in torch whose tensors are only shapes, strides, dtypes and
addresses exercises every check without a GPU (the GPU tests call the real wrappers)."""

import dataclasses
import types

import numpy as np
import pytest

from fp8lab.kernels import weight_only as wo


class FakeTensor:
    """What the validators look at: shape, strides, dtype, device, address."""

    def __init__(self, shape, dtype, *, strides=None, device="cuda:0", ptr=1 << 20):
        self.shape = tuple(shape)
        self.dtype = dtype
        if strides is None:
            strides, acc = [], 1
            for n in reversed(self.shape):
                strides.insert(0, acc)
                acc *= n
        self._strides = tuple(strides)
        self.device = device
        self.is_cuda = str(device).startswith("cuda")
        self._ptr = ptr

    def dim(self):
        return len(self.shape)

    def stride(self):
        return self._strides

    def numel(self):
        return int(np.prod(self.shape)) if self.shape else 1

    def data_ptr(self):
        return self._ptr

    def is_contiguous(self):
        return self._strides == FakeTensor(self.shape, self.dtype)._strides

    def t(self):
        return FakeTensor(self.shape[::-1], self.dtype, strides=self._strides[::-1], device=self.device,
                          ptr=self._ptr)


torch = types.SimpleNamespace(Tensor=FakeTensor, bfloat16="bfloat16", float16="float16",
                              float32="float32", int32="int32", uint8="uint8",
                              float8_e4m3fn="float8_e4m3fn")


# ------------------------------------------------------------------ weight_only: the scale words
@pytest.mark.parametrize("fmt", wo.FORMATS)
@pytest.mark.parametrize("N,K", [(32, 256), (40, 128), (200, 640)])
def test_scale_words_is_what_pack_scales_writes(fmt, N, K):
    d = wo.generate(fmt, 1, N, K, act="bf16", seed=N)
    words, _ = wo.pack_scales(fmt, d["scales"], N, K, act="bf16", global_scale=d["global_scale"])
    assert wo.scale_words(fmt, N, K) == words.size


def _packed(fmt="fp8", N=40, K=256):
    """A packed weight whose words are stand-in CUDA tensors of the right sizes."""
    d = wo.generate(fmt, 1, N, K)
    pw = wo.pack_weights(fmt, d["codes"], d["scales"], global_scale=d["global_scale"])
    return dataclasses.replace(pw, w=FakeTensor((pw.w.size,), torch.int32),
                               s=FakeTensor((pw.s.size,), torch.int32, ptr=1 << 21))


def _act(pw, M=2):
    return FakeTensor((M, pw.K), torch.bfloat16)


@pytest.mark.parametrize("fmt", wo.FORMATS)
def test_weight_only_accepts_the_packed_layout(fmt):
    pw = _packed(fmt)
    wo._validate(_act(pw), pw, None, None, torch)


def test_weight_only_refuses_too_few_or_too_many_scale_words():
    pw = _packed()
    n = pw.s.numel()
    for bad in (n - 1, n // 2, n + 8):
        with pytest.raises(ValueError, match=rf"pw.s has {bad} words, .* needs {n}"):
            wo._validate(_act(pw), dataclasses.replace(pw, s=FakeTensor((bad,), torch.int32)), None, None,
                         torch)
    # the scales of another weight (same format, other N) are refused too
    other = _packed(N=80)
    with pytest.raises(ValueError, match="pw.s has"):
        wo._validate(_act(pw), dataclasses.replace(pw, s=other.s), None, None, torch)


def test_weight_only_refuses_a_strided_or_misaligned_scale_tensor():
    pw = _packed()
    n = pw.s.numel()
    gappy = FakeTensor((n,), torch.int32, strides=(2,))          # every other word of a bigger buffer
    with pytest.raises(ValueError, match="pw.s must be contiguous"):
        wo._validate(_act(pw), dataclasses.replace(pw, s=gappy), None, None, torch)
    odd = FakeTensor((n,), torch.int32, ptr=(1 << 21) + 4)
    with pytest.raises(ValueError, match="pw.s must be 8-byte aligned"):
        wo._validate(_act(pw), dataclasses.replace(pw, s=odd), None, None, torch)
    gappy_w = FakeTensor((pw.w.numel(),), torch.int32, strides=(2,))
    with pytest.raises(ValueError, match="pw.w must be contiguous"):
        wo._validate(_act(pw), dataclasses.replace(pw, w=gappy_w), None, None, torch)


# ------------------------------------------------------------------ triton_w8a16: out
@pytest.fixture
def tw():
    pytest.importorskip("triton")
    from fp8lab.kernels import triton_w8a16
    return triton_w8a16


def _w8a16(M=4, N=96, K=256):
    return (FakeTensor((M, K), torch.bfloat16), FakeTensor((N, K), torch.uint8),
            FakeTensor((N, K // 128), torch.bfloat16))


def test_triton_w8a16_accepts_a_good_out(tw):
    x, q, s = _w8a16()
    assert tw._validate(x, q, s, torch, out=FakeTensor((4, 96), torch.bfloat16)) == (4, 96, 256)
    # rows of a wider buffer (row stride > N) are fine: the kernel takes the row stride
    tw._validate(x, q, s, torch, out=FakeTensor((4, 96), torch.bfloat16, strides=(128, 1)))


@pytest.mark.parametrize("out,msg", [
    ([1, 2], "out must be a torch.Tensor"),
    (FakeTensor((4, 96), "float16"), "out must be torch.bfloat16"),
    (FakeTensor((4, 95), "bfloat16"), r"out must be \(M, N\) = \(4, 96\)"),
    (FakeTensor((96, 4), "bfloat16"), r"out must be \(M, N\)"),
    (FakeTensor((4, 96), "bfloat16", device="cpu"), "out must be on x's CUDA device"),
    (FakeTensor((4, 96), "bfloat16", strides=(1, 4)), "columns must be adjacent"),     # a transpose
    (FakeTensor((4, 96), "bfloat16", strides=(0, 1)), "rows must not overlap"),        # expand()
    (FakeTensor((4, 96), "bfloat16", strides=(48, 1)), "rows must not overlap"),
])
def test_triton_w8a16_refuses_a_bad_out(tw, out, msg):
    x, q, s = _w8a16()
    with pytest.raises(ValueError, match=msg):
        tw._validate(x, q, s, torch, out=out)


# ------------------------------------------------------------------ quant_act: s_out
def _x(M=8, K=384):
    return FakeTensor((M, K), torch.bfloat16)


@pytest.mark.parametrize("strides", [(3, 1), (1, 8), (5, 1), (1, 9)])
def test_quant_act_accepts_s_out_of_any_non_aliasing_strides(strides):
    from fp8lab.kernels import quant_act as qa
    qa._check_s_out(FakeTensor((8, 3), torch.float32, strides=strides), _x(), 8, 3, torch)


@pytest.mark.parametrize("strides", [(0, 1), (1, 0), (0, 0), (2, 1), (1, 2)])
def test_quant_act_refuses_s_out_whose_scales_share_an_address(strides):
    from fp8lab.kernels import quant_act as qa
    with pytest.raises(ValueError, match="share an address"):
        qa._check_s_out(FakeTensor((8, 3), torch.float32, strides=strides), _x(), 8, 3, torch)


def test_quant_act_size_one_dims_take_any_stride():
    from fp8lab.kernels import quant_act as qa
    qa._check_s_out(FakeTensor((1, 3), torch.float32, strides=(0, 1)), _x(M=1), 1, 3, torch)


def test_quant_act_s_out_type_shape_device():
    from fp8lab.kernels import quant_act as qa
    for bad in ([0.0], FakeTensor((8, 3), "bfloat16"), FakeTensor((8, 4), "float32"),
                FakeTensor((8, 3), "float32", device="cuda:1")):
        with pytest.raises(ValueError, match=r"s_out must be an \(M, K/128\) = \(8, 3\) float32"):
            qa._check_s_out(bad, _x(), 8, 3, torch)


# ------------------------------------------------------------------ the W8A8 blockwise operands
def _w8a8(M=8, N=256, K=256, **over):
    d = dict(a=FakeTensor((M, K), "float8_e4m3fn"), a_scale=FakeTensor((M, K // 128), "float32"),
             b=FakeTensor((N, K), "float8_e4m3fn"), b_scale=FakeTensor((N // 128, K // 128), "float32"))
    d.update(over)
    return d


@pytest.mark.parametrize("over, msg", [
    (dict(a=[1, 2]), "a must be a torch.Tensor, got list"),
    (dict(b_scale=FakeTensor((2,), "float32")), "b_scale must be 2-D"),
    (dict(b=FakeTensor((256, 256), "float8_e4m3fn", device="cpu")), "b must be on a CUDA device"),
    (dict(a_scale=FakeTensor((8, 2), "float32", device="cuda:1")), "a_scale is on cuda:1 but a is on cuda:0"),
    (dict(a=FakeTensor((8, 256), "bfloat16")), "a must be torch.float8_e4m3fn, got bfloat16"),
    (dict(b=FakeTensor((256, 256), "float8_e4m3fn", strides=(1, 256))), "b must be contiguous"),
    (dict(a=FakeTensor((8, 256), "float8_e4m3fn", ptr=(1 << 20) + 8)), "16-byte aligned for TMA .data_ptr % 16 = 8"),
    (dict(b_scale=FakeTensor((2, 2), "float16")), "b_scale must be torch.float32"),
])
def test_w8a8_operands_say_what_is_wrong_in_one_line(over, msg):
    from fp8lab.kernels import _checks

    with pytest.raises(ValueError, match=msg) as e:
        _checks.w8a8_operands(**_w8a8(**over), torch=torch, aligned_for="TMA")
    assert "\n" not in str(e.value)
    _checks.w8a8_operands(**_w8a8(), torch=torch, aligned_for="TMA")      # the good operands pass


@pytest.mark.parametrize("out, msg", [
    (FakeTensor((8, 256), "float16"), "out must be a torch.bfloat16 tensor"),
    (FakeTensor((8, 255), "bfloat16"), r"out must be \(M, N\) = \(8, 256\)"),
    (FakeTensor((256, 8), "bfloat16").t(), "out must be contiguous"),
    (FakeTensor((8, 256), "bfloat16", device="cuda:1"), "out is on cuda:1"),
    (FakeTensor((8, 256), "bfloat16", ptr=(1 << 20) + 4), r"out must be 16-byte aligned \(the TMA store\)"),
])
def test_bf16_out(out, msg):
    from fp8lab.kernels import _checks

    with pytest.raises(ValueError, match=msg):
        _checks.bf16_out(out, 8, 256, FakeTensor((8, 256), "float8_e4m3fn"), torch, align=16, why="the TMA store")
