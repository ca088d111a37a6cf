import os
import stat
import sys

import pytest

from fp8lab.toolchain import tools


def _fake_tool(path, version="V13.9.1"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release 13.9, {version}'\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture(autouse=True)
def _clear_caches():
    tools.find_tool.cache_clear()
    tools.tool_version.cache_clear()
    yield
    tools.find_tool.cache_clear()
    tools.tool_version.cache_clear()


def test_found_in_nvidia_wheel_layout(tmp_path, monkeypatch):
    """A machine with no CUDA toolkit: the tool comes from site-packages/nvidia/cu13/bin."""
    site = tmp_path / "site"
    exe = _fake_tool(site / "nvidia" / "cu13" / "bin" / "cuobjdump")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    for var in ("CUDA_HOME", "CUDA_PATH", "FP8LAB_CUOBJDUMP"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(tools, "_candidates", _without_system(tools._candidates))
    monkeypatch.setattr(sys, "path", [str(site)])
    assert tools.find_tool("cuobjdump") == exe.resolve()
    assert tools.tool_version("cuobjdump") == "13.9.1"


def _without_system(gen):
    def wrapped(name):
        for p in gen(name):
            if not str(p).startswith("/usr/local/cuda"):
                yield p
    return wrapped


def test_env_override_wins(tmp_path, monkeypatch):
    exe = _fake_tool(tmp_path / "my" / "nvdisasm")
    monkeypatch.setenv("FP8LAB_NVDISASM", str(exe))
    assert tools.find_tool("nvdisasm") == exe.resolve()


def test_missing_tool_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    for var in ("CUDA_HOME", "CUDA_PATH", "FP8LAB_NCU"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(tools, "_candidates", _without_system(tools._candidates))
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    with pytest.raises(tools.ToolNotFound, match="Nsight Compute"):
        tools.find_tool("ncu")
    assert not tools.have_tool("ncu")
    assert tools.tool_version("ncu") == ""


def test_unknown_tool_is_refused():
    with pytest.raises(ValueError, match="unknown tool"):
        tools.find_tool("gcc")


def test_run_tool_reports_failure(tmp_path, monkeypatch):
    bad = tmp_path / "ptxas"
    bad.write_text("#!/bin/sh\necho 'ptxas fatal: bad input' >&2\nexit 3\n")
    bad.chmod(0o755)
    monkeypatch.setenv("FP8LAB_PTXAS", str(bad))
    with pytest.raises(RuntimeError, match="(?s)exit 3.*bad input"):
        tools.run_tool("ptxas", ["x.ptx"])
