"""Native helpers, compiled on first use against the torch in this environment.

`load()` returns the compiled module (see memlens_native.cpp) or None, with the
reason in `unavailable_reason()`: no C++ compiler, no Python headers, a build error. The
build is cached under $MEMLENS_CACHE (default ~/.cache/memlens), in a folder named by a key
of what it depends on (the sources, torch, Python, the compiler and its flags), so it runs
once per environment (`python -m memlens.core.native` builds it ahead). A build that fails
is cached the same way: its reason is written in that folder (build-failed.json, the
compiler's output in build.log) and later processes read it instead of compiling again
(a failed build costs as long as a good one); a new key (another torch, an edited source,
another compiler) is tried again, and so is the same one with $MEMLENS_NATIVE_RETRY=1 or
after the folder is deleted.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
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
PARTS = ("recorder.h", "saved_tracker.h", "grad_watch.h", "fast_calls.h", "call_tracker.h",
         "csv_rows.h", "module_attrs.h")
MODULE = "memlens_native"
BUILD_TIMEOUT_S = 300
DISABLE_ENV = "MEMLENS_NO_NATIVE"  # set to 1 to force the pure-Python precise mode
RETRY_ENV = "MEMLENS_NATIVE_RETRY"  # set to 1 to try a build that failed before once more
FAILED = "build-failed.json"  # beside the module, in the same key's folder
LOG = "build.log"

_lock = threading.Lock()
_module = None
_reason: str | None = None
_tried = False


def cache_dir() -> Path:
    root = os.environ.get("MEMLENS_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "memlens")
    return Path(root) / "native"


def _compiler() -> str | None:
    return os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")


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
    """Everything the build's outcome depends on, so a cached success or failure stands for
    exactly one of them: the sources, torch, Python (and whether its headers are there), the
    compiler (resolved, so an upgraded g++ behind `c++` is a new key) and the flags."""
    h = hashlib.sha256(SOURCE.read_bytes())
    for part in PARTS:
        h.update(SOURCE.with_name(part).read_bytes())
    cxx = _compiler()
    found = shutil.which(cxx) if cxx is not None else None
    if found is not None:
        cxx = os.path.realpath(found)
    headers = Path(sysconfig.get_paths()["include"], "Python.h").exists()
    h.update(f"{torch.__version__}|{sys.version}|{torch.__file__}|{cxx}|{headers}|"
             f"{' '.join(_flags(torch))}".encode())
    return h.hexdigest()[:16]


class BuildFailed(RuntimeError):
    """The build could not run or did not succeed: what is cached as a failure."""

    def __init__(self, reason: str, log: str = "") -> None:
        super().__init__(reason)
        self.log = log


def _compile(torch, out: Path) -> None:
    cxx = _compiler()
    if cxx is None:
        raise BuildFailed("no C++ compiler found (install g++ or set CXX)")
    py_include = sysconfig.get_paths()["include"]
    if not Path(py_include, "Python.h").exists():
        raise BuildFailed(f"no Python headers in {py_include} (install python3-dev)")
    from torch.utils.cpp_extension import include_paths, library_paths

    libs = library_paths()
    cmd = [cxx, *_flags(torch),
           *(f"-I{p}" for p in include_paths()), f"-I{py_include}",
           str(SOURCE), "-o", str(out),
           *(f"-L{p}" for p in libs), *(f"-Wl,-rpath,{p}" for p in libs),
           "-lc10", "-ltorch_cpu", "-ltorch_python"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise BuildFailed(f"build timed out after {BUILD_TIMEOUT_S} s",
                          _text(exc.stderr) + _text(exc.stdout)) from None
    except OSError as exc:  # CXX names something that cannot be run
        raise BuildFailed(f"could not run the compiler {cxx}: {exc}") from None
    if done.returncode != 0:
        log = (done.stderr or "") + (done.stdout or "")
        raise BuildFailed("build failed: " + _first_errors(log), " ".join(cmd) + "\n" + log)


def _text(out) -> str:
    return out.decode(errors="replace") if isinstance(out, bytes) else (out or "")


def _first_errors(log: str) -> str:
    """The compiler's first error lines (what to read first), else its output's last lines."""
    lines = [ln.strip() for ln in log.strip().splitlines() if ln.strip()]
    errors = [ln for ln in lines if re.search(r"\berror\b:|\bld: ", ln)][:3]
    return " / ".join(errors or lines[-5:]) or "the compiler exited with an error"


def _retry_hint(folder: Path) -> str:
    return (f"recorded in {folder}, not tried again for this torch, Python and compiler; "
            f"to retry: set {RETRY_ENV}=1, run `python -m memlens.core.native --retry`, "
            "or delete that folder")


def _record_failure(folder: Path, exc: BuildFailed, torch) -> bool:
    """Writes the failure beside where the build would be (best effort: a cache that cannot
    be written only means the next process tries again). Whether it was written."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if exc.log:
            (folder / LOG).write_text(exc.log)
        record = {"reason": str(exc), "torch": torch.__version__, "python": sys.version,
                  "compiler": _compiler(), "flags": _flags(torch)}
        tmp = folder / f".{FAILED}.{os.getpid()}"
        tmp.write_text(json.dumps(record, indent=1))
        os.replace(tmp, folder / FAILED)
    except OSError:
        return False
    return True


def _recorded_failure(folder: Path) -> str | None:
    """The reason of a failure recorded for this key, unless a retry is asked for."""
    if os.environ.get(RETRY_ENV):
        return None
    try:
        return str(json.loads((folder / FAILED).read_text())["reason"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


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
            folder = cache_dir() / _build_key(torch)
            target = folder / f"{MODULE}{suffix}"
            if not target.exists():
                failed = _recorded_failure(folder)
                if failed is not None:
                    _tried = True
                    _reason = f"{failed} ({_retry_hint(folder)})"
                    return None
            if not build and not target.exists():
                return None
            _tried = True
            if not target.exists():
                print("memlens: building the native helpers for this torch "
                      "(once per torch; half a minute to a few minutes)...",
                      file=sys.stderr, flush=True)
                folder.mkdir(parents=True, exist_ok=True)
                with tempfile.TemporaryDirectory(dir=folder) as tmp:
                    built = Path(tmp) / target.name
                    try:
                        _compile(torch, built)
                    except BuildFailed as exc:
                        _reason = str(exc)
                        if _record_failure(folder, exc, torch):
                            _reason += f" ({_retry_hint(folder)})"
                        return None
                    os.replace(built, target)  # atomic: a concurrent build wins or loses whole
                for stale in (FAILED, LOG):  # a retry that worked
                    (folder / stale).unlink(missing_ok=True)
            _module = _load_from(target)
        except Exception as exc:  # any failure means: precise mode uses the Python tracker
            _reason = str(exc) or type(exc).__name__
            _module = None
        return _module


def loaded():
    """The module where load() has loaded it already, else None: never builds, never waits
    (a writer's thread asks, while the training thread may be building it)."""
    return _module


def needs_build() -> bool:
    """Whether load() would compile first (no build for this source, torch and Python yet,
    no failed one recorded, nothing tried in this process, not turned off)."""
    if _tried or os.environ.get(DISABLE_ENV):
        return False
    try:
        import torch

        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        folder = cache_dir() / _build_key(torch)
        return not (folder / f"{MODULE}{suffix}").exists() and _recorded_failure(folder) is None
    except Exception:  # whatever fails here fails in load() too, and is reported there
        return False


def unavailable_reason() -> str | None:
    return _reason

