"""Measuring on the GPU: timing (L2-rotated, CUDA graphs), clocks observed (and locked only on
request), the progress of a sweep."""
