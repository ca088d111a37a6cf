"""Source hash and ``python -m fp8lab verify``, in a throwaway git checkout.

The checkout is a small repo with fp8lab/ and notebooks/ folders; FP8LAB_ROOT points at it
(so git_info, the source hash and verify read it) and FP8LAB_DATA_DIR at its data/. Each
test produces one kind of problem the way it happens for real (a dirty tree, an edited CSV,
an env var naming the wrong commit) and checks that verify names it.
"""

import io
import json
import shutil
import subprocess
import tarfile
import time

import pandas as pd
import pytest

from fp8lab.run import cli
from fp8lab import paths
from fp8lab.report import provenance, results, verify


def _git(cwd, *args) -> str:
    r = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t",
                        "-c", "commit.gpgsign=false", *args], cwd=cwd, check=True,
                       capture_output=True, text=True)
    return r.stdout.strip()


def _export(repo, commit, dest):
    """`git archive` of a commit: a copy of the tree without .git, as GPU boxes get it."""
    raw = subprocess.run(["git", "archive", "--format=tar", commit], cwd=repo, check=True,
                         capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        tar.extractall(dest)
    return dest


@pytest.fixture
def repo(tmp_path, monkeypatch):
    root = tmp_path / "repo"
    (root / "fp8lab" / "kernels").mkdir(parents=True)
    (root / "notebooks").mkdir()
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (root / ".gitignore").write_text("__pycache__/\n.ipynb_checkpoints/\nbuild/\ndata/\n")
    (root / "fp8lab" / "__init__.py").write_text("X = 1\n")
    (root / "fp8lab" / "kernels" / "k.cu").write_text("__global__ void k() {}\n")
    (root / "fp8lab" / "kernels" / "k.h").write_text("#pragma once\n")
    (root / "fp8lab" / "README.md").write_text("not a source by the rule\n")
    (root / "notebooks" / "01_x.py").write_text("# %%\nprint(1)\n")
    (root / "notebooks" / "01_x.ipynb").write_text('{"cells": []}\n')
    (root / "notebooks" / "manifest.yaml").write_text("- id: '01'\n")
    _git(root, "init", "-q")
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "first")
    monkeypatch.setenv("FP8LAB_ROOT", str(root))
    monkeypatch.setenv("FP8LAB_DATA_DIR", str(root / "data"))
    monkeypatch.delenv("FP8LAB_GIT_COMMIT", raising=False)
    monkeypatch.delenv("FP8LAB_GIT_DIRTY", raising=False)
    provenance._source_hash_cached.cache_clear()
    yield root
    provenance._source_hash_cached.cache_clear()


def _write(name="t", notebook="01_x"):
    provenance._source_hash_cached.cache_clear()    # each test changes the tree it hashes
    return results.start_run(notebook, device="cpu").write_table(
        name, pd.DataFrame({"M": [1, 2], "us": [1.5, 2.5]}))


def _edit_meta(csv_path, fn):
    p = csv_path.with_name(csv_path.name[:-len(".csv")] + ".meta.json")
    meta = json.loads(p.read_text())
    fn(meta)
    p.write_text(json.dumps(meta))


def _verify(capsys, *args):
    rc = cli.main(["verify", *args])
    out = capsys.readouterr()
    return rc, out.out.splitlines(), out.err


def _kinds(report):
    return sorted((p.table, p.kind) for p in report.problems)


# ---------------------------------------------------------------- the source hash

