"""How far a kernel's output is from its float64 reference: the one relative-error rule every
check in fp8lab uses (fp8lab's arms, the peers, the seed-001 model, the tests).

Frobenius norm of (got - ref) over the Frobenius norm of ref, in float64. An output with any
non-finite value is infinitely wrong (a NaN-poisoned output the kernel left unwritten must never
pass); a zero reference is matched only by a zero output. Works on torch tensors (any device)
and on anything numpy reads; nothing is imported until it is needed, so this module loads on a
machine without torch.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["relerr"]


def _is_torch(t) -> bool:
    return type(t).__module__.startswith("torch")


def relerr(got, ref) -> float:
    """||got - ref||_F / ||ref||_F in float64; inf where ``got`` holds a NaN or an infinity, or
    where ``ref`` is all zeros and ``got`` is not (0.0 where both are)."""
    if _is_torch(got) or _is_torch(ref):
        import torch

        g = torch.as_tensor(got).double()
        r = torch.as_tensor(ref, device=g.device).double()
        if g.numel() and not bool(torch.isfinite(g).all()):
            return math.inf
        num, den = float(torch.linalg.norm(g - r)), float(torch.linalg.norm(r))
    else:
        g, r = np.asarray(got, np.float64), np.asarray(ref, np.float64)
        if g.size and not np.isfinite(g).all():
            return math.inf
        num, den = float(np.linalg.norm(g - r)), float(np.linalg.norm(r))
    if den == 0:
        return 0.0 if num == 0 else math.inf
    return num / den
