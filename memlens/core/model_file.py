"""A user's model file as a preset: finding it, reading its CONFIG, loading it, its errors.

A model file is Python source with module-level functions (docs/model-files.md). Reading
its CONFIG parses the source and runs nothing, so the app may do it on the GUI thread;
load_model_file() runs the file, and is called only where the model is built (the worker
thread, or the CLI's own thread). Every failure is a ModelFileError: a ConfigError, so the
CLI exits 2 and the app shows the message, naming file:line where there is one.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import os
import runpy
import sys
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memlens.core.excerpt import error_message, excerpt
from memlens.core.options import OPTIONS, PRESETS, RUN_OPTIONS, ConfigError, is_model_file
from memlens.core.safe_read import MAX_SOURCE, FileReadError, read_text, what_is

CONTRACT = ("a model file defines build_model() -> torch.nn.Module and "
            "make_batch(step, split) -> (inputs, targets); optionally loss_fn(output, targets), "
            "init_state(batch_size) and CONFIG = {...} (see docs/model-files.md)")
REQUIRED = ("build_model", "make_batch")
OPTIONAL = ("loss_fn", "init_state")


class ModelFileError(ConfigError):
    """A model file that is missing, unreadable or does not follow the contract."""


def resolve_preset(preset: str, base_dir: str | Path | None = None) -> str:
    """The preset as a run uses it: a built-in's name, or a model file's absolute path,
    checked to exist and to be a .py file. Relative paths are taken from `base_dir` (a
    config file's folder) or the current folder. Every command resolves presets here."""
    if not is_model_file(preset):
        return OPTIONS["preset"].parse(preset)
    try:
        path = Path(preset).expanduser()
        if not path.is_absolute():
            path = Path(base_dir or ".") / path
        path = path.resolve()
    except (RuntimeError, OSError) as exc:  # ~nouser/, a loop of links
        why = excerpt(exc).rstrip(".")
        raise ModelFileError(f"model file {excerpt(preset)}: {why}; give the path of a .py "
                             "file") from None
    if not os.path.lexists(path):
        raise ModelFileError(f"model file {str(path)!r} does not exist; give the path of a .py "
                             f"file, or one of the built-in presets: {', '.join(PRESETS)}")
    what = what_is(path)
    if what:  # a folder, a FIFO, a device: named as what it is
        raise ModelFileError(f"model file {str(path)!r} {what}, not a .py file")
    if path.suffix != ".py":
        raise ModelFileError(f"model file {str(path)!r} is not a Python file (.py); {CONTRACT}")
    return str(path)


def preset_label(preset: str) -> str:
    """A short name for folder names and titles: the built-in's name or the file's stem."""
    return Path(preset).stem if is_model_file(preset) else preset


# Model files are parsed and loaded one thread at a time. Python 3.11's AST construction is
# not safe from two threads at once ("SystemError: AST constructor recursion depth
# mismatch": a lesson's two arms build the same file together), and loading edits sys.path.
_SOURCE_LOCK = threading.RLock()


def _read_source(path: Path) -> str:
    try:
        return read_text(path, MAX_SOURCE, "a model file")
    except FileReadError as exc:
        raise ModelFileError(f"model file {exc}") from None


def _syntax_error(path: Path, exc: SyntaxError) -> ModelFileError:
    return ModelFileError(f"{path}:{exc.lineno}: syntax error: {exc.msg}; fix the file and "
                          "start again")


def _parse(path: Path) -> ast.Module:
    source = _read_source(path)
    try:
        with _SOURCE_LOCK:
            return ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise _syntax_error(path, exc) from None
    except (RecursionError, MemoryError, ValueError) as exc:  # nested past Python's limit
        raise ModelFileError(f"{path}: Python cannot parse it ({type(exc).__name__}: an "
                             "expression nested too deeply); simplify the file") from None


@dataclass(frozen=True)
class FileShape:
    """What a model file defines, read from its source without running it."""

    carries_state: bool  # it defines init_state(): the model carries state across batches
    batch_size_arg: bool  # make_batch takes batch_size: it follows the batch_size setting
    batch_size_default: int | None  # make_batch's default batch_size, where it is a literal


def read_file_shape(preset: str) -> FileShape:
    """The module-level functions a model file defines, as far as its source shows them."""
    tree = _parse(Path(preset))
    defs = {stmt.name: stmt for stmt in tree.body
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef)}
    assigned = {t.id for stmt in tree.body if isinstance(stmt, ast.Assign)
                for t in stmt.targets if isinstance(t, ast.Name)}
    make_batch = defs.get("make_batch")
    arg, default = False, None
    if make_batch is not None:
        args = make_batch.args
        params = [*args.posonlyargs, *args.args]
        defaults = dict(zip([a.arg for a in params][len(params) - len(args.defaults):],
                            args.defaults, strict=True))
        defaults.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults,
                                                   strict=True) if d is not None})
        arg = any(a.arg == "batch_size" for a in [*params, *args.kwonlyargs])
        node = defaults.get("batch_size")
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            default = node.value
    return FileShape("init_state" in defs or "init_state" in assigned, arg, default)


