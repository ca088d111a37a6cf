"""However a run ends, nothing it started outlives it: no kernel keeps running (and
writing), no clock lock stays set. The runner runs as a real process here, on fixture
notebooks that take a clock lock through a fake NVML shared by every process
(tests/fake_nvml/pynvml.py); each test ends the run another way: a timeout, Ctrl-C,
SIGTERM, SIGHUP, SIGKILL of the runner, a kernel that dies while it holds the lock."""

import json
import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import fp8lab
from nb_fixture import make_notebook, write_manifest

ROOT = Path(fp8lab.__file__).resolve().parents[1]
FAKE_DIR = Path(__file__).parent / "fake_nvml"
# the fake, loaded by path under its own name: `import pynvml` would return the real module
# when an earlier test of the session imported it
_spec = importlib.util.spec_from_file_location("fp8lab_fake_pynvml", FAKE_DIR / "pynvml.py")
fake_nvml = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fake_nvml)

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="needs Linux /proc")

RUNNER = """
import sys
from pathlib import Path
from fp8lab.run import cli, notebooks
notebooks.manifest_path = lambda: Path(sys.argv[1])
sys.exit(cli.main(sys.argv[2:]))
"""


def _nb(*cells):
    return make_notebook(*cells)


def _lock_cell(flag: Path, done: Path, after_lock: str = "time.sleep(120)") -> str:
    return ("import json, os, time\n"
            "from fp8lab.measure import clocks\n"
            "with clocks.locked_clocks(1200, opt_in=True) as lock:\n"
            "    assert lock.locked, lock.status\n"
            f"    open({str(flag)!r}, 'w').write(json.dumps({{'pid': os.getpid(), 'uuid': getattr(lock, 'uuid', None)}}))\n"
            f"    {after_lock}\n"
            f"open({str(done)!r}, 'w').write('finished')\n")


@pytest.fixture
def world(tmp_path):
    """Fixture notebooks 20 and 21 (each locks, then sleeps), a fake NVML with two GPUs,
    the environment a runner process needs to see both."""
    nbdir = tmp_path / "notebooks"
    nbdir.mkdir()
    nbs = {f"{nid}_lock": _nb(_lock_cell(tmp_path / f"{nid}.flag", tmp_path / f"{nid}.done")) for nid in ("20", "21")}
    nbs["22_dies"] = _nb(_lock_cell(tmp_path / "22.flag", tmp_path / "22.done", "os.kill(os.getpid(), 9)"))
    manifest = write_manifest(nbdir, nbs, timeout=lambda name: 300, title=lambda name: name if "lock" in name else "22")
    state = fake_nvml.create(str(tmp_path / "nvml.json"))
    env = {**os.environ, "FP8LAB_FAKE_NVML": state,
           "PYTHONPATH": os.pathsep.join([str(FAKE_DIR), str(ROOT)]),
           "FP8LAB_DATA_DIR": str(tmp_path / "data"), "FP8LAB_FIGURES_DIR": str(tmp_path / "figs")}
    for k in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "FP8LAB_CLOCK_STATE", "FP8LAB_MODE"):
        env.pop(k, None)
    # the serial runner pins nothing: the notebook's cuda:0 is named by UUID here
    env["CUDA_VISIBLE_DEVICES"] = "GPU-fake-1"
    return {"tmp": tmp_path, "manifest": manifest, "state": state, "env": env}


