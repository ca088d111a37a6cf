"""Number formats and their emulators: FP8 / FP4 / INT encodings, scales, and the dequant bit tricks
re-done in NumPy (what the kernels are checked against)."""
