"""tools/gpu_check.py's CPU side: it needs nothing beyond Python, torch, numpy and pytest.

The GPU machine it is written for has no Qt, no pytest plugins and no package index. Here
those packages are installed, so a sitecustomize makes them unimportable in the child, and
pytest's plugin autoload is off, as it will be there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "gpu_check.py"
# Everything pyproject installs beyond torch, numpy and pytest.
ABSENT = ("PySide6", "shiboken6", "pyqtgraph", "pytestqt", "pytest_timeout", "importlinter",
          "ruff", "torchviz", "graphviz", "graphviz_pure")
BLOCKER = f"""\
import importlib.abc, sys
ABSENT = {ABSENT!r}
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ABSENT:
            raise ModuleNotFoundError(f"No module named {{name!r}} (absent on the GPU machine)",
                                      name=name)
        return None
sys.meta_path.insert(0, Absent())
"""


@pytest.fixture
def bare_env(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCKER)
    env = {k: v for k, v in os.environ.items() if k not in ("OUT", "QT_QPA_PLATFORM")}
    env.update(PYTHONPATH=f"{site}{os.pathsep}{ROOT}", PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    return env


def run_check(env, *args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], env=env, cwd=cwd or ROOT,
                          capture_output=True, text=True, timeout=600)


def test_the_blocker_really_hides_qt(bare_env):
    done = subprocess.run([sys.executable, "-c", "import PySide6"], env=bare_env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "absent on the GPU machine" in done.stderr


def test_dry_run_imports_collects_and_summarises_without_qt_or_plugins(bare_env, tmp_path):
    out = tmp_path / "out"
    bare_env["OUT"] = str(out)  # the summary goes to $OUT when --out is not given
    done = run_check(bare_env, "--dry-run")
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((out / "gpu_check.json").read_text())
    checks = summary["checks"]
    assert summary["result"] == "passed" and summary["qt_modules_loaded"] == []
    assert {n: c["status"] for n, c in checks.items()
            if n not in ("watch", "watch_sync", "watch_amp", "fsdp")} == dict.fromkeys(
        ("pytest", "allocator", "snapshot", "amp"), "pass")
    # Every test of the two CUDA files is collected, counted here independently of pytest's
    # own output: test functions in the files, with test_cuda's 5-preset parametrisation.
    sources = [(ROOT / f).read_text() for f in ("tests/core/test_cuda.py",
                                                "tests/core/test_cuda_recorder.py")]
    expected = sum(s.count("\ndef test_") for s in sources) + 4
    assert checks["pytest"]["figures"]["collected"] == expected
    watch = any((ROOT / "memlens" / "core").glob("watch*"))
    assert checks["watch"]["status"] == checks["fsdp"]["status"] == (
        "pass" if watch else "skip")
    toggles = (ROOT / "memlens" / "core" / "watch" / "amp_override.py").exists()
    assert checks["watch_amp"]["status"] == ("pass" if toggles else "skip")
    deferred = (ROOT / "memlens" / "core" / "watch" / "device_reads.py").exists()
    assert checks["watch_sync"]["status"] == ("pass" if deferred else "skip")
    # the FSDP case's CPU side: a watched 1-rank FSDP2 job on gloo, its figures checked
    fsdp = checks["fsdp"]["figures"]
    assert (fsdp["sharding"], fsdp["steps_rows"], fsdp["device"]) == ("fsdp2", 3, "cpu")
    assert fsdp["params"] == [fsdp["expected_params"]] and fsdp["gathered_max"] > 0
    assert (out / "gpu_check.txt").read_text().startswith("gpu_check dry run: passed")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_without_cuda_it_fails_clearly(bare_env, tmp_path):
    done = run_check(bare_env, "--out", str(tmp_path))
    assert done.returncode == 1
    assert "no CUDA GPU" in done.stderr and "--dry-run" in done.stderr
    assert json.loads((tmp_path / "gpu_check.json").read_text())["result"] == "no CUDA GPU"


def test_arguments(bare_env, tmp_path):
    listed = run_check(bare_env, "--list")
    assert listed.returncode == 0
    assert [ln.split()[0] for ln in listed.stdout.splitlines()] == [
        "pytest", "allocator", "snapshot", "amp", "watch", "watch_sync", "watch_amp", "fsdp"]
    bad = run_check(bare_env, "--only", "nope", "--out", str(tmp_path))
    assert bad.returncode == 2 and "invalid choice" in bad.stderr
    assert not (tmp_path / "gpu_check.json").exists()
    one = run_check(bare_env, "--dry-run", "--only", "amp", "--out", str(tmp_path))
    assert one.returncode == 0
    assert list(json.loads((tmp_path / "gpu_check.json").read_text())["checks"]) == ["amp"]
