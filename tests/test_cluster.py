"""--cluster on CPU: a Dask cluster of two worker processes on this machine, each with one
GPU slot, a fake device key and its own git clone of a fixture checkout (as two hosts)."""

import json
import subprocess
import sys

import nbformat
import pytest
import yaml

from fp8lab.run import cli, notebooks, runner
from nb_fixture import make_notebook

distributed = pytest.importorskip("distributed")
from fp8lab.run import cluster  # noqa: E402  (needs distributed only when it runs a cluster)

HEAD = ("import os, time, pandas as pd\n"
        "from fp8lab import paths\nfrom fp8lab.report import provenance, results\n"
        "DEV = os.environ['FP8LAB_WORKER_DEVICE']\n")


def _nb(*cells: str):
    return make_notebook(*cells, params='mode = "auto"\nn = 3')


def _measure(name):
    """A stand-in GPU notebook: a table under its worker's device key, and a figure."""
    return _nb(HEAD + "t0 = time.time()\ntime.sleep(1.0)  # both workers get one\n"
               f"results.write_table(DEV, {name!r}, 't', pd.DataFrame({{'n': [n], 'end': [time.time()]}}),\n"
               "                    {'git': provenance.git_info(), 'device': DEV})\n"
               f"f = paths.figures_dir() / DEV / {name!r} / 'f.svg'\n"
               "f.parent.mkdir(parents=True, exist_ok=True)\nf.write_text('<svg/>')")


def _git(cwd, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd,
                   check=True, capture_output=True)


@pytest.fixture(scope="module")
def checkouts(tmp_path_factory):
    """A client checkout (a git repo with a fixture manifest) and two clones, one per worker."""
    base = tmp_path_factory.mktemp("cluster")
    client = base / "client"
    nbdir = client / "notebooks"
    nbdir.mkdir(parents=True)
    nbs = {
        "20_gpu_a": ("gpu", _measure("20_gpu_a")),
        "21_gpu_b": ("gpu", _measure("21_gpu_b")),
        # writes a table in its worker's checkout, then fails: nothing may reach the client
        "22_fail": ("host", _nb(HEAD + "results.write_table('cpu', '22_fail', 't', "
                                "pd.DataFrame({'x': [1]}), {'git': provenance.git_info()})\n"
                                "assert n == 4, 'n must be 4'")),
        # plots what 20 and 21 measured: both tables must be in its own worker's checkout
        "29_after": ("host", _nb(HEAD + "t0 = time.time()\n"
                                 "seen = {nb: results.devices_with(nb, 't') for nb in ('20_gpu_a', '21_gpu_b')}\n"
                                 "assert all(seen.values()), seen\n"
                                 "ends = [results.load_table(d, nb, 't')['end'].max() for nb, ds in seen.items() for d in ds]\n"
                                 "results.write_table('cpu', '29_after', 'seen', pd.DataFrame("
                                 "{'start': [t0], 'last_dep_end': [max(ends)], 'worker': [DEV]}), "
                                 "{'git': provenance.git_info()})")),
    }
    entries = []
    for name, (kind, nb) in nbs.items():
        nbformat.write(nb, nbdir / f"{name}.ipynb")
        entries.append({"id": name[:2], "name": name, "title": name, "kind": kind, "timeout": 120,
                        **({"after": "all"} if name == "29_after" else {})})
    (nbdir / "manifest.yaml").write_text(yaml.safe_dump({"notebooks": entries}))
    (client / ".gitignore").write_text("data/\nfigures/\n")
    _git(client, "init", "-q")
    _git(client, "add", ".")
    _git(client, "commit", "-q", "-m", "fixture")
    workers = []
    for w in ("wa", "wb"):
        _git(base, "clone", "-q", str(client), w)
        workers.append(base / w)
    return client, workers


@pytest.fixture(scope="module")
def dask_cluster(checkouts):
    _, workers = checkouts
    # CUDA_VISIBLE_DEVICES="": a real GPU (the lead's box) stays out of it; the slots are fake
    envs = [{"FP8LAB_ROOT": str(w), "FP8LAB_DATA_DIR": str(w / "data"), "CUDA_VISIBLE_DEVICES": "",
             "FP8LAB_FIGURES_DIR": str(w / "figures"), "FP8LAB_WORKER_DEVICE": key}
            for w, key in zip(workers, ("fake-a", "fake-b"))]
    # two threads each: a host notebook may run beside the GPU notebook of its worker
    c = cluster.local_cluster(2, gpu_ids=[], worker_env=envs, threads=2)
    yield c
    c.close()