def _default_stop_signals():
    # a shell starts a background job (`pytest ... &`) with SIGINT ignored, `nohup` starts it
    # with SIGHUP ignored, and the runner would inherit either (a signal its caller ignores
    # stays ignored, by design): give it the default dispositions a terminal gives, which is
    # what these tests stop it with
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def _start(world, *args):
    return subprocess.Popen(
        [sys.executable, "-c", RUNNER, str(world["manifest"]), "run", "--mode", "replot",
         "--no-progress", "--out", str(world["tmp"] / "run"), *args],
        cwd=ROOT, env=world["env"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True, preexec_fn=_default_stop_signals)


def _wait_for(path: Path, proc, timeout=90.0) -> dict:
    t_end = time.monotonic() + timeout
    while time.monotonic() < t_end:
        if path.is_file() and path.read_text():
            return json.loads(path.read_text())
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the runner ended before the lock was taken:\n{out}\n{err}")
        time.sleep(0.1)
    proc.kill()
    pytest.fail(f"no lock within {timeout} s")


def _gone(pid: int, timeout=20.0) -> bool:
    from fp8lab.toolchain import procs
    t_end = time.monotonic() + timeout
    while time.monotonic() < t_end:
        if not procs.alive(pid):
            return True
        time.sleep(0.1)
    return False


def _assert_released(world, holders):
    """Every kernel that locked is dead, its lock reset, and nothing finished after."""
    for nid, h in holders.items():
        assert _gone(h["pid"]), f"kernel {h['pid']} of {nid} still runs"
    st = fake_nvml.read(world["state"])
    assert st["sm"] == {} and st["mem"] == {}, f"locks left: {st}"
    for nid, h in holders.items():
        assert h["uuid"] is not None
        resets = [c for c in st["calls"] if c[1] == "reset_sm" and c[2] == h["uuid"]]
        assert resets, f"{h['uuid']} was never reset: {st['calls']}"
    time.sleep(1.0)
    for nid in holders:
        assert not (world["tmp"] / f"{nid}.done").exists(), f"{nid} kept running after the stop"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_kills_the_notebook_and_resets_its_lock(world, sig):
    proc = _start(world, "--only", "20")
    holder = _wait_for(world["tmp"] / "20.flag", proc)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=90)
    assert holder["uuid"] == "GPU-fake-1"           # the GPU CUDA_VISIBLE_DEVICES names
    assert proc.returncode == 128 + sig, err
    assert f"fp8lab: stopped by {signal.Signals(sig).name}: the running notebooks were killed" in err
    assert "Traceback" not in err
    _assert_released(world, {"20": holder})


def test_timeout_resets_the_lock(world):
    proc = _start(world, "--only", "20", "--timeout", "20")
    holder = _wait_for(world["tmp"] / "20.flag", proc)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1
    assert "timed out after 20 s" in out
    _assert_released(world, {"20": holder})


def test_a_kernel_killed_while_locked_leaves_no_lock(world):
    # SIGKILL inside the notebook: none of the kernel's own resets (finally, atexit,
    # SIGTERM handler) can run; the runner's record is all that is left.
    proc = _start(world, "--only", "22")
    out, err = proc.communicate(timeout=120)
    holder = json.loads((world["tmp"] / "22.flag").read_text())
    assert proc.returncode == 1
    assert f"reset the clock lock that pid {holder['pid']} left on GPU-fake-1" in out
    st = fake_nvml.read(world["state"])
    resets = [c for c in st["calls"] if c[1] == "reset_sm"]
    assert st["sm"] == {} and resets and resets[0][0] == proc.pid       # by the runner itself


def test_sigkill_of_the_runner_orphans_nothing(world):
    # Nothing in the runner runs after SIGKILL: its executor finds itself orphaned, kills
    # the kernel and resets the lock.
    proc = _start(world, "--only", "20")
    holder = _wait_for(world["tmp"] / "20.flag", proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    _assert_released(world, {"20": holder})


def test_stop_during_two_lanes_releases_both_gpus(world):
    # --gpus 0,1: each lane's notebook locks the GPU its lane is pinned to, by NVML id.
    world["env"].pop("CUDA_VISIBLE_DEVICES")
    proc = _start(world, "--only", "20,21", "--gpus", "0,1", "--stagger", "0")
    holders = {nid: _wait_for(world["tmp"] / f"{nid}.flag", proc) for nid in ("20", "21")}
    assert sorted(h["uuid"] for h in holders.values()) == ["GPU-fake-0", "GPU-fake-1"]
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err
    _assert_released(world, holders)


def test_running_cell_names_the_cell_a_kill_interrupted(tmp_path):
    """A timeout or stop names the cell that was running: the one papermill marked running, or,
    when the kill landed between two saves of the copy, the first code cell after the last one
    the copy shows completed; 'before any cell' only when none completed."""
    import nbformat

    from fp8lab.run import notebooks

    def nb_with(statuses):
        nb = nbformat.v4.new_notebook()
        for st in statuses:
            c = nbformat.v4.new_code_cell("pass") if st != "md" else nbformat.v4.new_markdown_cell("x")
            if st not in ("md", None):
                c.metadata["papermill"] = {"status": st}
            nb.cells.append(c)
        p = tmp_path / f"nb{len(list(tmp_path.iterdir()))}.ipynb"
        nbformat.write(nb, p)
        return p

    assert notebooks.running_cell(nb_with(["completed", "running", "pending"])) == 1
    assert notebooks.running_cell(nb_with(["completed"] * 6 + ["md", "pending", "pending"])) == 7
    assert notebooks.running_cell(nb_with(["pending", "pending"])) is None
    assert notebooks.running_cell(tmp_path / "missing.ipynb") is None
