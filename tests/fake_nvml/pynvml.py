"""A stand-in for pynvml shared by every process of a test run (the runner, the executor,
the Jupyter kernel): its GPUs, their locks and every lock/reset call live in the JSON file
named by $FP8LAB_FAKE_NVML. Tests put this folder first on the PYTHONPATH of the processes
they start, so no real clock is ever touched."""

import fcntl
import json
import os

NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0
NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_NO_PERMISSION, NVML_ERROR_NOT_FOUND = 3, 4, 6


class NVMLError(Exception):
    def __init__(self, value):
        super().__init__(f"fake NVML error {value}")
        self.value = value


def create(path, n_gpus=2):
    """A fresh fake with ``n_gpus`` GPUs, GPU-fake-0 ...; returns the path."""
    with open(path, "w") as f:
        json.dump({"gpus": [f"GPU-fake-{i}" for i in range(n_gpus)], "sm": {}, "mem": {},
                   "calls": []}, f)
    return path


def read(path=None):
    with open(path or os.environ["FP8LAB_FAKE_NVML"]) as f:
        return json.load(f)


def _update(fn):
    path = os.environ["FP8LAB_FAKE_NVML"]
    with open(path + ".lock", "a") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        st = read(path)
        out = fn(st)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(st, f)
        os.replace(tmp, path)
        return out


def nvmlInit():
    read()


def nvmlShutdown():
    pass


def nvmlDeviceGetCount():
    return len(read()["gpus"])


def nvmlDeviceGetHandleByIndex(i):
    gpus = read()["gpus"]
    if not 0 <= int(i) < len(gpus):
        raise NVMLError(NVML_ERROR_NOT_FOUND)
    return gpus[int(i)]


def nvmlDeviceGetHandleByUUID(u):
    if u not in read()["gpus"]:
        raise NVMLError(NVML_ERROR_NOT_FOUND)
    return u


def nvmlDeviceGetUUID(h):
    return h


def nvmlDeviceGetName(h):
    return "Fake GPU"


def _lock(kind, h, lo, hi):
    def f(st):
        st[kind][h] = [lo, hi]
        st["calls"].append([os.getpid(), "lock_" + kind, h])
    _update(f)


def _reset(kind, h):
    def f(st):
        st[kind].pop(h, None)
        st["calls"].append([os.getpid(), "reset_" + kind, h])
    _update(f)


def nvmlDeviceSetGpuLockedClocks(h, lo, hi):
    _lock("sm", h, lo, hi)


def nvmlDeviceSetMemoryLockedClocks(h, lo, hi):
    _lock("mem", h, lo, hi)


def nvmlDeviceResetGpuLockedClocks(h):
    _reset("sm", h)


def nvmlDeviceResetMemoryLockedClocks(h):
    _reset("mem", h)
