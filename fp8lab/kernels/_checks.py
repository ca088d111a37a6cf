"""The operand checks the W8A8 blockwise wrappers share (mma_blockwise, cutlass_blockwise_sm90,
triton_blockwise): each misuse raises one ValueError line naming the operand. Shape rules that
differ between the kernels (K a multiple of 128 or any K, int32 limits) stay with each kernel.
torch is passed in: this module imports on a machine without it."""

from __future__ import annotations


def need(cond, msg: str) -> None:
    if not cond:
        raise ValueError(msg)


def w8a8_operands(a, a_scale, b, b_scale, torch, *, aligned_for: str) -> None:
    """a (M, K) and b (N, K) e4m3, contiguous and 16-byte aligned (``aligned_for``: what loads
    them, for the message), fp32 scales, all 2-D tensors on one CUDA device."""
    for name, t in (("a", a), ("a_scale", a_scale), ("b", b), ("b_scale", b_scale)):
        need(isinstance(t, torch.Tensor), f"{name} must be a torch.Tensor, got {type(t).__name__}")
        need(t.dim() == 2, f"{name} must be 2-D, got shape {tuple(t.shape)}")
        need(t.is_cuda, f"{name} must be on a CUDA device, got {t.device}")
        need(t.device == a.device, f"{name} is on {t.device} but a is on {a.device}: all on one device")
    for name, t in (("a", a), ("b", b)):
        need(t.dtype == torch.float8_e4m3fn, f"{name} must be torch.float8_e4m3fn, got {t.dtype}")
        need(t.is_contiguous(), f"{name} must be contiguous (row-major, K innermost), got strides {t.stride()}")
        need(t.data_ptr() % 16 == 0, f"{name} must be 16-byte aligned for {aligned_for} (data_ptr % 16 = "
                                     f"{t.data_ptr() % 16})")
    for name, t in (("a_scale", a_scale), ("b_scale", b_scale)):
        need(t.dtype == torch.float32, f"{name} must be torch.float32, got {t.dtype}")


def positive_scales(a_scale, b_scale, variant: str, torch) -> None:
    """Every scale finite and > 0 (a device sync): the in-place variants divide by them."""
    for name, s in (("a_scale", a_scale), ("b_scale", b_scale)):
        if not bool(torch.all(torch.isfinite(s) & (s > 0))):
            raise ValueError(f"{name} must be finite and > 0 everywhere (variant {variant} divides by it)")


def bf16_out(out, M: int, N: int, a, torch, *, align: int, why: str) -> None:
    """``out``: a contiguous (M, N) bf16 tensor on a's device, ``align``-byte aligned (``why``)."""
    need(isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16, "out must be a torch.bfloat16 tensor")
    need(tuple(out.shape) == (M, N), f"out must be (M, N) = {(M, N)}, got {tuple(out.shape)}")
    need(out.is_contiguous(), "out must be contiguous (row-major)")
    need(out.device == a.device, f"out is on {out.device} but a is on {a.device}")
    need(out.data_ptr() % align == 0, f"out must be {align}-byte aligned ({why})")
