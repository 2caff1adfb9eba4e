"""What a watch can tell about a user's loop: call sites, holders of old graphs, and the
five diagnoses' texts (kind `diagnosis` events with bytes, where and fix)."""

from __future__ import annotations

import ast
import inspect
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import torch

from memlens.core.records import RunEvent

_TORCH_DIR = str(Path(torch.__file__).parent)
_CORE_DIR = str(Path(__file__).resolve().parents[2])  # memlens: all of its own code
GRAPH_WALK_LIMIT = 5000  # nodes looked at per candidate tensor when naming a holder


# Installed frameworks that run the user's loop for them: their frames are not the user's
# code (a diagnosis points at the user's line, a model is named as the user names it).
_FRAMEWORKS = tuple(f"{os.sep}{name}{os.sep}" for name in (
    "lightning", "pytorch_lightning", "lightning_fabric", "transformers", "accelerate"))


def is_user_file(filename: str) -> bool:
    """A frame of the user's program: not torch's, not memlens's, not Python's own, not an
    installed training framework's."""
    if filename.startswith((_TORCH_DIR, _CORE_DIR, "<frozen")) or filename.endswith(
            ("runpy.py", "functools.py", "contextlib.py")):
        return False
    return not ("-packages" in filename and any(f in filename for f in _FRAMEWORKS))


_USER_CODE: dict[Any, bool] = {}  # code object -> is_user_file(its file): asked at every call


def user_frames(depth: int = 1) -> Iterator[Any]:
    """The user's frames on the stack now, innermost first."""
    f = sys._getframe(depth)
    while f is not None:
        if is_user_file(f.f_code.co_filename):
            yield f
        f = f.f_back


def program_frames(depth: int = 1) -> Iterator[Any]:
    """The user's frames on the stack now, innermost first, up to the first frame that is
    not theirs above them (memlens running the script, or the shell that called it): the
    program being watched, not what runs it."""
    started = False
    f = sys._getframe(depth)
    while f is not None:
        if is_user_file(f.f_code.co_filename):
            started = True
            yield f
        elif started:
            return
        f = f.f_back


def call_site(depth: int = 2) -> str:
    """file:line of the innermost user frame (the line that called into torch)."""
    f = sys._getframe(depth)
    known = _USER_CODE
    while f is not None:
        code = f.f_code
        user = known.get(code)
        if user is None:
            if len(known) > 50_000:  # code made at run time (exec, compile) stays bounded
                known.clear()
            user = known[code] = is_user_file(code.co_filename)
        if user:
            return f"{code.co_filename}:{f.f_lineno}"
        f = f.f_back
    return ""


_OPTIMIZED = inspect.CO_OPTIMIZED  # a function's frame: its locals live apart from a dict


def frame_locals(f) -> dict:
    """A frame's locals, read without leaving memlens's read behind. Before Python 3.13,
    `f_locals` of a function's frame is a snapshot dict cached on the frame until the next
    read: it would hold what the function held at that moment (a loss of an earlier step,
    an output the program dropped) for as long as the frame runs. So the snapshot is copied
    and emptied; the next read (a debugger's, `locals()`) fills it again. A module's or a
    class body's f_locals is its namespace itself, and is never touched."""
    values = f.f_locals
    if sys.version_info >= (3, 13) or not f.f_code.co_flags & _OPTIMIZED:
        return values
    copy = dict(values)
    values.clear()
    return copy


def variable_name(obj: Any) -> str:
    """The name the user's code gives `obj` (a local or global of the innermost user frame
    that has one, `self.x` for an attribute of self), or ""."""
    for f in user_frames(2):
        local = frame_locals(f)
        for scope in (local, f.f_globals):
            for name, value in list(scope.items()):
                # `self` names the object inside its own method (Lightning's
                # `self(x)` in training_step), not in the script
                if value is obj and not name.startswith("_") and name != "self":
                    return name
        me = local.get("self")
        if me is not None and hasattr(me, "__dict__"):
            for name, value in list(vars(me).items()):
                if value is obj:
                    return f"self.{name}"
            modules = vars(me).get("_modules")
            if isinstance(modules, dict):
                for name, value in modules.items():
                    if value is obj:
                        return f"self.{name}"
    return ""


# --- naming what keeps an old graph alive ----------------------------------------------------


def _reaches(t: torch.Tensor, is_old) -> bool:
    fn = t.grad_fn
    if fn is None:
        return False
    stack, seen = [fn], {fn}
    while stack and len(seen) < GRAPH_WALK_LIMIT:
        node = stack.pop()
        if is_old(node):
            return True
        for nxt, _ in node.next_functions:
            if nxt is not None and nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return False


