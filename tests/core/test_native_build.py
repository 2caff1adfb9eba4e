"""The native build's cache: a failed build is recorded beside where the module would be,
under the same key, and the next process reads it instead of compiling again; a new key
(another compiler, an edited source) or a retry asked for is tried again. No real compiler
runs here: CXX is a script that counts its calls."""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
import sysconfig
from pathlib import Path
from types import SimpleNamespace

import pytest

import memlens.core.native as native
from memlens.core.native.__main__ import main as build_main

pytestmark = pytest.mark.skipif(
    not Path(sysconfig.get_paths()["include"], "Python.h").exists(),
    reason="no Python headers: the build stops before running a compiler")


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """A process that has tried nothing yet, with its own cache."""
    monkeypatch.setattr(native, "_tried", False)
    monkeypatch.setattr(native, "_module", None)
    monkeypatch.setattr(native, "_reason", None)
    monkeypatch.setenv("MEMLENS_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(native.DISABLE_ENV, raising=False)
    monkeypatch.setenv(native.RETRY_ENV, "")  # so main(["--retry"]) is undone too
    return tmp_path


def next_process(monkeypatch) -> None:
    """What a new process starts from: the cache on disk, nothing tried."""
    monkeypatch.setattr(native, "_tried", False)
    monkeypatch.setattr(native, "_module", None)
    monkeypatch.setattr(native, "_reason", None)


def fake_compiler(folder: Path, name: str = "cxx", ok: bool = False) -> Path:
    """A CXX that appends a line to <name>.calls each run: fails with a compiler-like error,
    or (ok) writes the -o file."""
    script = folder / name
    calls = folder / f"{name}.calls"
    body = ('out=""; prev=""; for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; '
            'done; : > "$out"; exit 0') if ok else (
            'echo "memlens_native.cpp:1:1: note: first"; '
            'echo "memlens_native.cpp:2:3: error: nope" >&2; exit 1')
    script.write_text(f'#!/bin/sh\necho x >> "{calls}"\n{body}\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def calls(folder: Path, name: str = "cxx") -> int:
    path = folder / f"{name}.calls"
    return len(path.read_text().splitlines()) if path.exists() else 0


def failure_records(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "cache" / "native").glob(f"*/{native.FAILED}"))


def test_a_failed_build_is_recorded_and_not_compiled_again(fresh, monkeypatch):
    monkeypatch.setenv("CXX", str(fake_compiler(fresh)))
    assert native.needs_build()
    assert native.load() is None
    assert calls(fresh) == 1
    reason = native.unavailable_reason()
    assert reason.startswith("build failed: memlens_native.cpp:2:3: error: nope")
    assert native.RETRY_ENV in reason and "--retry" in reason
    [record] = failure_records(fresh)
    assert json.loads(record.read_text())["reason"].endswith("error: nope")
    assert "error: nope" in (record.parent / native.LOG).read_text()
    assert not list(record.parent.glob(f"{native.MODULE}*"))  # nothing half built

    next_process(monkeypatch)
    assert not native.needs_build()  # so a precise run does not announce a build
    assert native.load(build=False) is None
    assert native.unavailable_reason() == reason
    next_process(monkeypatch)
    assert native.load() is None
    assert native.unavailable_reason() == reason
    assert calls(fresh) == 1


def test_a_retry_another_compiler_or_an_edited_source_is_tried_again(fresh, monkeypatch):
    monkeypatch.setenv("CXX", str(fake_compiler(fresh)))
    native.load()
    assert calls(fresh) == 1

    next_process(monkeypatch)
    monkeypatch.setenv(native.RETRY_ENV, "1")
    assert native.needs_build()
    assert native.load() is None
    assert calls(fresh) == 2
    monkeypatch.setenv(native.RETRY_ENV, "")

    next_process(monkeypatch)
    monkeypatch.setenv("CXX", str(fake_compiler(fresh, "other")))
    native.load()
    assert calls(fresh, "other") == 1 and calls(fresh) == 2

    source = fresh / "src"
    source.mkdir()
    for name in (native.SOURCE.name, *native.PARTS):
        shutil.copy(native.SOURCE.with_name(name), source / name)
    with (source / native.PARTS[0]).open("a") as f:
        f.write("\n// edited\n")
    next_process(monkeypatch)
    monkeypatch.setattr(native, "SOURCE", source / native.SOURCE.name)
    native.load()
    assert calls(fresh, "other") == 2
    assert len(failure_records(fresh)) == 3  # one per key


def test_set_up_retry_flag_and_a_retry_that_works_clears_the_record(fresh, monkeypatch):
    monkeypatch.setenv("CXX", str(fake_compiler(fresh)))
    assert build_main([]) == 1
    next_process(monkeypatch)
    assert build_main([]) == 1  # `python -m memlens.core.native` again: read, not rebuilt
    assert calls(fresh) == 1

    # Same key (the same compiler path), now working.
    fake_compiler(fresh, ok=True)
    monkeypatch.setattr(native, "_load_from", lambda path: SimpleNamespace(path=path))
    next_process(monkeypatch)
    assert build_main(["--retry"]) == 0
    assert calls(fresh) == 2
    assert failure_records(fresh) == []
    next_process(monkeypatch)
    monkeypatch.setenv(native.RETRY_ENV, "")
    assert native.load() is not None and not native.needs_build()
    assert calls(fresh) == 2


def test_no_compiler_is_recorded_and_a_compiler_found_later_is_tried(fresh, monkeypatch):
    found: list[str | None] = [None]
    monkeypatch.setattr(native, "_compiler", lambda: found[0])
    assert native.load() is None
    assert native.unavailable_reason().startswith("no C++ compiler found")
    assert len(failure_records(fresh)) == 1
    next_process(monkeypatch)
    assert native.load() is None and not native.needs_build()

    found[0] = str(fake_compiler(fresh))  # installed since: the compiler is part of the key
    next_process(monkeypatch)
    assert native.needs_build()
    native.load()
    assert calls(fresh) == 1


def test_a_build_that_times_out_is_recorded_too(fresh, monkeypatch):
    runs = []

    def timeout(cmd, **kwargs):
        runs.append(cmd)
        raise subprocess.TimeoutExpired(cmd, kwargs["timeout"], stderr=b"half way")

    monkeypatch.setenv("CXX", str(fake_compiler(fresh)))
    monkeypatch.setattr(native.subprocess, "run", timeout)
    assert native.load() is None
    assert native.unavailable_reason().startswith(
        f"build timed out after {native.BUILD_TIMEOUT_S} s")
    next_process(monkeypatch)
    assert native.load() is None and "timed out" in native.unavailable_reason()
    assert len(runs) == 1


@pytest.mark.parametrize(("version", "standard"), [
    ("2.3.1+cu121", "c++17"), ("2.11.0+cu128", "c++17"), ("2.12.0.dev20260401", "c++20"),
    ("2.13.0+cpu", "c++20"), ("2.14.1+cu130", "c++20"), ("3.0.0", "c++20"),
])
def test_the_standard_is_the_one_torch_builds_its_own_extensions_with(version, standard):
    assert native._cxx_standard(SimpleNamespace(__version__=version)) == standard