# CONFIG keys that describe the file, not a run: not run settings, never on the command line.
FILE_KEYS = ("batch_dim",)


def _literal_config(path: Path) -> tuple[str, dict[str, Any]]:
    """(file:line, the CONFIG dict) as written in the source; ("", {}) when there is none."""
    tree = _parse(path)
    node = None
    for stmt in tree.body:
        targets = (stmt.targets if isinstance(stmt, ast.Assign)
                   else [stmt.target] if isinstance(stmt, ast.AnnAssign) and stmt.value
                   else [])
        if any(isinstance(t, ast.Name) and t.id == "CONFIG" for t in targets):
            node = stmt
    if node is None:
        return "", {}
    where = f"{path}:{node.lineno}"
    try:
        data = ast.literal_eval(node.value)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        raise ModelFileError(f"{where}: CONFIG must be a literal dict (numbers, strings, "
                             "true/false), e.g. CONFIG = {'batch_size': 32, 'lr': 1e-3}; "
                             "memlens reads it without running the file") from None
    if not isinstance(data, dict):
        raise ModelFileError(f"{where}: CONFIG must be a dict, not {type(data).__name__}")
    return where, data


def read_file_batch_dim(preset: str) -> int | None:
    """CONFIG["batch_dim"]: which dimension of the inputs is the batch; None: not declared."""
    where, data = _literal_config(Path(preset))
    if "batch_dim" not in data:
        return None
    value = data["batch_dim"]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ModelFileError(f"{where}: CONFIG batch_dim must be a dimension, 0 or more (0: "
                             "inputs are (batch, ...); 1: (seq_len, batch, ...)), not "
                             f"{value!r}")
    return value


def read_file_config(preset: str) -> dict[str, Any]:
    """The model file's CONFIG, checked against the option table, read from the source
    without running it: CONFIG must be a literal dict of run settings (techniques are
    chosen per run, live) and FILE_KEYS. {} when the file has none. FILE_KEYS are left out:
    they describe the file (read_file_batch_dim)."""
    where, data = _literal_config(Path(preset))
    out: dict[str, Any] = {}
    settings = {o.key for o in RUN_OPTIONS} - {"preset"}
    for key, value in data.items():
        if key in FILE_KEYS:
            continue
        if key not in settings:
            valid = ", ".join([*(o.key for o in RUN_OPTIONS if o.key in settings), *FILE_KEYS])
            raise ModelFileError(f"{where}: CONFIG key {key!r} is not a setting; "
                                 f"settings: {valid}")
        try:
            out[key] = OPTIONS[key].parse(value)
        except ConfigError as exc:
            raise ModelFileError(f"{where}: CONFIG {exc}") from None
    read_file_batch_dim(preset)  # a bad batch_dim is named when the file is chosen
    return out


def with_model_file(cfg, rebuild: Callable[[Any], Any]):
    """`cfg` with its preset resolved; for a model file, its CONFIG goes under the settings
    given: `rebuild(base)` applies the same config file and overrides to `base` again.
    The order is: memlens's defaults, the file's CONFIG, the config file, the command line."""
    from memlens.core.config import RunConfig

    if not is_model_file(cfg.preset):
        return cfg
    path = resolve_preset(cfg.preset)
    base = RunConfig().with_values(read_file_config(path))
    return rebuild(base).with_values({"preset": path})