def test_worktree_copy_and_commit_agree_on_a_clean_tree(repo, tmp_path):
    # junk a run leaves behind (ignored by git, skipped by the rule) must not count
    (repo / "fp8lab" / "__pycache__").mkdir()
    (repo / "fp8lab" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0junk")
    (repo / "notebooks" / ".ipynb_checkpoints").mkdir()
    (repo / "notebooks" / ".ipynb_checkpoints" / "01_x-checkpoint.ipynb").write_text("{}")
    (repo / "fp8lab" / "kernels" / "build").mkdir()
    (repo / "fp8lab" / "kernels" / "build" / "k.json").write_text("{}")
    tree = provenance.git_worktree_sources(repo)
    copy = _export(repo, "HEAD", tmp_path / "copy")
    shutil.copytree(repo / "fp8lab" / "__pycache__", copy / "fp8lab" / "__pycache__")
    walked = provenance.walk_sources(copy)
    commit = provenance.commit_sources("HEAD", repo)
    assert tree["method"] == "git working tree" and walked["method"] == "walk"
    assert tree["sha256"] == walked["sha256"] == commit["sha256"]
    assert tree["files"] == walked["files"] == commit["files"] == 6   # README.md is not a source
    assert provenance.compute_source_hash(copy)["method"] == "walk"  # no .git: walks


def test_hash_is_the_documented_sha256sum_listing(repo):
    # computed independently of provenance.py: sha256sum of each file, then of the listing
    if not shutil.which("sha256sum"):
        pytest.skip("no sha256sum")
    files = sorted(str(p.relative_to(repo)) for p in repo.rglob("*")
                   if p.is_file() and provenance.is_source(p.relative_to(repo).as_posix()))
    listing = subprocess.run(["sha256sum", *files], cwd=repo, check=True,
                             capture_output=True).stdout
    want = subprocess.run(["sha256sum"], input=listing, check=True,
                          capture_output=True).stdout.split()[0].decode()
    assert provenance.git_worktree_sources(repo)["sha256"] == want


def test_the_real_checkout_hashes_alike_from_git_and_from_a_copy(tmp_path):
    # the fp8lab repo itself: its tracked file set under the rule, walked from `git archive`
    root = paths.repo_root()
    if subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"],
                      capture_output=True).returncode != 0:
        pytest.skip("not a git checkout")
    copy = _export(root, "HEAD", tmp_path / "copy")
    assert provenance.walk_sources(copy)["sha256"] == provenance.commit_sources("HEAD", root)["sha256"]


def test_dirty_and_untracked_sources_change_the_hash(repo):
    clean = provenance.git_worktree_sources(repo)["sha256"]
    (repo / "notebooks" / "01_x.py").write_text("# %%\nprint(2)\n")
    edited = provenance.git_worktree_sources(repo)["sha256"]
    assert edited != clean
    (repo / "fp8lab" / "new.py").write_text("Y = 2\n")     # untracked, not ignored: can run
    assert provenance.git_worktree_sources(repo)["sha256"] not in (clean, edited)
    (repo / "fp8lab" / "__pycache__").mkdir()
    before = provenance.git_worktree_sources(repo)["sha256"]
    (repo / "fp8lab" / "__pycache__" / "new.py").write_text("ignored")
    assert provenance.git_worktree_sources(repo)["sha256"] == before


def test_source_hash_is_computed_once_per_process_and_fast(monkeypatch):
    provenance._source_hash_cached.cache_clear()
    t0 = time.perf_counter()
    first = provenance.source_hash()
    assert time.perf_counter() - t0 < 1.0
    assert first["sha256"] and first["files"] > 50
    calls = []
    monkeypatch.setattr(provenance, "compute_source_hash", lambda root=None: calls.append(1))
    assert provenance.source_hash() == first and calls == []
    provenance._source_hash_cached.cache_clear()


def test_every_sidecar_records_the_source_hash(repo):
    meta = results.load_table("cpu", "01_x", _write().stem).attrs["meta"]
    assert meta["sources"]["sha256"] == provenance.commit_sources("HEAD", repo)["sha256"]
    assert meta["sources"]["files"] == 6 and meta["sources"]["rule"] == provenance.SOURCE_RULE
    assert {"commit", "dirty", "untracked"} <= set(meta["git"])      # kept as before


# ---------------------------------------------------------------- verify

def test_clean_tables_pass(repo, capsys):
    _write("a")
    _write("b", notebook="02_y")
    rc, out, err = _verify(capsys)
    assert (rc, out, err) == (0, ["2 tables checked, 0 problems"], "")