@pytest.fixture
def at_client(checkouts, monkeypatch):
    client, _ = checkouts
    monkeypatch.setenv("FP8LAB_ROOT", str(client))
    monkeypatch.setenv("FP8LAB_DATA_DIR", str(client / "data"))
    monkeypatch.setenv("FP8LAB_FIGURES_DIR", str(client / "figures"))
    monkeypatch.delenv("FP8LAB_MODE", raising=False)
    return client


def test_notebooks_run_on_the_workers_and_results_come_back(checkouts, dask_cluster, at_client,
                                                            tmp_path, capsys):
    from fp8lab.report import results
    client, (wa, wb) = checkouts
    lines = []
    rc = runner.run(manifest=client / "notebooks" / "manifest.yaml", run_dir=tmp_path / "run",
                    progress=False, echo=lines.append, cluster=dask_cluster.scheduler_address)
    text = "\n".join(lines) + capsys.readouterr().out     # a line per notebook, as it ends
    assert rc == 1, text                                   # 22_fail failed, the others passed
    rows = {o["name"]: o for o in json.loads((tmp_path / "run" / "run.json").read_text())["notebooks"]}
    assert list(rows) == ["20_gpu_a", "21_gpu_b", "22_fail", "29_after"]
    assert [n for n, o in rows.items() if not o["ok"]] == ["22_fail"], text
    assert "n must be 4" in rows["22_fail"]["error"]
    # the two GPU notebooks ran at once, one on each worker, keyed by that worker's device
    dev = {n: rows[n]["device"] for n in ("20_gpu_a", "21_gpu_b")}
    assert sorted(dev.values()) == ["fake-a", "fake-b"], rows
    for name, d in dev.items():
        df = results.load_table(d, name, "t")                # sha256 checked by the loader
        assert df["n"].tolist() == [3]
        assert (client / "figures" / d / name / "f.svg").read_text() == "<svg/>"
        assert f"ok    {name} on {d} (" in text and ", replot)" in text
        assert (tmp_path / "run" / f"{d}-{rows[name]['worker']}" / f"{name}.ipynb").is_file()
    # the failing notebook wrote a table on its worker, and nothing on the client
    assert (wa / "data" / "cpu" / "22_fail" / "t.csv").is_file() or \
        (wb / "data" / "cpu" / "22_fail" / "t.csv").is_file()
    assert not (client / "data" / "cpu" / "22_fail").exists()
    assert (tmp_path / "run" / f"{rows['22_fail']['device']}-{rows['22_fail']['worker']}"
            / "22_fail.log").is_file()                    # its log came back to the run folder
    # 29 started after both measurements ended, and found both in its own checkout
    seen = results.load_table("cpu", "29_after", "seen")
    assert float(seen["start"][0]) >= float(seen["last_dep_end"][0])
    assert "ok    29_after on fake-" in text and "host)" in text   # a host notebook runs for real
    assert "3 passed, 1 failed" in text


def test_a_worker_at_another_commit_is_refused(checkouts, dask_cluster, at_client, tmp_path):
    client, _ = checkouts
    before = sorted(p for p in (client / "data").rglob("*")) if (client / "data").exists() else []
    _git(client, "commit", "-q", "--allow-empty", "-m", "client moves on")
    try:
        lines = []
        rc = runner.run(only=["20"], manifest=client / "notebooks" / "manifest.yaml",
                        run_dir=tmp_path / "r", progress=False, echo=lines.append,
                        cluster=dask_cluster.scheduler_address)
    finally:
        _git(client, "reset", "-q", "--hard", "HEAD~1")
    text = "\n".join(lines)
    assert rc == 1
    assert "is at commit" in text and "check out the client's commit" in text
    after = sorted(p for p in (client / "data").rglob("*")) if (client / "data").exists() else []
    assert after == before
    row = json.loads((tmp_path / "r" / "run.json").read_text())["notebooks"][0]
    assert not row["ok"] and row["device"] in ("fake-a", "fake-b")


