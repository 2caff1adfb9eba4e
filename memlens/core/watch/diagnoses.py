"""What a watch can tell about a user's loop: call sites, holders of old graphs, and the
five diagnoses' texts (kind `diagnosis` events with bytes, where and fix)."""

from __future__ import annotations

import ast
import inspect
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from memlens.core.records import RunEvent

_TORCH_DIR = str(Path(torch.__file__).parent)
_CORE_DIR = str(Path(__file__).resolve().parents[2])  # memlens: all of its own code
# A checkout's `main.py` (memlens's entry beside the package): memlens's, not the user's
_ENTRY = str(Path(__file__).resolve().parents[3] / "main.py")
GRAPH_WALK_LIMIT = 5000  # nodes looked at per candidate tensor when naming a holder


# Installed frameworks that run the user's loop for them: their frames are not the user's
# code (a diagnosis points at the user's line, a model is named as the user names it).
_FRAMEWORKS = tuple(f"{os.sep}{name}{os.sep}" for name in (
    "lightning", "pytorch_lightning", "lightning_fabric", "transformers", "accelerate"))


def is_user_file(filename: str) -> bool:
    """A frame of the user's program: not torch's, not memlens's, not Python's own, not an
    installed training framework's."""
    if filename.startswith((_TORCH_DIR, _CORE_DIR, "<frozen")) or filename.endswith(
            ("runpy.py", "functools.py", "contextlib.py")) or filename == _ENTRY:
        return False
    return not ("-packages" in filename and any(f in filename for f in _FRAMEWORKS))


# id of a code object -> (that code, is_user_file(its file)): asked at every call. By id, the
# code held (so its id is no other's while it is here): code objects compare (and hash) by
# content, not by file, so a user's function and an identical one in a library were one
# key, and a look-up hashed the whole code at every call.
_USER_CODE: dict[int, tuple[Any, bool]] = {}
# (id of a user's code object, instruction) -> (that code, call_site's file:line).
_SITES: dict[tuple[int, int], tuple[Any, str]] = {}


def user_frames(depth: int = 1) -> Iterator[Any]:
    """The user's frames on the stack now, innermost first."""
    f = _frame(depth)
    while f is not None:
        if is_user_file(f.f_code.co_filename):
            yield f
        f = f.f_back


def program_frames(depth: int = 1) -> Iterator[Any]:
    """The user's frames on the stack now, innermost first, up to the first frame that is
    not theirs above them (memlens running the script, or the shell that called it): the
    program being watched, not what runs it."""
    started = False
    f = _frame(depth)
    while f is not None:
        if is_user_file(f.f_code.co_filename):
            started = True
            yield f
        elif started:
            return
        f = f.f_back


def _frame(depth: int):
    """The frame `depth` calls up, or the outermost one where the stack is not that deep (a
    script's own module-level code, called straight from the interpreter)."""
    while depth > 0:
        try:
            return sys._getframe(depth + 1)
        except ValueError:
            depth -= 1
    return sys._getframe(1)


def call_site(depth: int = 2) -> str:
    """file:line of the innermost user frame (the line that called into torch), looked for
    from `depth` calls up (memlens's and torch's own frames are passed over anyway)."""
    return site_from(_frame(depth))


def site_from(f) -> str:
    """call_site's file:line, looked for from frame `f` outwards (a hook's caller: the
    frames of memlens between the hook and the look-up are not walked)."""
    known = _USER_CODE
    while f is not None:
        code = f.f_code
        site = _SITES.get((id(code), f.f_lasti))  # a user's line met before: most calls
        if site is not None and site[0] is code:
            return site[1]
        seen = known.get(id(code))
        if seen is not None and seen[0] is code:
            user = seen[1]
        else:
            if len(known) > 50_000:  # code made at run time (exec, compile) stays bounded
                known.clear()
                _SITES.clear()
            user = is_user_file(code.co_filename)
            known[id(code)] = (code, user)
        if user:  # an instruction of a code object is on one line: its text made once
            if len(_SITES) > 50_000:  # (bounded as the code objects are)
                _SITES.clear()
            text = f"{code.co_filename}:{f.f_lineno}"
            _SITES[(id(code), f.f_lasti)] = (code, text)
            return text
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
    try:
        fn = t.grad_fn
    except RuntimeError:  # a view whose base changed in place since (FSDP1's parameters)
        return False
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