def test_dirty_tree_is_reported_twice_over(repo, capsys):
    (repo / "fp8lab" / "__init__.py").write_text("X = 2\n")   # tracked source edited
    _write()
    report = verify.verify()
    assert _kinds(report) == [("t.csv", verify.DIRTY), ("t.csv", verify.SOURCES_DIFFER)]
    rc, out, _ = _verify(capsys)
    assert rc == 1 and out[-1].startswith("1 table checked, 2 problems")


def test_untracked_source_is_caught_by_the_hash(repo):
    (repo / "fp8lab" / "extra.py").write_text("Y = 1\n")
    _write()
    assert _kinds(verify.verify()) == [("t.csv", verify.SOURCES_DIFFER)]


def test_copy_without_git_checked_against_the_commit_it_names(repo, tmp_path, monkeypatch):
    first = _git(repo, "rev-parse", "HEAD")
    (repo / "fp8lab" / "__init__.py").write_text("X = 2\n")
    _git(repo, "commit", "-q", "-am", "second")
    second = _git(repo, "rev-parse", "HEAD")
    copy = _export(repo, second, tmp_path / "copy")              # a GPU box's copy
    monkeypatch.setenv("FP8LAB_ROOT", str(copy))
    monkeypatch.setenv("FP8LAB_GIT_COMMIT", second)
    _write("right")
    monkeypatch.setenv("FP8LAB_GIT_COMMIT", first)               # the env var lies
    _write("wrong")
    monkeypatch.setenv("FP8LAB_GIT_COMMIT", "0123456789abcdef0123")  # names no commit here
    _write("unknown")
    monkeypatch.setenv("FP8LAB_ROOT", str(repo))                 # verified where git is
    report = verify.verify()
    assert _kinds(report) == [("unknown.csv", verify.UNKNOWN_COMMIT),
                              ("wrong.csv", verify.SOURCES_DIFFER)]
    detail = {p.table: p.detail for p in report.problems}
    assert "0123456789abcdef0123" in detail["unknown.csv"] and "FP8LAB_GIT_COMMIT" in detail["unknown.csv"]
    assert first[:10] in detail["wrong.csv"]


def test_a_commit_only_another_branch_holds_is_named(repo):
    # measured on a branch that was then rebased: main's clean clone lacks the commit
    # (CI at be49c84), although this repository, with the branch, still has it
    main = _git(repo, "rev-parse", "--abbrev-ref", "HEAD")
    _git(repo, "checkout", "-q", "-b", "side")
    (repo / "fp8lab" / "__init__.py").write_text("X = 3\n")
    _git(repo, "commit", "-q", "-am", "measured on a side branch")
    side = _git(repo, "rev-parse", "HEAD")
    _write("side")
    _git(repo, "checkout", "-q", main)
    report = verify.verify()
    assert _kinds(report) == [("side.csv", verify.NOT_IN_HISTORY)]
    assert report.problems[0].detail == side[:10]
    _git(repo, "merge", "-q", "-s", "ours", "--no-edit", "side")    # the fix: into history
    assert verify.verify().problems == []


