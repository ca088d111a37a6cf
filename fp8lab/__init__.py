"""fp8lab: reproduce claims about block-scaled FP8 and weight-only FP8/FP4 GEMMs.

One subpackage per layer, imports running down (tests/test_layers.py): ``paths`` ->
``emulate`` / ``facts`` -> ``toolchain`` -> ``kernels`` -> ``arms`` -> ``measure`` -> ``report``
-> ``experiments`` / ``peers`` -> ``run``. The README's "Where the code lives" says what each holds.
"""

__version__ = "0.1.0"
