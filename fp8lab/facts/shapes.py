"""Real model GEMM shapes: one place for every notebook and benchmark.

A linear layer ``y = x @ W^T`` with ``x`` of shape (M, K) and ``W`` of shape (N, K):
M is the number of tokens (the batch at decode), N the output features, K the input
features. Tests use small odd shapes; benchmarks use these.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Shape:
    model: str
    site: str
    N: int
    K: int
    note: str = ""

    @property
    def name(self) -> str:
        return f"{self.model}:{self.site}"

    def weight_elements(self) -> int:
        return self.N * self.K



def _s(model, site, N, K, note=""):
    return Shape(model, site, N, K, note)


SHAPES: dict[str, list[Shape]] = {
    # Qwen3-8B: hidden 4096, intermediate 12288, 32 query heads + 8 KV heads of 128.
    "qwen3-8b": [
        _s("qwen3-8b", "qkv", 6144, 4096, "(32 + 8 + 8) x 128 outputs"),
        _s("qwen3-8b", "o_proj", 4096, 4096, "seed 000's o_proj (16 MB of FP8 weights)"),
        _s("qwen3-8b", "gate_up", 24576, 4096, "2 x 12288, fused"),
        _s("qwen3-8b", "down_proj", 4096, 12288, "seed 000's down_proj (K = 12288)"),
    ],
    # DeepSeek-V3 (hidden 7168; MLA with q_lora 1536, kv_lora 512, rope 64, 128 heads;
    # dense MLP 18432; routed experts 2048).
    "deepseek-v3": [
        _s("deepseek-v3", "q_a", 1536, 7168, "MLA query down-projection"),
        _s("deepseek-v3", "kv_a", 576, 7168, "MLA KV down-projection (512 + 64 rope)"),
        _s("deepseek-v3", "q_b", 24576, 1536, "128 heads x (128 + 64)"),
        _s("deepseek-v3", "kv_b", 32768, 512, "128 heads x (128 + 128)"),
        _s("deepseek-v3", "o_proj", 7168, 16384, "128 heads x 128"),
        _s("deepseek-v3", "dense_gate_up", 36864, 7168, "2 x 18432, fused"),
        _s("deepseek-v3", "dense_down", 7168, 18432, ""),
        _s("deepseek-v3", "expert_gate_up", 4096, 7168, "one routed expert, 2 x 2048"),
        _s("deepseek-v3", "expert_down", 7168, 2048, "one routed expert"),
    ],
    # Llama-3-8B / 70B, the usual weight-only decode shapes.
    "llama3-8b": [
        _s("llama3-8b", "qkv", 6144, 4096, "(32 + 8 + 8) x 128"),
        _s("llama3-8b", "o_proj", 4096, 4096, ""),
        _s("llama3-8b", "gate_up", 28672, 4096, "2 x 14336, fused"),
        _s("llama3-8b", "down_proj", 4096, 14336, ""),
    ],
    "llama3-70b": [
        _s("llama3-70b", "qkv", 10240, 8192, "(64 + 8 + 8) x 128"),
        _s("llama3-70b", "o_proj", 8192, 8192, ""),
        _s("llama3-70b", "gate_up", 57344, 8192, "2 x 28672, fused"),
        _s("llama3-70b", "down_proj", 8192, 28672, ""),
    ],
}

#: M values for sweeps: decode (1..64) and the whole range (1..8192), powers of two.
DECODE_MS = (1, 2, 4, 8, 16, 32, 64)
SWEEP_MS = tuple(2**i for i in range(14))          # 1 .. 8192


def models() -> list[str]:
    return list(SHAPES)


def shapes(model: str | None = None, sites=None) -> list[Shape]:
    """Shapes of one model (or all), optionally only the named sites."""
    if model is None:
        out = [s for group in SHAPES.values() for s in group]
    else:
        if model not in SHAPES:
            raise ValueError(f"unknown model {model!r}; known: {', '.join(SHAPES)}")
        out = list(SHAPES[model])
    if sites is not None:
        sites = [sites] if isinstance(sites, str) else list(sites)
        known = {s.site for s in out}
        bad = [x for x in sites if x not in known]
        if bad:
            raise ValueError(f"unknown site(s) {bad} for {model or 'any model'}; known: {sorted(known)}")
        out = [s for s in out if s.site in sites]
    return out


def get(name: str) -> Shape:
    """'qwen3-8b:o_proj' -> Shape."""
    if ":" not in name:
        raise ValueError(f"shape name must be 'model:site', got {name!r}")
    model, site = name.split(":", 1)
    return shapes(model, [site])[0]


def short_name(name: str) -> str:
    """A shape's name for titles and ticks where the model is said once already: the site alone
    for Qwen3-8B (the blockwise notebooks' default model), 'DSv3 <site>' for DeepSeek-V3, and
    the full 'model:site' for every other model."""
    if name.startswith("qwen3-8b:"):
        return name.split(":", 1)[1]
    return name.replace("deepseek-v3:", "DSv3 ")
