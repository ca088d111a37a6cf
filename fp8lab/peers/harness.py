"""The check-then-time path every peer goes through, the same as fp8lab's arms.

A peer adapter (:mod:`fp8lab.peers.adapters`) turns fp8lab's generated weights into the
peer's own operands with the peer's own quantisation and packing functions and returns a
:class:`Prepared`: the packed state, a call, and the float64 weights dequantised from what the
peer stored (its scales and codes as the kernel will read them). Here:

1. one call into a NaN-poisoned output (``out=`` where the peer takes one, else the freed
   block the caching allocator most likely hands back), compared with ``x @ w_ref.T`` in
   float64 on a few rows; a failing peer is a ``failed-check`` row and is not timed;
2. copies of the packed state rotated over more than 2x L2, timed with ``bench.bench``
   (CUDA-graph replay for decode, events with L2 flushed for prefill; a peer whose call cannot
   be captured in a graph is timed with events and the row says so) inside ``clocks.timed``
   (NVML clock columns);
3. its bandwidth from the bytes of the tensors it really reads (:func:`tensor_bytes`).

Anything that stops a peer becomes a row with a status (``not-run: ...`` with the install
line, ``failed-check: ...``, ``error: ...``): the sweep never raises for a peer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

# the check-then-time steps are fp8lab's own (fp8lab.measure.harness), named here for the sweeps
from ..measure.harness import CHECK_RELERR, error_text, relerr, time_rotated
from ..emulate import blockscale

__all__ = ["Prepared", "tensor_bytes", "relerr", "check", "poisoned_call", "time_rotated", "CHECK_RELERR",
           "PEER_COLUMNS", "peer_columns", "status_row", "error_text", "act_dtype", "blockwise_operands"]

#: columns every peer row carries besides its notebook's own table columns
PEER_COLUMNS = ["status", "peer", "library", "version", "licence", "install", "weight_format", "scale_format",
                "peer_act", "format_bytes", "bytes_note", "config"]


@dataclass
class Prepared:
    """A peer's operands for one (N, K) weight, ready to check and time.

    ``call(state, x, out)`` -> (M, N) output; ``out`` is a poisoned tensor when ``takes_out``,
    else None (the peer allocates). ``clone(state)`` a fresh copy of the packed weights (for
    rotation). ``w_ref`` (N, K) float64 on the device: the peer's own dequantised weights.
    ``weights(state)``: the tensors of the weight stream the kernel reads per call."""
    state: object
    call: Callable
    clone: Callable
    weights: Callable
    w_ref: object
    act: str                      # "bf16" | "fp16" | "e4m3" (activations the call takes)
    takes_out: bool = False
    config: str = ""
    extra: dict = field(default_factory=dict)


def tensor_bytes(tensors) -> int:
    """Bytes held by ``tensors`` (anything with numel() and element_size(); None skipped)."""
    return int(sum(t.numel() * t.element_size() for t in tensors if t is not None))


def _sync(t) -> None:
    """Wait for the device that holds ``t`` (nothing to wait for on the CPU, where the tests run)."""
    import torch

    if getattr(t, "is_cuda", False):
        torch.cuda.synchronize(t.device)


def poisoned_call(prep: Prepared, x, M: int, N: int):
    """One call whose output starts as NaN: an output the kernel never wrote shows."""
    import torch

    from ..measure.harness import poison_allocator, poisoned

    dt = x.dtype if x.dtype in (torch.bfloat16, torch.float16) else torch.bfloat16
    if prep.takes_out:
        out = poisoned((M, N), dt, x.device)
        got = prep.call(prep.state, x, out)
        got = out if got is None else got
    else:
        prep.call(prep.state, x, None)             # first call: autotuning, workspaces
        poison_allocator((M, N), dt, x.device)
        got = prep.call(prep.state, x, None)
    _sync(got)
    return got


def check(prep: Prepared, x, ref_x=None, rows: int = 4) -> tuple[float, int]:
    """(relative error vs float64 on the first ``rows`` rows, NaNs left anywhere). ``ref_x``:
    the float64 activations the reference multiplies (default: ``x``)."""
    import torch

    M, N = x.shape[0], prep.w_ref.shape[0]
    got = poisoned_call(prep, x, M, N)
    if tuple(got.shape) != (M, N):
        raise RuntimeError(f"returned shape {tuple(got.shape)}, expected ({M}, {N})")
    nan_left = int(torch.isnan(got).sum().item())
    r = min(rows, M)
    xr = (x if ref_x is None else ref_x)[:r].double()
    ref = xr @ prep.w_ref.t()
    return relerr(got[:r], ref), nan_left


def peer_columns(peer_id: str, version: str = "", status: str = "measured", *, nbytes: float = math.nan,
                 note: str = "") -> dict:
    """The PEER_COLUMNS of one row, from the peer_catalog."""
    from ..arms import peer_catalog

    p = peer_catalog.get(peer_id)
    return dict(status=status, peer=peer_id, library=p.library, version=version, licence=p.licence,
                install=p.install, weight_format=p.weight, scale_format=p.scales, peer_act=p.act,
                format_bytes=nbytes, bytes_note=note)


def status_row(columns, base: dict, peer_id: str, status: str, version: str = "") -> dict:
    """A row of ``columns`` (the notebook table's plus PEER_COLUMNS) for a peer that was not
    timed: NaN numbers, ``base`` (shape, M, arm, ...) and the status."""
    row = {c: math.nan for c in columns}
    row.update(base)
    row.update(peer_columns(peer_id, version, status))
    for c in ("timing_method", "clock_source", "clock_note", "clock_reasons", "grid", "schedule", "config"):
        if c in row and not isinstance(row[c], str):
            row[c] = ""
    return row


def act_dtype(act: str):
    """torch dtype of a peer's activations: "fp16" or bf16."""
    import torch

    return torch.float16 if act == "fp16" else torch.bfloat16


def blockwise_operands(M: int, N: int, K: int, seed: int, device: str = "cuda"):
    """fp8lab's operands for one blockwise point (experiments.blockwise.make_operands) and the
    weights a peer quantises: the same activations and weights fp8lab's arms get (the weights as
    their dequantised fp32 values: the peer's 128x128 blocks re-find them)."""
    from ..experiments import blockwise as bw

    s0 = bw.make_operands(M, N, K, seed=seed, device=device)
    w = s0.b.float() * blockscale.expand(s0.b_scale, N, K, (128, 128))
    return s0, w
