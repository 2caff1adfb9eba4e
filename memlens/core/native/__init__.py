"""Native helpers, compiled on first use against the torch in this environment.

`load()` returns the compiled module (see memlens_native.cpp) or None, with the
reason in `unavailable_reason()`: no C++ compiler, no Python headers, a build error. The
build is cached per source, torch and Python version under $MEMLENS_CACHE (default
~/.cache/memlens), so it runs once per environment (`python -m core.native` builds it ahead).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
from pathlib import Path

SOURCE = Path(__file__).with_name("memlens_native.cpp")
# The parts SOURCE includes (one translation unit): a change to any of them is a new build.
PARTS = ("recorder.h", "saved_tracker.h", "grad_watch.h", "fast_calls.h", "call_tracker.h")
MODULE = "memlens_native"
BUILD_TIMEOUT_S = 300
DISABLE_ENV = "MEMLENS_NO_NATIVE"  # set to 1 to force the pure-Python precise mode

_lock = threading.Lock()
_module = None
_reason: str | None = None
_tried = False


def cache_dir() -> Path:
    root = os.environ.get("MEMLENS_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "memlens")
    return Path(root) / "native"


def _cxx_standard(torch) -> str:
    """The C++ standard torch's own cpp_extension builds extensions with: C++20 from 2.12
    (2.14's headers need it: `requires` clauses in ATen/core/TensorBase.h, which C++17
    reads as `at::symint::sizes<T>: expected primary-expression`), C++17 before (2.11's
    cpp_extension; older headers were never meant for C++20)."""
    m = re.match(r"(\d+)\.(\d+)", torch.__version__)
    return "c++20" if m is None or (int(m[1]), int(m[2])) >= (2, 12) else "c++17"


def _flags(torch) -> list[str]:
    return ["-O3", "-shared", "-fPIC", f"-std={_cxx_standard(torch)}", "-fvisibility=hidden",
            f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"]


def _build_key(torch) -> str:
    h = hashlib.sha256(SOURCE.read_bytes())
    for part in PARTS:
        h.update(SOURCE.with_name(part).read_bytes())
    h.update(f"{torch.__version__}|{sys.version}|{torch.__file__}|"
             f"{' '.join(_flags(torch))}".encode())
    return h.hexdigest()[:16]


def _compile(torch, out: Path) -> None:
    from torch.utils.cpp_extension import include_paths, library_paths

    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        raise RuntimeError("no C++ compiler found (install g++ or set CXX)")
    py_include = sysconfig.get_paths()["include"]
    if not Path(py_include, "Python.h").exists():
        raise RuntimeError(f"no Python headers in {py_include} (install python3-dev)")
    libs = library_paths()
    cmd = [cxx, *_flags(torch),
           *(f"-I{p}" for p in include_paths()), f"-I{py_include}",
           str(SOURCE), "-o", str(out),
           *(f"-L{p}" for p in libs), *(f"-Wl,-rpath,{p}" for p in libs),
           "-lc10", "-ltorch_cpu", "-ltorch_python"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise RuntimeError("build failed: " + " / ".join(tail))


def _load_from(path: Path):
    spec = importlib.util.spec_from_file_location(MODULE, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load(build: bool = True):
    """The compiled module, building it the first time; None where it cannot be. With
    build=False only an existing build is loaded (light mode's helpers never wait for a
    compiler; the set-up and the first precise run build it)."""
    global _module, _reason, _tried
    with _lock:
        if _tried:
            return _module
        if os.environ.get(DISABLE_ENV):
            _tried = True
            _reason = f"turned off by ${DISABLE_ENV}"
            return None
        try:
            import torch

            suffix = sysconfig.get_config_var("EXT_SUFFIX")
            target = cache_dir() / _build_key(torch) / f"{MODULE}{suffix}"
            if not build and not target.exists():
                return None
            _tried = True
            if not target.exists():
                print("memlens: building the native helpers for this torch "
                      "(once, under a minute)...",
                      file=sys.stderr, flush=True)
                target.parent.mkdir(parents=True, exist_ok=True)
                with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
                    built = Path(tmp) / target.name
                    _compile(torch, built)
                    os.replace(built, target)  # atomic: a concurrent build wins or loses whole
            _module = _load_from(target)
        except Exception as exc:  # any failure means: precise mode uses the Python tracker
            _reason = str(exc) or type(exc).__name__
            _module = None
        return _module


def needs_build() -> bool:
    """Whether load() would compile first (no build for this source, torch and Python yet,
    nothing tried in this process, not turned off)."""
    if _tried or os.environ.get(DISABLE_ENV):
        return False
    try:
        import torch

        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        return not (cache_dir() / _build_key(torch) / f"{MODULE}{suffix}").exists()
    except Exception:  # whatever fails here fails in load() too, and is reported there
        return False


def unavailable_reason() -> str | None:
    return _reason

