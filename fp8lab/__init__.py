"""fp8lab: reproduce claims about block-scaled FP8 and weight-only FP8/FP4 GEMMs.

Layers (one direction of flow): kernels and emulators -> experiments -> notebooks.
``fp8lab.results`` writes tidy tables with provenance, ``fp8lab.plotting`` draws them in
one house style, ``fp8lab.claims`` records verdicts for the claims ledger.
"""

__version__ = "0.1.0"