def test_each_sidecar_problem_is_named(repo, capsys):
    for name in ("ok", "nohash", "nocommit", "badcommit", "edited", "broken", "list",
                 "nosha", "rule", "orphan", "bare"):
        _write(name)
    data = repo / "data" / "cpu" / "01_x"
    _edit_meta(data / "nohash.csv", lambda m: m.pop("sources"))
    _edit_meta(data / "nocommit.csv", lambda m: m["git"].update(commit=None))
    _edit_meta(data / "badcommit.csv", lambda m: m["git"].update(commit="--not a commit"))
    _edit_meta(data / "nosha.csv", lambda m: m["table"].pop("sha256"))
    _edit_meta(data / "rule.csv", lambda m: m["sources"].update(rule="v0: something else"))
    (data / "edited.csv").write_text((data / "edited.csv").read_text().replace("1.5", "1.25"))
    (data / "broken.meta.json").write_text("{ not json")
    (data / "list.meta.json").write_text("[]")
    (data / "orphan.csv").unlink()
    (data / "bare.meta.json").unlink()
    report = verify.verify()
    assert _kinds(report) == [
        ("badcommit.csv", verify.UNKNOWN_COMMIT),
        ("bare.csv", verify.NO_SIDECAR),
        ("broken.csv", verify.BAD_SIDECAR),
        ("edited.csv", verify.CSV_MISMATCH),
        ("list.csv", verify.BAD_SIDECAR),
        ("nocommit.csv", verify.NO_COMMIT),
        ("nohash.csv", verify.NO_SOURCE_HASH),
        ("nosha.csv", verify.BAD_SIDECAR),
        ("orphan.meta.json", verify.NO_TABLE),
        ("rule.csv", verify.OTHER_RULE),
    ]
    rc, out, _ = _verify(capsys)
    assert rc == 1 and out[-1].startswith("11 tables checked, 10 problems")
    # grouped: one line per kind, naming the files where a reader must look
    assert "data/cpu/01_x: sidecar unreadable or malformed: 3 of 11 tables " \
           "(broken.csv, list.csv, nosha.csv)" in out
    assert "data/cpu/01_x: CSV sha256 differs from its sidecar: 1 of 11 tables (edited.csv)" in out
    assert len(out) == 9       # 8 kinds + the summary
    rc, out, _ = _verify(capsys, "-v")
    assert rc == 1 and len(out) == 11
    assert any(line.startswith("data/cpu/01_x/broken.csv: sidecar unreadable or malformed: "
                               "broken.meta.json") for line in out)


def test_legacy_tables_without_hash_group_by_folder(repo, capsys):
    for name in ("a", "b", "c"):
        _edit_meta(_write(name), lambda m: m.pop("sources"))
    _write("d", notebook="02_y")
    rc, out, _ = _verify(capsys)
    assert rc == 1
    assert out == ["data/cpu/01_x: no source hash: all 3 tables",
                   "4 tables checked, 3 problems (-v lists every table)"]


def test_filters(repo, capsys):
    _write("a")
    _edit_meta(_write("b", notebook="02_y"), lambda m: m.pop("sources"))
    assert _verify(capsys, "--notebook", "01_x")[:2] == (0, ["1 table checked, 0 problems"])
    assert _verify(capsys, "--notebook", "01", "--device", "cpu")[0] == 0   # id works too
    rc, out, _ = _verify(capsys, "--notebook", "02")
    assert rc == 1 and out[-1].startswith("1 table checked, 1 problem")


@pytest.mark.parametrize("args, msg", [
    (["--device", "l4"], "unknown device 'l4'"),
    (["--notebook", "99"], "no notebook '99'"),
])
def test_bad_arguments_exit_2_with_one_line(repo, capsys, args, msg):
    _write()
    rc, out, err = _verify(capsys, *args)
    assert rc == 2 and out == [] and len(err.splitlines()) == 1 and msg in err


def test_not_a_git_checkout_exits_2(repo, tmp_path, capsys, monkeypatch):
    _write()
    copy = _export(repo, "HEAD", tmp_path / "copy")
    monkeypatch.setenv("FP8LAB_ROOT", str(copy))
    rc, out, err = _verify(capsys)
    assert rc == 2 and out == [] and "not a git checkout" in err and len(err.splitlines()) == 1


def test_verify_reads_only_from_git_not_the_worktree(repo):
    # the commit's hash comes from git's objects: editing the working tree after the run
    # must not make a clean table look bad (or a bad one look clean)
    _write()
    (repo / "fp8lab" / "__init__.py").write_text("X = 3\n")
    assert verify.verify().problems == []


def test_a_commit_whose_tree_git_cannot_read_is_reported(repo, monkeypatch):
    # a partial or shallow clone can have the commit without its files
    _write()

    def unreadable(commit, root=None):
        raise ValueError(f"git cat-file answered b'x missing' for a blob of {commit}")
    monkeypatch.setattr(provenance, "commit_sources", unreadable)
    assert _kinds(verify.verify()) == [("t.csv", verify.TREE_UNREADABLE)]