def test_returned_files_are_checked(no_gpu):
    import hashlib
    csv = b"n\n3\n"
    meta = {"table": {"sha256": hashlib.sha256(csv).hexdigest()}, "git": {"commit": "abc"}}
    good = [("data/h200/07_x/t.csv", csv), ("data/h200/07_x/t.meta.json", json.dumps(meta).encode()),
            ("figures/h200/07_x/f.svg", b"<svg/>")]
    assert cluster.check_returned("07_x", good, "abc") == []
    assert "another commit" not in " ".join(cluster.check_returned("07_x", good, "abc"))
    assert any("written at commit abc" in p for p in cluster.check_returned("07_x", good, "def"))
    bad_sha = [("data/h200/07_x/t.csv", b"n\n4\n")] + good[1:]
    assert any("sha256" in p for p in cluster.check_returned("07_x", bad_sha, "abc"))
    for rel in ("data/h200/08_y/t.csv", "data/../x/07_x/t.csv", "/etc/07_x/a/b", "runs/h200/07_x/a"):
        assert cluster.check_returned("07_x", [(rel, b"")], "abc"), rel
    # a sidecar that cannot vouch for its CSV, a CSV without its sidecar
    for side in (b"{}", b'{"table": {"rows": 1}}', b"[]"):
        got = cluster.check_returned("07_x", [good[0], ("data/h200/07_x/t.meta.json", side)], "abc")
        assert any("t.meta.json" in p for p in got), side
    got = cluster.check_returned("07_x", [good[0], good[2]], "abc")
    assert got == ["data/h200/07_x/t.csv: returned without its sidecar"]


def test_cluster_arguments(no_gpu, monkeypatch, capsys):
    assert cluster.parse_target("local") == ("local", None)
    assert cluster.parse_target("local:3") == ("local", 3)
    assert cluster.parse_target("tcp://10.0.0.1:8786") == ("address", "tcp://10.0.0.1:8786")
    assert cluster.parse_target("sched:8786") == ("address", "sched:8786")
    for bad in ("local:0", "", "nowhere", "local:x"):
        with pytest.raises(notebooks.UsageError, match="--cluster"):
            cluster.parse_target(bad)
    with pytest.raises(notebooks.UsageError, match="exclude each other"):
        runner.run(gpus="0", cluster="local", progress=False, echo=lambda s: None)
    assert cli.main(["run", "--cluster", "nowhere", "--no-progress"]) == 2
    assert "scheduler address" in capsys.readouterr().err
    with monkeypatch.context() as m:
        m.setitem(sys.modules, "distributed", None)          # dask not installed
        with pytest.raises(notebooks.UsageError, match=r"pip install 'fp8lab\[cluster\]'"):
            cluster.local_cluster(1)
    monkeypatch.setattr("fp8lab.report.provenance.gpu_count", lambda: 2)
    with pytest.raises(notebooks.UsageError, match="NVML sees 2 GPU"):
        cluster.local_cluster(3)


# ------------------------------------------------------------------ addresses that are not Dask
@pytest.fixture
def fake_server():
    """A TCP port on this machine that accepts and then says ``reply`` (or nothing)."""
    import socket
    import threading
    servers = []

    def start(reply: bytes | None):
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(4)
        held = []

        def serve():
            while True:
                try:
                    conn, _ = srv.accept()
                except OSError:
                    return
                held.append(conn)                       # never closed while the test runs
                if reply is not None:
                    conn.sendall(reply)
        threading.Thread(target=serve, daemon=True).start()
        servers.append((srv, held))
        return f"tcp://127.0.0.1:{srv.getsockname()[1]}"
    yield start
    for srv, held in servers:
        srv.close()
        for c in held:
            c.close()


@pytest.mark.parametrize("reply,msg", [
    (None, "accepted the connection but sent no Dask handshake within 1 s"),
    (b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n", "answered, but not as a Dask scheduler"),
    (b"\x10\x00\x00\x00\x00\x00\x00\x00" + b"0123456789abcdef", "answered, but not with a Dask handshake"),
])
def test_an_address_that_is_not_dask_is_one_line_and_exit_2(checkouts, at_client, fake_server,
                                                             monkeypatch, capsys, tmp_path,
                                                             reply, msg):
    import time
    client, _ = checkouts
    monkeypatch.setattr(notebooks, "manifest_path", lambda: client / "notebooks" / "manifest.yaml")
    addr = fake_server(reply)
    t0 = time.monotonic()
    rc = cli.main(["run", "--only", "22", "--cluster", addr, "--connect-timeout", "1",
                   "--no-progress", "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert rc == 2 and time.monotonic() - t0 < 20
    assert msg in err and len(err.strip().splitlines()) == 1, err


def test_probe_accepts_a_scheduler_and_names_a_closed_port(dask_cluster):
    import socket
    cluster.probe_scheduler(dask_cluster.scheduler_address, 5.0)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()                                             # nothing listens there now
    with pytest.raises(notebooks.UsageError, match=f"cannot reach tcp://127.0.0.1:{port}"):
        cluster.probe_scheduler(f"tcp://127.0.0.1:{port}", 1.0)
    with pytest.raises(notebooks.UsageError, match="connect-timeout must be > 0"):
        runner.run(cluster=dask_cluster.scheduler_address, connect_timeout=0, progress=False,
                   echo=lambda s: None)
