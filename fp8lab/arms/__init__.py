"""fp8lab's arms. Today: the registry of every id's label, colour and scheme
(:mod:`fp8lab.arms.registry`); the kernels, references and counts of issue 18 move in later."""

from .registry import UnknownId, activation, color, entry, ids, label, scheme, short_label

__all__ = ["UnknownId", "activation", "color", "entry", "ids", "label", "scheme", "short_label"]
