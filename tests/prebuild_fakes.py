"""Fake build loaders for tests/test_prebuild.py, imported by name in the driver's child
processes (a module of its own so that a child imports only this, not the test's imports)."""

import os
import time
from pathlib import Path


def fake_build(path, seconds=0.3):
    """Writes ``path`` (its start, end and MAX_JOBS) unless it exists, like a cached build."""
    p = Path(path)
    if p.exists():
        return p
    t0 = time.time()
    time.sleep(seconds)
    p.write_text(f"{t0} {time.time()} {os.environ['MAX_JOBS']}")
    return p


def fake_fail():
    raise RuntimeError("Error building extension 'fp8lab_x_0123': [1/2] nvcc -Xptxas -Werror x.cu\n"
                       "FAILED: x.cuda.o\nx.cu(3): error: expected a \";\"\n1 error detected")


def fake_crash():
    os._exit(3)


def fake_hang(lock=None):
    """Hangs; with ``lock``, holds it the way torch's cpp_extension holds its FileBaton."""
    if lock is None:
        time.sleep(120)
        return
    fd = os.open(lock, os.O_CREAT | os.O_EXCL)
    try:
        time.sleep(120)
    finally:
        os.close(fd)
        os.remove(lock)


def not_here():
    return False, "CUTLASS headers not found: install them\nsecond line"
