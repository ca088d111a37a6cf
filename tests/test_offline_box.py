"""scripts/offline_box.sh, the GPU path on an offline box: what it refuses, and its job files."""
import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "offline_box.sh"


def _run(*args, **kw):
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=60, **kw)


def test_the_script_parses():
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0


def test_a_typo_in_a_step_is_one_line_before_anything_runs(tmp_path):
    job = tmp_path / "job"
    r = _run("run", str(job), "abc1234", "setup", "smok")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == ["unknown step 'smok' (steps: env setup marlin deepgemm deepgemm-bindings "
                                             "vllm-marlin vllm-cutlass vllm-quant sglang-quant gemlite-atomics quant-probe gemv-probe gemv-ncu w8a16-swapab decode-ablate quant-ncu quant-pdl copy-floor gemv-splits wgmma-bw w8a8-gemv decode-pattern decode-3cta decode-rows decode-rows-int4 "
                                             "smoke test-gpu proof run, or a notebook id "
                                             "such as 05)"]
    assert not job.exists()


def test_bad_arguments_print_the_usage(tmp_path):
    for args in ([], ["run", str(tmp_path)], ["wait", str(tmp_path)], ["nope", str(tmp_path), "x"]):
        r = _run(*args)
        assert r.returncode == 2 and r.stderr.startswith("usage: scripts/offline_box.sh"), (args, r.stderr)


def test_wait_and_pack_read_a_finished_job(tmp_path):
    job = tmp_path / "job"
    (job / "keep" / "data" / "h200").mkdir(parents=True)
    (job / "keep" / "data" / "h200" / "t.csv").write_text("a\n1\n")
    (job / "summary").write_text("05 rc=0 12s\n")
    (job / "log").write_text("=== step 05 rc=0 12 s\n")
    (job / "done").write_text("rc=0\n")
    r = _run("wait", str(job), "1")
    assert r.returncode == 0 and r.stdout.startswith("done (rc=0)\n05 rc=0 12s\n")
    dest = tmp_path / "out"
    assert _run("pack", str(job), str(dest)).returncode == 0
    listed = subprocess.run(["tar", "tzf", str(dest / "keep.tgz")], capture_output=True, text=True).stdout
    assert "./data/h200/t.csv" in listed.split()


def test_wait_returns_at_once_when_there_is_nothing_to_wait_for(tmp_path):
    """A device lent afresh keeps no job of the last one: waiting there slept out the whole
    timeout (520 s of device time, session 27). No job, or a job whose process died unfinished:
    one line, exit 3, at once."""
    import time

    t0 = time.monotonic()
    r = _run("wait", str(tmp_path / "nothing"), "50")
    assert r.returncode == 3 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [f"no job in {tmp_path / 'nothing'}: nothing was started here "
                                             "(a fresh machine keeps no job of an earlier one)"]
    job = tmp_path / "job"
    job.mkdir()
    (job / "log").write_text("=== step smoke start\n")
    (job / "summary").write_text("env rc=0 9s\n")
    dead = subprocess.Popen(["true"])
    dead.wait()
    (job / "pid").write_text(f"{dead.pid}\n")
    r = _run("wait", str(job), "50")
    assert r.returncode == 3 and r.stdout.startswith(f"stopped: the job's process {dead.pid} is gone")
    assert "env rc=0 9s" in r.stdout
    assert time.monotonic() - t0 < 20


def test_start_then_wait_follows_the_detached_job(tmp_path):
    root, calls, env = _fake_box(tmp_path)
    job = tmp_path / "job"
    script = str(root / "scripts" / "offline_box.sh")
    os.chmod(script, 0o755)                     # start runs the script itself, detached
    r = subprocess.run(["bash", script, "start", str(job), "abc1234", "setup"], capture_output=True, text=True,
                       timeout=60, env=env, cwd=root)
    assert r.returncode == 0 and (job / "pid").read_text().strip().isdigit()
    r = subprocess.run(["bash", script, "wait", str(job), "30"], capture_output=True, text=True, timeout=60,
                       env=env, cwd=root)
    assert r.returncode == 0 and r.stdout.startswith("done (rc=")