_NESTED = 64  # of a list's newest items, those looked into when they hold tensors themselves
_ITEM_TENSORS = 16  # tensors looked at in one such item (a ModelOutput, an (out, hidden))


def _tensors_in(value: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """(suffix, tensor) for a value: a tensor, or the tensors in a list, a tuple (the newest
    first: what a loop appends to) or a dict, and inside their items where those are dicts,
    tuples or lists (a list of Hugging Face ModelOutputs, of `(log_prob, value)` pairs)."""
    if isinstance(value, torch.Tensor):
        yield "", value
    elif isinstance(value, (list, tuple)) and len(value) <= 100_000:
        for i, v in enumerate(reversed(value)):
            if isinstance(v, torch.Tensor):
                yield "", v
            elif i < _NESTED:
                for t in _item_tensors(v):
                    yield "", t
    elif isinstance(value, dict) and len(value) <= 100_000:
        for v in list(value.values()):
            for t in [v] if isinstance(v, torch.Tensor) else _item_tensors(v):
                yield " (a dict)", t


def _item_tensors(v: Any) -> list[torch.Tensor]:
    if isinstance(v, dict):
        items = list(v.values())[:_ITEM_TENSORS]
    elif isinstance(v, (list, tuple)):
        items = list(v[:_ITEM_TENSORS])
    else:
        return []
    return [t for t in items if isinstance(t, torch.Tensor)]


def reaches_node(is_old):
    """A predicate for find_holder: the tensor's graph reaches a node `is_old` accepts."""
    return lambda t: _reaches(t, is_old)


def find_holder(reaches) -> tuple[str, str] | None:
    """The user variable whose tensor's graph `reaches` (a predicate on a tensor) what is
    looked for: (description, file:line of its assignment, or the frame's line). Looks at
    the locals of the user's frames, their modules' globals, and the attributes of `self`
    in those frames; in a list or a dict, at its tensors. Then at the attributes of the
    objects those variables hold: a model (a LightningModule's `self.train_losses`) or an
    object of a class the user wrote (a Trainer subclass's `self.kept`)."""
    frames = list(user_frames(2))
    return _in_variables(frames, reaches) or _in_attributes(frames, reaches)


def _scopes(frames: list) -> Iterator[tuple[Any, str, dict]]:
    """(frame, pattern, names) of the user's frames: locals, globals (once), self's."""
    seen_globals: set[int] = set()
    for f in frames:
        func = f.f_code.co_name
        local = frame_locals(f)
        if func != "<module>":
            yield f, f"local `{{}}` in {func}()", local
        if id(f.f_globals) not in seen_globals:
            seen_globals.add(id(f.f_globals))
            yield f, "global `{}`", f.f_globals
        obj = local.get("self")
        if obj is not None and hasattr(obj, "__dict__"):
            yield f, "attribute `self.{}`", vars(obj)


def _in_variables(frames: list, reaches) -> tuple[str, str] | None:
    for f, pattern, names in _scopes(frames):
        for name, value in list(names.items()):
            if name.startswith("__"):
                continue
            for suffix, t in _tensors_in(value):
                if t.requires_grad and reaches(t):
                    where = assignment_site(f, name) or f"{f.f_code.co_filename}:{f.f_lineno}"
                    return pattern.format(name) + suffix, where
    return None


def _in_attributes(frames: list, reaches) -> tuple[str, str] | None:
    looked: set[int] = set()
    for f, _pattern, names in _scopes(frames):
        for name, value in list(names.items()):
            if name.startswith("__") or id(value) in looked or not _keeps_state(value):
                continue
            looked.add(id(value))
            for attr, held in list(vars(value).items()):
                if attr.startswith("__"):
                    continue
                for suffix, t in _tensors_in(held):
                    if t.requires_grad and reaches(t):
                        where = (attribute_site(type(value), attr)
                                 or f"{f.f_code.co_filename}:{f.f_lineno}")
                        return f"attribute `{name}.{attr}`{suffix}", where
    return None


def _keeps_state(value: Any) -> bool:
    """A model, or an object of a class written in a user file."""
    if isinstance(value, torch.nn.Module):
        return True
    if isinstance(value, type) or not hasattr(value, "__dict__"):
        return False
    module = sys.modules.get(type(value).__module__)
    filename = getattr(module, "__file__", None)
    return bool(filename) and is_user_file(filename)


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
    line = _best_line(source, name)
    if line is None:
        return ""
    return f"{filename}:{line + (start - 1 if frame.f_code.co_name != '<module>' else 0)}"


def attribute_site(cls: type, attr: str) -> str:
    """file:line where `self.<attr>` is appended to, accumulated or assigned in the methods
    of `cls` or of the user's classes it derives from."""
    for klass in cls.__mro__:
        try:
            filename = inspect.getsourcefile(klass) or ""
            if not is_user_file(filename):
                continue
            lines, start = inspect.getsourcelines(klass)
        except (OSError, TypeError):
            continue
        line = _best_line("".join(lines), attr)
        if line is not None:
            return f"{filename}:{line + start - 1}"
    return ""


_GROWERS = ("append", "extend", "insert", "appendleft", "extendleft")  # (a deque's too)


def _best_line(source: str, name: str) -> int | None:
    """The line (1-based in `source`) where `name` (a variable, or an attribute of that
    name) grows: `+=`, `append`/`extend`/`insert` (on it, or on one of its items: a
    defaultdict's `d[k].append`), `x = x + ...`, `d[k] = ...`; else where
    it is plainly assigned, a value before a constant (`self.last = None`)."""
    import textwrap

    try:
        tree = ast.parse(textwrap.dedent(source))
    except (SyntaxError, ValueError):
        return None
    best: tuple[int, int] | None = None  # (rank, line)
    for node in ast.walk(tree):
        rank = None
        grows = (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                 and node.func.attr in _GROWERS
                 and (_named(node.func.value, name)  # `x.append(h)`, `d[k].append(h)`
                      or (isinstance(node.func.value, ast.Subscript)
                          and _named(node.func.value.value, name))))
        if grows or (isinstance(node, ast.AugAssign) and _named(node.target, name)):
            rank = 0
        elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Subscript) and _named(t.value, name) for t in node.targets):
            rank = 0  # `preds[k] = model(x)`
        elif isinstance(node, ast.Assign) and any(_named(t, name) for t in node.targets):
            # `x = x + loss`, `x = torch.cat([x, out])`: an accumulation too
            uses = any(_named(n, name) for n in ast.walk(node.value))
            # `self.last = None` in __init__ is where it starts, not what it keeps
            rank = 0 if uses else 2 if isinstance(node.value, ast.Constant) else 1
        if rank is not None and (best is None or (rank, node.lineno) < best):
            best = (rank, node.lineno)
    return None if best is None else best[1]


def _named(node: ast.AST, name: str) -> bool:
    return (isinstance(node, ast.Name) and node.id == name) or (
        isinstance(node, ast.Attribute) and node.attr == name)


# --- the diagnoses ---------------------------------------------------------------------------

# Their keys and fix texts: core.findings (one vocabulary with the lab's).


def diagnosis(step: int, time_s: float, key: str, message: str, explanation: str, *,
              nbytes: int | None, where: str, fix: str, phase: str = "") -> RunEvent:
    return RunEvent(step=step, time_s=time_s, kind="diagnosis", key=key, phase=phase,
                    message=message, explanation=explanation, bytes=nbytes, where=where,
                    fix=fix)

