"""Peers: other people's kernels (Marlin, gemlite, torchao, vLLM, sgl-kernel, DeepGEMM) run
through fp8lab's own check-then-time path beside fp8lab's arms (issue 17).

- :mod:`.catalog`: every peer's library, licence, install line and format (pure data);
- :mod:`.discover`: is it here (import probe / source build), which version;
- :mod:`.adapters`: fp8lab's weights -> the peer's own operands and float64 reference;
- :mod:`.harness`: poisoned check, rotated timing, NVML clocks, peer columns;
- :mod:`.sweeps`: one sweep per notebook (05, 08, 11, 06b), a not-run row for a missing peer;
- :mod:`.build`: the original Marlin built from its own source (``python -m fp8lab.peers build``).

Nothing here imports torch at import time.
"""

from ..arms.peer_catalog import PEERS, Peer, get, ids, ids_for, weight_stream_bytes
from .discover import Availability, PeerUnavailable, availability
# the README's peers table lives in the report layer (`python -m fp8lab claims` rewrites it too)
from ..report.peer_table import README_BEGIN, README_END, in_data, in_data_cell, readme_table, render_readme

__all__ = ["PEERS", "Peer", "get", "ids", "ids_for", "weight_stream_bytes", "Availability", "PeerUnavailable",
           "availability", "table", "README_BEGIN", "README_END", "in_data", "in_data_cell", "readme_table",
           "render_readme"]


def table(peers=None, *, avail=None):
    """One row per peer: id, library, notebooks, availability here, version, licence, install
    line, format, how it reaches the offline box (a pandas DataFrame)."""
    import pandas as pd

    avail = avail or availability
    rows = []
    for pid in (peers or PEERS):
        p = get(pid)
        a = avail(pid)
        rows.append(dict(peer=pid, library=p.library, notebooks=", ".join(p.notebooks), here="yes" if a.ok else "no",
                         version=a.version, reason=a.reason, licence=p.licence, install=p.install, weight=p.weight,
                         scales=p.scales, act=p.act, offline_box=p.carried or "wheel"))
    return pd.DataFrame(rows)
