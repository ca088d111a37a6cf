"""vLLM's Triton block-FP8 GEMM (``_w8a8_triton_block_scaled_mm``, what vLLM's
``w8a8_triton_block_scaled_mm`` launches: its W8A8 block-FP8 linear layer where CUTLASS and
DeepGEMM are not used), run from vLLM's released source without vLLM: vLLM cannot be imported on
a box that lacks its 89 MB CUDA extension (its CUDA platform imports it), so the kernel is taken
from ``fp8_utils.py`` of vLLM's sdist (fp8lab.peers.vllm_quant unpacks it, with the tuned configs
vLLM ships for NVIDIA GPUs) and launched as vLLM launches it.

- :func:`kernel_source` cuts the kernel (its ``@triton.jit`` function, verbatim) out of vLLM's
  file; :func:`kernel` writes it into ``build/peers/vllm-triton/`` as a module of its own (Triton
  reads a kernel's source from its file) and imports it.
- :func:`matmul` is the launch of vLLM's ``w8a8_triton_block_scaled_mm`` for 128 x 128 blocks:
  the tuned config for this device and (N, K) where vLLM ships one (the entry of the batch size
  closest to M), else vLLM's default (64 x 128 x 128 tiles, group 32, 4 warps, 2 stages); one
  program per output tile; fp32 scales.
"""

from __future__ import annotations

import ast
import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Optional

from .. import paths
from . import vllm_quant

KERNEL = "_w8a8_triton_block_scaled_mm"
CONFIG_DIR = "vllm/model_executor/layers/quantization/utils/configs"
BUILD_ENV = "FP8LAB_VLLM_TRITON_BUILD"
#: vLLM's default config (w8a8_triton_block_scaled_mm, when no tuned file matches)
DEFAULT_CONFIG = {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 32,
                  "num_warps": 4, "num_stages": 2}


def src_dir() -> Path:
    return vllm_quant.src_dir()


def build_dir() -> Path:
    env = os.environ.get(BUILD_ENV)
    return Path(env) if env else paths.repo_root() / "build" / "peers" / "vllm-triton"


def missing_source(src: Optional[Path] = None) -> Optional[str]:
    src = src or src_dir()
    if not (src / vllm_quant.FP8_UTILS).exists():
        return (f"vLLM's Triton block-FP8 GEMM source is not at {src} (no {vllm_quant.FP8_UTILS}): run "
                f"`{vllm_quant.INSTALL.split(' && ')[0]}`")
    return None


def kernel_source(src: Optional[Path] = None) -> str:
    """The kernel's text in vLLM's file, decorator included, unchanged; ValueError when the file
    has no such ``@triton.jit`` function."""
    path = (src or src_dir()) / vllm_quant.FP8_UTILS
    text = path.read_text()
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef) and node.name == KERNEL:
            decos = [ast.get_source_segment(text, d) for d in node.decorator_list]
            if decos != ["triton.jit"]:
                raise ValueError(f"{KERNEL} in {path} is decorated {decos}, not @triton.jit alone")
            start = min(d.lineno for d in node.decorator_list) - 1
            return "\n".join(text.splitlines()[start:node.end_lineno]) + "\n"
    raise ValueError(f"{path} has no function {KERNEL}")


@lru_cache(maxsize=None)
def _load(src: str, out: str):
    import importlib.util

    body = kernel_source(Path(src))
    stamp = vllm_quant.source_stamp(Path(src))
    mod_path = Path(out) / "vllm_w8a8_block_mm.py"
    mod_path.parent.mkdir(parents=True, exist_ok=True)
    text = (f"# {KERNEL}, cut unchanged from vLLM {stamp.get('version', '?')}'s {vllm_quant.FP8_UTILS}\n"
            f"# (sdist sha256 {stamp.get('sha256', '?')}) by fp8lab.peers.vllm_triton; Apache-2.0, vLLM's licence.\n"
            "import triton\nimport triton.language as tl\n\n\n" + body)
    if not mod_path.exists() or mod_path.read_text() != text:
        mod_path.write_text(text)
    spec = importlib.util.spec_from_file_location("_fp8lab_vllm_w8a8_block_mm", mod_path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, KERNEL)


def kernel():
    """vLLM's kernel (a Triton JITFunction); PeerUnavailable naming what to run when the source
    or Triton is missing or the file has changed shape."""
    from .discover import PeerUnavailable

    why = missing_source()
    if why:
        raise PeerUnavailable(why)
    try:
        import triton  # noqa: F401
    except ImportError as e:
        raise PeerUnavailable(f"triton is not installed ({e})") from e
    try:
        return _load(str(src_dir()), str(build_dir()))
    except ValueError as e:
        raise PeerUnavailable(str(e)) from e


def device_file_name(name: str) -> str:
    """vLLM's device name in its config file names (``NVIDIA H200`` -> ``NVIDIA_H200``)."""
    return name.replace(" ", "_")


def config_file(N: int, K: int, device_name: str, src: Optional[Path] = None) -> Path:
    return ((src or src_dir()) / CONFIG_DIR /
            f"N={N},K={K},device_name={device_file_name(device_name)},dtype=fp8_w8a8,block_shape=[128,128].json")


def pick_config(M: int, N: int, K: int, device_name: str, src: Optional[Path] = None) -> tuple[dict, str]:
    """(config, where from): vLLM's tuned entry for the batch size closest to M from its file for
    this device and (N, K), else its default."""
    f = config_file(N, K, device_name, src)
    if f.exists():
        table = {int(k): v for k, v in json.loads(f.read_text()).items()}
        m = min(table, key=lambda b: abs(b - M))
        return dict(table[m]), f"tuned ({f.name}, entry M={m})"
    return dict(DEFAULT_CONFIG), "vLLM's default config (no tuned file for this device and N, K)"


def matmul(A, B, As, Bs, config: dict, out_dtype=None):
    """C = (A x As) (B x Bs)^T as vLLM's w8a8_triton_block_scaled_mm launches its kernel: A (M, K)
    e4m3 row-major, As (M, K/128) fp32, B (N, K) e4m3, Bs (N/128, K/128) fp32, 128 x 128 blocks."""
    import torch
    import triton

    M, K = A.shape
    N = B.shape[0]
    C = A.new_empty((M, N), dtype=out_dtype or torch.bfloat16)

    def grid(meta):
        return (triton.cdiv(M, meta["BLOCK_SIZE_M"]) * triton.cdiv(N, meta["BLOCK_SIZE_N"]),)

    kernel()[grid](A, B, C, As, Bs, M, N, K, 128, 128, A.stride(-2), A.stride(-1), B.stride(1), B.stride(0),
                   C.stride(-2), C.stride(-1), As.stride(-2), As.stride(-1), Bs.stride(1), Bs.stride(0), **config)
    return C


def version() -> str:
    st = vllm_quant.source_stamp()
    return f"vLLM {st.get('version', '?')} sdist (its Triton kernel, run from its source)" if st else "source"