def test_start_runs_in_a_snapshot_that_a_new_copy_of_the_tree_cannot_touch(tmp_path):
    """`start` runs its steps in JOB/tree (runs/ left out), with PYTHONPATH and FP8LAB_ROOT there, so a
    tool that copies the tree to the box again while the job runs (its next call) cannot change what
    a running step reads; `setup` installs from the tree itself and shares its stamp; `pack` packs
    the snapshot's runs/."""
    root, calls, env = _fake_box(tmp_path)
    (root / "marker.txt").write_text("before\n")
    (root / "runs").mkdir()
    (root / "runs" / "old.txt").write_text("an earlier run\n")
    go = tmp_path / "go"
    make = tmp_path / "bin" / "make"
    make.write_text("#!/bin/sh\n"
                    f"case \"$*\" in *' setup '*) echo \"setup $1 $2\" >> {calls}; touch \"$2/.fp8lab-installed-x\" ;;\n"
                    f"smoke*) while [ ! -f {go} ]; do sleep 0.1; done\n"
                    f"  echo \"smoke in $(pwd) reads $(cat marker.txt) root $FP8LAB_ROOT path $PYTHONPATH\" >> {calls}\n"
                    "  mkdir -p runs/s && echo ok > runs/s/log ;;\nesac\n")
    make.chmod(0o755)
    script = root / "scripts" / "offline_box.sh"
    os.chmod(script, 0o755)
    job = tmp_path / "job"
    r = subprocess.run(["bash", str(script), "start", str(job), "abc1234", "setup", "smoke"], capture_output=True,
                       text=True, timeout=60, env=env, cwd=root)
    assert r.returncode == 0 and f"in a snapshot of the tree: {job}/tree" in r.stdout, r.stdout + r.stderr
    (root / "marker.txt").write_text("after\n")        # the tree copied again while the job runs
    go.write_text("")
    r = subprocess.run(["bash", str(script), "wait", str(job), "30"], capture_output=True, text=True, timeout=60,
                       env=env, cwd=root)
    assert r.returncode == 0 and r.stdout.startswith("done (rc=0)"), r.stdout
    lines = calls.read_text().splitlines()
    assert lines[0] == f"setup -C {root}"
    assert lines[1].startswith(f"smoke in {job}/tree reads before root {job}/tree path {job}/tree")
    assert (job / "tree" / ".fp8lab-installed-x").exists() and not (job / "tree" / "runs" / "old.txt").exists()
    dest = tmp_path / "out"
    r = subprocess.run(["bash", str(script), "pack", str(job), str(dest)], capture_output=True, text=True,
                       timeout=60, env=env, cwd=root)
    listed = subprocess.run(["tar", "tzf", str(dest / "runs.tgz")], capture_output=True, text=True).stdout.split()
    assert r.returncode == 0 and "runs/s/log" in listed and "runs/old.txt" not in listed


def _fake_box(tmp_path):
    """A copy of the script in a tree of its own, python3 on PATH a stub that logs its arguments."""
    root = tmp_path / "tree"
    (root / "scripts").mkdir(parents=True)
    (root / "scripts" / "offline_box.sh").write_text(SCRIPT.read_text())
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    calls = tmp_path / "calls"
    stub = bin_ / "python3"
    stub.write_text(f"#!/bin/sh\necho \"$*\" >> {calls}\n")
    stub.chmod(0o755)
    import os
    env = {**os.environ, "PATH": f"{bin_}{os.pathsep}{os.environ['PATH']}"}
    return root, calls, env