# --- loading (runs the user's code) --------------------------------------------------------
def user_frame(exc: BaseException, preset: str) -> traceback.FrameSummary | None:
    """The last frame of the exception's traceback that is in the model file, if any."""
    target = str(Path(preset).resolve())
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if f.filename and Path(f.filename).resolve().as_posix() == Path(target).as_posix()]
    return frames[-1] if frames else None


def frame_text(frame: traceback.FrameSummary) -> str:
    line = f": {frame.line.strip()}" if frame.line else ""
    return f"{Path(frame.filename).name}:{frame.lineno}, in {frame.name}{line}"


def user_error(path: Path, exc: BaseException, doing: str) -> ModelFileError:
    """A ModelFileError for an exception the user's code raised while memlens was `doing`
    something, placed at the file's last frame in the traceback."""
    frame = user_frame(exc, str(path))
    where = f"{path}:{frame.lineno}" if frame else str(path)
    code = f" ({excerpt(frame.line.strip())})" if frame and frame.line else ""
    return ModelFileError(f"{where}: {doing} raised {type(exc).__name__}: "
                          f"{error_message(exc)}{code}")


@dataclass(frozen=True)
class ModelFile:
    """A loaded model file's functions."""

    path: Path
    build_model: Callable
    make_batch: Callable
    loss_fn: Callable | None
    init_state: Callable | None
    batch_size_arg: bool  # make_batch takes batch_size: it follows the batch_size setting


# Inside one_load_per_run(): the files run so far, by (path, mtime, size), on this thread.
_THIS_RUN = threading.local()


@contextlib.contextmanager
def one_load_per_run():
    """A run's scope: a model file runs once in it (its preflight's memory check and the
    run's own build take the same loaded file), not once per use. A file changed since is
    run again."""
    outer = getattr(_THIS_RUN, "files", None)
    if outer is None:
        _THIS_RUN.files = {}
    try:
        yield
    finally:
        if outer is None:
            _THIS_RUN.files = None


def load_model_file(preset: str) -> ModelFile:
    """Run the file (its imports included) and take its functions; inside
    one_load_per_run(), once. Runs user code: call it where the model is built, never on
    the GUI thread."""
    path = Path(resolve_preset(preset))
    files = getattr(_THIS_RUN, "files", None)
    key = None
    if files is not None:
        try:
            st = path.stat()
            key = (str(path), st.st_mtime_ns, st.st_size)
        except OSError:
            key = None  # its read says what is wrong
        if key in files:
            return files[key]
    with _SOURCE_LOCK:
        loaded = _load_model_file(path)
    if files is not None and key is not None:
        files[key] = loaded
    return loaded


def _load_model_file(path: Path) -> ModelFile:
    source = _read_source(path)
    try:
        compile(source, str(path), "exec")
    except SyntaxError as exc:
        raise _syntax_error(path, exc) from None
    folder = str(path.parent)
    added = folder not in sys.path
    if added:  # the file may import modules beside it, as `python model.py` would
        sys.path.insert(0, folder)
    try:
        namespace = runpy.run_path(str(path), run_name=f"memlens_model_{path.stem}")
    except (Exception, SystemExit) as exc:
        raise user_error(path, exc, "loading the file") from None
    finally:
        if added and folder in sys.path:
            sys.path.remove(folder)
    for name in REQUIRED:
        if name not in namespace:
            raise ModelFileError(f"{path}: no function {name}(); {CONTRACT}")
    for name in REQUIRED + OPTIONAL:
        if name in namespace and not callable(namespace[name]):
            raise ModelFileError(f"{path}: {name} is a {type(namespace[name]).__name__}, not a "
                                 f"function; {CONTRACT}")
    return ModelFile(path, namespace["build_model"], namespace["make_batch"],
                     namespace.get("loss_fn"), namespace.get("init_state"),
                     _takes_batch_size(namespace["make_batch"]))


def _takes_batch_size(fn: Callable) -> bool:
    try:
        return "batch_size" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