def _tensors_in(value: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """(suffix, tensor) for a value: a tensor, or the tensors in a list, a tuple (the newest
    first: what a loop appends to) or a dict."""
    if isinstance(value, torch.Tensor):
        yield "", value
    elif isinstance(value, (list, tuple)) and len(value) <= 100_000:
        for v in reversed(value):
            if isinstance(v, torch.Tensor):
                yield "", v
    elif isinstance(value, dict) and len(value) <= 100_000:
        for k, v in value.items():
            if isinstance(v, torch.Tensor):
                yield f"[{k!r}]", v


def reaches_node(is_old):
    """A predicate for find_holder: the tensor's graph reaches a node `is_old` accepts."""
    return lambda t: _reaches(t, is_old)


def find_holder(reaches, modules: Iterable[Any] = ()) -> tuple[str, str] | None:
    """The user variable whose tensor's graph `reaches` (a predicate on a tensor) what is
    looked for: (description, file:line of its assignment, or the frame's line). Looks at
    the locals of the user's frames, their modules' globals, and the attributes of `self`
    in those frames; in a list or a dict, at its tensors. Then at the attributes of
    `modules` (the modules the program calls) and their submodules: what a module caches on
    itself (`self.history.append(loss)` in a loss module's forward)."""
    seen_globals: set[int] = set()
    for f in user_frames(2):
        func = f.f_code.co_name
        local = frame_locals(f)
        scopes = [] if func == "<module>" else [(f"local `{{}}` in {func}()", local)]
        if id(f.f_globals) not in seen_globals:
            seen_globals.add(id(f.f_globals))
            scopes.append(("global `{}`", f.f_globals))
        obj = local.get("self")
        if obj is not None and hasattr(obj, "__dict__"):
            scopes.append(("attribute `self.{}`", vars(obj)))
        for pattern, names in scopes:
            for name, value in list(names.items()):
                if name.startswith("__"):
                    continue
                for suffix, t in _tensors_in(value):
                    if t.requires_grad and reaches(t):
                        where = (assignment_site(f, name)
                                 or f"{f.f_code.co_filename}:{f.f_lineno}")
                        what = pattern.format(name) + (f" ({suffix} of it)" if suffix else "")
                        return what, where
    return _module_holder(reaches, modules)


MODULES_LOOKED_AT = 2000  # submodules whose attributes are read when naming a holder


def _module_holder(reaches, modules: Iterable[Any]) -> tuple[str, str] | None:
    """An attribute of a called module (or of one of its submodules) that keeps the graph:
    (`attribute `self.x` of Class`, the line in the class that stores into it)."""
    seen: set[int] = set()
    for root in modules:
        for sub in root.modules():
            if id(sub) in seen or len(seen) >= MODULES_LOOKED_AT:
                continue
            seen.add(id(sub))
            for name, value in list(vars(sub).items()):
                if name.startswith("_"):  # parameters, buffers, submodules, hooks
                    continue
                for suffix, t in _tensors_in(value):
                    if t.requires_grad and reaches(t):
                        where = attribute_site(type(sub), name)
                        what = (f"attribute `self.{name}` of {type(sub).__name__}"
                                + (f" ({suffix} of it)" if suffix else ""))
                        return what, where
    return None


def assignment_site(frame, name: str) -> str:
    """file:line where `name` is accumulated or appended to in the frame's function (or
    module), preferring `name += ...` and `name.append(...)` over a plain assignment."""
    filename = frame.f_code.co_filename
    try:
        if frame.f_code.co_name == "<module>":
            source, start = Path(filename).read_text(encoding="utf-8"), 1
        else:
            lines, start = inspect.getsourcelines(frame.f_code)
            source = "".join(lines)
    except (OSError, TypeError, UnicodeDecodeError):
        return ""
    line = _accumulation_line(source, name)
    if line is None:
        return ""
    return f"{filename}:{line + (start - 1 if frame.f_code.co_name != '<module>' else 0)}"


def attribute_site(cls: type, name: str) -> str:
    """file:line where a class stores into `self.<name>` outside `__init__` (appends and
    `+=` first), or ""."""
    try:
        filename = inspect.getsourcefile(cls)
        lines, start = inspect.getsourcelines(cls)
    except (OSError, TypeError):
        return ""
    line = _accumulation_line("".join(lines), name, skip_init=True)
    return f"{filename}:{line + start - 1}" if line is not None and filename else ""


def _accumulation_line(source: str, name: str, skip_init: bool = False) -> int | None:
    """The line (1 = the source's first) where `name` (or `x.name`) is accumulated,
    appended to, or else assigned; None where it is not, or the source does not parse."""
    import textwrap

    try:
        tree = ast.parse(textwrap.dedent(source))
    except (SyntaxError, ValueError):
        return None
    skipped: set[int] = set()
    if skip_init:  # `self.history = []` where the object is made is not where it grows
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == "__init__":
                skipped.update(id(n) for n in ast.walk(node))
    best: tuple[int, int] | None = None  # (rank, line)
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        rank = None
        grows = (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                 and node.func.attr in ("append", "extend", "insert")
                 and _named(node.func.value, name))
        if grows or (isinstance(node, ast.AugAssign) and _named(node.target, name)):
            rank = 0
        elif isinstance(node, ast.Assign) and any(_named(t, name) for t in node.targets):
            # `x = x + loss`, `x = torch.cat([x, out])`: an accumulation too
            uses = any(_named(n, name) for n in ast.walk(node.value))
            rank = 0 if uses else 1
        if rank is not None and (best is None or (rank, node.lineno) < best):
            best = (rank, node.lineno)
    return None if best is None else best[1]


def _named(node: ast.AST, name: str) -> bool:
    return (isinstance(node, ast.Name) and node.id == name) or (
        isinstance(node, ast.Attribute) and node.attr == name)


# --- the diagnoses ---------------------------------------------------------------------------

GRAD_NOT_BACKWARDED = "forward under grad never backwarded"
GRAPH_KEPT = "graph kept across steps"
GRADS_NOT_CLEARED = "gradients never cleared"
STATE_NOT_DETACHED = "carried state without detach"
EVAL_IN_TRAIN_MODE = "validation in train mode"
# and 6, GRAPH_GROWS: core/watch/growth.py


def diagnosis(step: int, time_s: float, key: str, message: str, explanation: str, *,
              nbytes: int | None, where: str, fix: str, phase: str = "") -> RunEvent:
    return RunEvent(step=step, time_s=time_s, kind="diagnosis", key=key, phase=phase,
                    message=message, explanation=explanation, bytes=nbytes, where=where,
                    fix=fix)