def test_a_measuring_step_builds_its_source_peers_first_only_when_missing(tmp_path):
    root, calls, env = _fake_box(tmp_path)
    r = subprocess.run(["bash", str(root / "scripts" / "offline_box.sh"), "run", str(tmp_path / "j1"), "abc1234",
                        "08", "07"], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = calls.read_text().splitlines()
    assert lines[0] == "-m fp8lab.peers build marlin"                 # before 08 measures, not before 07
    assert lines[1] == "-m fp8lab.peers build vllm-marlin"
    assert lines[2].startswith("-m fp8lab run --only 08 --mode measure")
    assert lines[3].startswith("-m fp8lab run --only 07") and len(lines) == 4
    # a build already there: nothing is rebuilt
    calls.unlink()
    (root / "build" / "peers" / "deepgemm-static-libstdcxx" / "deep_gemm").mkdir(parents=True)
    (root / "build" / "peers" / "deepgemm-static-libstdcxx" / "deep_gemm" / "_C.so").write_text("")
    r = subprocess.run(["bash", str(root / "scripts" / "offline_box.sh"), "run", str(tmp_path / "j2"), "abc1234",
                        "06"], capture_output=True, text=True, timeout=60, env=env)
    # 06 runs vLLM's CUTLASS blockwise GEMM and its quantiser too: built first while missing, then never again
    assert r.returncode == 0 and [c.split()[:4] for c in calls.read_text().splitlines()] == \
        [["-m", "fp8lab.peers", "build", "vllm-cutlass"], ["-m", "fp8lab.peers", "build", "vllm-quant"],
         ["-m", "fp8lab", "run", "--only"]]
    calls.unlink()
    for d, so in (("vllm-cutlass", "_fp8lab_vllm_cutlass.so"), ("vllm-quant", "_fp8lab_vllm_quant.so")):
        (root / "build" / "peers" / d).mkdir(parents=True)
        (root / "build" / "peers" / d / so).write_text("")
    r = subprocess.run(["bash", str(root / "scripts" / "offline_box.sh"), "run", str(tmp_path / "j3"), "abc1234",
                        "06"], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0 and [c.split()[:4] for c in calls.read_text().splitlines()] == \
        [["-m", "fp8lab", "run", "--only"]]


def test_proof_builds_once_then_runs_test_gpu_and_smoke_side_by_side(tmp_path):
    """Step 'proof': make build, then make test-gpu and make smoke at once (both PREBUILD=no); the step
    fails when either fails, and prints both tails."""
    root, calls, env = _fake_box(tmp_path)
    make = tmp_path / "bin" / "make"
    # a fake make: logs its start and end; test-gpu and smoke each take a second, smoke then fails
    make.write_text(f"#!/bin/sh\necho \"start $*\" >> {calls}\n"
                    f"case \"$*\" in smoke*) sleep 1; echo smoke-tail; echo \"end smoke\" >> {calls}; exit 4 ;;\n"
                    "test-gpu*) sleep 1; echo tests-tail ;; esac\n"
                    f"echo \"end $1\" >> {calls}\n")
    make.chmod(0o755)
    job = tmp_path / "j"
    r = subprocess.run(["bash", str(root / "scripts" / "offline_box.sh"), "run", str(job), "abc1234", "proof"],
                       capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 4, r.stdout + r.stderr
    lines = calls.read_text().splitlines()
    assert lines[0].startswith("start build ") and lines[1] == "end build"
    starts = [ln for ln in lines[2:] if ln.startswith("start ")]
    assert sorted(ln.split()[1] for ln in starts) == ["smoke", "test-gpu"]
    assert all(ln.endswith("PREBUILD=no") for ln in starts)
    assert [ln.split()[0] for ln in lines[2:]] == ["start", "start", "end", "end"]   # side by side
    assert "test-gpu rc=0:" in r.stdout and "tests-tail" in r.stdout and "smoke rc=4:" in r.stdout
    assert "smoke-tail" in r.stdout and (job / "summary").read_text().startswith("proof rc=4")
    assert "again alone" not in r.stdout                              # test-gpu passed: no rerun


def test_proof_runs_failed_gpu_tests_again_alone(tmp_path):
    """test-gpu fails beside smoke (a timing bound of the harness): its failures run again alone
    (ARGS=--lf, after smoke ended), and that run decides the step's exit status."""
    root, calls, env = _fake_box(tmp_path)
    make = tmp_path / "bin" / "make"
    make.write_text(f"#!/bin/sh\necho \"start $*\" >> {calls}\n"
                    "case \"$*\" in *ARGS=--lf*) echo rerun-tail; exit 0 ;; test-gpu*) echo tests-tail; exit 1 ;;\n"
                    "smoke*) sleep 1 ;; esac\n"
                    f"echo \"end $1\" >> {calls}\n")
    make.chmod(0o755)
    r = subprocess.run(["bash", str(root / "scripts" / "offline_box.sh"), "run", str(tmp_path / "j"), "abc1234",
                        "proof"], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = calls.read_text().splitlines()
    assert lines[-1].startswith("start test-gpu ") and lines[-1].endswith("PREBUILD=no ARGS=--lf")
    assert lines.index("end smoke") < len(lines) - 1                    # after smoke ended
    assert "test-gpu rc=1:" in r.stdout and "its failures again alone, rc=0:" in r.stdout and "rerun-tail" in r.stdout
    # the rerun failing too fails the step
    make.write_text(make.read_text().replace("echo rerun-tail; exit 0", "echo rerun-tail; exit 1"))
    r = subprocess.run(["bash", str(root / "scripts" / "offline_box.sh"), "run", str(tmp_path / "j2"), "abc1234",
                        "proof"], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 1 and "its failures again alone, rc=1:" in r.stdout
