"""From a watched run's diagnoses to source changes: for each place, the table's fix made as
the smallest change from the file's syntax tree and what the watch saw (the holder it
named, the model, the forward's place), or one line saying why no safe change exists.

What the watch saw is read from its diagnosis events: `where`, and in the message the
holder it named (the first name in backticks), the model (the message's first word, or
"the X forward at" / "passed to X at") and, for kept outputs, the forward's place ("(at
file:line)"): core/watch/calls.py and growth.py write them; tests/core/test_fix.py runs
the real messages through this.

Diagnoses at one place are one fix (a forward never backwarded and validation in train
mode at the same call: no_grad and eval together). Fixes in one file that would change the
same text: the first is kept, the later one is refused.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

from memlens.core import findings
from memlens.core.findings import GRAPH_GROWS
from memlens.core.fix import table, uses
from memlens.core.fix.edits import (
    COMPOUND,
    SCOPES,
    Edit,
    Source,
    Unfixable,
    apply,
    call_on,
    insert_after,
    insert_before,
    torch_name,
    wrap_in_with,
)

LIBRARY_PARTS = ("site-packages", "dist-packages")
_BACKTICKED = re.compile(r"`([^`]+)`")
_FORWARD_AT = re.compile(r"\(at (.+):(\d+)\)")  # where kept outputs' forward was called


@dataclass
class Fix:
    """One place's fix: the edits to one file, or why there is none."""

    keys: list[str]
    where: str  # file:line of the user's file, as the watch reported it
    message: str  # the first diagnosis's
    rule: table.FixRule | None = None
    path: Path | None = None  # the file it changes
    edits: list[Edit] = field(default_factory=list)
    needs_torch: bool = False  # its text names torch: the file must import it
    refused: str | None = None
    lines: tuple[int, int] = (0, 0)  # the user's lines it answers for (diagnosis gone?)

    @property
    def applied(self) -> bool:
        return self.refused is None and bool(self.edits)

    @property
    def kind(self) -> str:
        return self.rule.kind if self.rule is not None else "none"


def split_where(where: str) -> tuple[Path, int] | None:
    path, sep, line = where.rpartition(":")
    if not sep or not line.isdigit() or not path:
        return None
    return Path(path), int(line)


def copy_path(path: Path, script: Path) -> Path:
    """Where a file of the program goes under `fixed/`: beside the script's copy, as it is
    beside the script; or the reason it is not one memlens changes (Unfixable)."""
    p, script = path.resolve(), script.resolve()
    if p == script:
        return Path(script.name)
    if any(part in LIBRARY_PARTS for part in p.parts):
        raise Unfixable(f"{p} is inside an installed library: memlens changes only the "
                        "script and its own modules")
    try:
        return p.relative_to(script.parent)
    except ValueError:
        raise Unfixable(f"{p} is outside the script's folder ({script.parent}): memlens "
                        "patches only the script and the modules beside it") from None


class Planner:
    """Plans the fixes of one run's diagnoses; `sources` caches each file read."""

    def __init__(self, script: Path) -> None:
        self.script = script
        self.sources: dict[Path, Source] = {}
        self._torch: dict[Path, tuple[str, list[Edit]]] = {}

    def source(self, path: Path) -> Source:
        path = path.resolve()
        if path not in self.sources:
            copy_path(path, self.script)
            try:
                self.sources[path] = Source.read(path)
            except (OSError, UnicodeDecodeError) as exc:
                raise Unfixable(f"{path} cannot be read ({exc})") from None
            except (SyntaxError, ValueError) as exc:
                raise Unfixable(f"{path} does not parse ({exc})") from None
        return self.sources[path]

    def torch(self, src: Source) -> str:
        if src.path not in self._torch:
            self._torch[src.path] = torch_name(src)
        return self._torch[src.path][0]

    def import_edits(self, path: Path) -> list[Edit]:
        return self._torch.get(path, ("", []))[1]

    # --- all of a run's diagnoses --------------------------------------------------------------
    def plan(self, diagnoses: list[dict]) -> list[Fix]:
        places: dict[str, Fix] = {}
        for d in diagnoses:
            where = d.get("where") or ""
            fix = places.get(where)
            if fix is None:
                places[where] = Fix([d["key"]], where, d.get("message") or "")
            elif d["key"] not in fix.keys:
                fix.keys.append(d["key"])
        fixes = list(places.values())
        for fix in fixes:
            try:
                self._plan_one(fix)
            except Unfixable as exc:
                fix.refused, fix.edits = str(exc), []
        self._refuse_overlaps(fixes)
        return fixes

    def _plan_one(self, fix: Fix) -> None:
        rules = [table.rule_for(k) for k in fix.keys]
        if not any(rules):
            raise Unfixable(f"no mechanical fix for {', '.join(fix.keys)}")
        place = split_where(fix.where)
        if place is None:
            raise Unfixable("the watch could not place it in a file (no file:line)")
        path, line = place
        src = self.source(path)
        fix.path, fix.lines = src.path, (line, line)
        keys = set(fix.keys)
        if findings.GRAD_NOT_BACKWARDED in keys:
            self._forward(fix, src, line, findings.EVAL_IN_TRAIN_MODE in keys)
        elif findings.EVAL_IN_TRAIN_MODE in keys:
            fix.rule = table.EVAL
            fix.edits = self._eval(src, line, _model_named(fix.message, " is evaluated"))
        elif findings.GRAPH_KEPT in keys:
            self._kept(fix, src, line, _holder(fix.message))
        elif findings.MODULE_CACHE in keys:  # `self.cache = h` in a forward: as a kept value
            self._kept(fix, src, line, _holder(fix.message))
            fix.rule = table.DETACH_CACHE
        elif findings.GRADS_NOT_CLEARED in keys:
            fix.rule = table.ZERO_GRAD
            fix.edits = _zero_grad(src, line)
        elif keys & {findings.STATE_NOT_DETACHED, GRAPH_GROWS}:
            fix.rule = table.DETACH_STATE
            fix.edits = self._detach_state(src, line, fix.message)
            fix.needs_torch = any("isinstance(" in e.text for e in fix.edits)

    # --- 1 (and 5): a forward never backwarded ---------------------------------------------------
    def _forward(self, fix: Fix, src: Source, line: int, train_mode: bool) -> None:
        model = _model_named(fix.message, " forward under grad")
        kept = _FORWARD_AT.search(fix.message) if "outputs are kept" in fix.message else None
        if kept is not None:  # `where` is the holder's line; the forward is elsewhere
            fpath, fline = Path(kept.group(1)), int(kept.group(2))
            try:
                fsrc = self.source(fpath)
                edits = self._no_grad(fsrc, fline, model if train_mode else None)
            except Unfixable as exc:  # then what keeps the outputs lets go of the graph
                self._kept(fix, src, line, _holder(fix.message), why_not_no_grad=str(exc))
                return
            fix.path, fix.lines = fsrc.path, (min(line, fline), max(line, fline))
            if fsrc.path != src.path:
                fix.lines = (fline, fline)
        else:
            edits = self._no_grad(src, line, model if train_mode else None)
        fix.rule = table.NO_GRAD_EVAL if train_mode else table.NO_GRAD
        fix.edits, fix.needs_torch = edits, True

    def _no_grad(self, src: Source, line: int, model: str | None) -> list[Edit]:
        stmt = _simple_statement(src, line)
        scope = src.scope_of(stmt)
        for t in uses.targets(stmt):
            name = src.segment(t)
            at = uses.backwarded_at(src, scope, name)
            if at is not None:
                raise Unfixable(f"`{name}` (made at line {line}) is backwarded at line {at}: "
                                "no_grad would stop that backward")
        region = _validation_region(src, stmt)
        torch = self.torch(src)
        edits = []
        if model is not None:  # eval before the with: insertions at one place keep order
            _check_model_call(src, stmt, model)
            _check_falls_through(src, region)
            edits += insert_before(src, region, [f"{model}.eval()"])
        edits += wrap_in_with(src, region, region, f"with {torch}.no_grad():")
        if model is not None:
            edits += insert_after(src, region, [f"{model}.train()"])
        return edits

    def _eval(self, src: Source, line: int, model: str) -> list[Edit]:
        stmt = _simple_statement(src, line)
        _check_model_call(src, stmt, model)
        region = next((a for a in src.ancestors(stmt) if isinstance(a, ast.With)
                       and any(_no_grad_item(src, i.context_expr) for i in a.items)), None)
        region = region or _validation_region(src, stmt)
        _check_falls_through(src, region)
        return (insert_before(src, region, [f"{model}.eval()"])
                + insert_after(src, region, [f"{model}.train()"]))

    # --- 2: a graph kept across steps ---------------------------------------------------------
    def _kept(self, fix: Fix, src: Source, line: int, holder: str | None,
              why_not_no_grad: str = "") -> None:
        if holder is None:
            raise Unfixable("memlens could not name what keeps the graph, so the value's "
                            "later uses are unknown" + (f" ({why_not_no_grad})"
                                                        if why_not_no_grad else ""))
        stmt = src.statement_at(line)
        if "." in holder and not holder.startswith("self."):
            # `criterion.history`, kept by a method of the object's class: `where` is that
            # line, which names it `self.history`
            inside = "self." + holder.rsplit(".", 1)[1]
            if any(uses.named(n, inside) for n in ast.walk(stmt)):
                holder = inside
        value = _accumulated(src, stmt, holder)
        scope = _holder_scope(src, stmt, holder)
        at = uses.backwarded_at(src, scope, holder) if scope is not None else None
        at = at or _returned_then_backwarded(src, stmt, holder)
        if at is not None:
            raise Unfixable(f"the kept tensors in `{holder}` are backwarded later (line {at}): "
                            "cutting their graph would change that backward")
        item = "." not in holder and scope is not None and _starts_as_number(
            src, scope, holder) and uses.numeric_only(src, scope, holder, stmt)
        fix.rule = table.ITEM_KEPT if item else table.DETACH_KEPT
        fix.edits = call_on(src, value, "item" if item else "detach")
        fix.lines = (min(fix.lines[0], line), max(fix.lines[1], line))

    # --- 4 and 6: carried state ---------------------------------------------------------------
    def _detach_state(self, src: Source, line: int, message: str) -> list[Edit]:
        stmt = _simple_statement(src, line)
        model = _carrying_model(message)
        calls = [c for c in src.calls_in(stmt) if model is None
                 or src.segment(c.func) == model] or src.calls_in(stmt)
        assigned = {src.segment(t) for t in uses.targets(stmt)}
        carried = []
        for call in calls:
            for arg in [*call.args, *(k.value for k in call.keywords)]:
                parts = arg.elts if isinstance(arg, (ast.Tuple, ast.List)) else [arg]
                for a in parts:
                    text = src.segment(a)
                    if isinstance(a, (ast.Name, ast.Attribute)) and text in assigned and (
                            text not in carried):
                        carried.append(text)
        hint = _holder(message)
        if hint in carried:
            carried = [hint]
        if not carried:
            raise Unfixable(f"the state carried into line {line} is not passed and assigned "
                            "there (kept inside the model?): memlens does not know what to "
                            "detach")
        torch, unit = self.torch(src), src.indent_unit()
        code: list[str] = []
        for name in carried:
            scope = _holder_scope(src, stmt, name) or src.scope_of(stmt)
            form, maybe_none = uses.carried_form(src, scope, name)
            t = "h" if name != "h" else "t"
            new = {"tensor": f"{name}.detach()",
                   "tuple": f"tuple({t}.detach() for {t} in {name})"}.get(
                form, f"{name}.detach() if isinstance({name}, {torch}.Tensor) else "
                      f"tuple({t}.detach() for {t} in {name})")
            code += ([f"if {name} is not None:", f"{unit}{name} = {new}"] if maybe_none
                     else [f"{name} = {new}"])
        return insert_before(src, stmt, code)

    # --- fixes that would change the same text ------------------------------------------------
    def _refuse_overlaps(self, fixes: list[Fix]) -> None:
        kept: dict[Path, list[Edit]] = {}
        for i, fix in enumerate(fixes):
            if not fix.applied or fix.path is None:
                continue
            so_far = kept.setdefault(fix.path, [])
            try:
                apply(self.sources[fix.path].text, so_far + fix.edits)
            except ValueError:
                first = next(f for f in fixes[:i] if f.applied and f.path == fix.path)
                fix.refused = (f"its change overlaps the fix at {first.where}, which is "
                               "made instead")
                fix.edits = []
                continue
            so_far += fix.edits


def patched_texts(planner: Planner, fixes: list[Fix]) -> dict[Path, str]:
    """Each changed file's new text: its applied fixes' edits, `import torch` first where a
    fix names torch and the file imports it under no name."""
    out: dict[Path, str] = {}
    for path in dict.fromkeys(f.path for f in fixes if f.applied):
        mine = [f for f in fixes if f.applied and f.path == path]
        edits = planner.import_edits(path) if any(f.needs_torch for f in mine) else []
        out[path] = apply(planner.sources[path].text,
                          list(edits) + [e for f in mine for e in f.edits])
    return out


def fix_text(planner: Planner, fix: Fix) -> str:
    """The file's text with this fix alone (its diff)."""
    src = planner.sources[fix.path]
    edits = planner.import_edits(fix.path) if fix.needs_torch else []
    return apply(src.text, list(edits) + fix.edits)


# --- reading the watch's words ------------------------------------------------------------------
def _holder(message: str) -> str | None:
    """The variable the watch named as the holder (`total_loss`, `self.history`), if any."""
    for name in _BACKTICKED.findall(message):
        if "(" not in name and " " not in name:
            return name
    return None


def _model_named(message: str, after: str) -> str | None:
    """The model as the watch named it, at the start of its message (`netG forward ...`)."""
    head = message.split(after, 1)[0].strip() if after in message else ""
    return head if head and " " not in head else None


def _carrying_model(message: str) -> str | None:
    """The model that was given the carried state (diagnoses 4 and 6 name it)."""
    m = re.search(r"the (\S+) forward at |passed to (\S+) at ", message)
    return (m.group(1) or m.group(2)) if m else None


# --- statements ---------------------------------------------------------------------------------
def _simple_statement(src: Source, line: int) -> ast.stmt:
    stmt = src.statement_at(line)
    if isinstance(stmt, COMPOUND):
        raise Unfixable(f"line {line} is the header of a compound statement "
                        f"(`{type(stmt).__name__.lower()}`): memlens changes only a whole "
                        "simple statement")
    return stmt


def _check_model_call(src: Source, stmt: ast.stmt, model: str | None) -> None:
    if model is None or not any(src.segment(c.func) == model for c in src.calls_in(stmt)):
        called = f"no call of `{model}` at line {stmt.lineno}" if model else "no model name"
        raise Unfixable(f"{called}: memlens could not tell which variable holds the model "
                        "to switch to eval()")


def _check_falls_through(src: Source, region: ast.stmt) -> None:
    """A `model.train()` after `region` runs only where the region does not leave early
    (a return inside it, a break or continue of a loop around it)."""
    loops = (ast.For, ast.While, ast.AsyncFor)
    for node in uses.in_scope(src, region) if not isinstance(region, SCOPES) else []:
        inner_loop = any(isinstance(a, loops) for a in _between(src, node, region))
        if isinstance(node, (ast.Return, ast.Yield, ast.YieldFrom)) or (
                isinstance(node, (ast.Break, ast.Continue)) and not inner_loop):
            raise Unfixable(f"line {node.lineno} leaves the validation early "
                            f"(`{type(node).__name__.lower()}`): a model.train() after it "
                            "would not run, and memlens does not restructure the code")
    if isinstance(region, (ast.Return, ast.Break, ast.Continue)):
        raise Unfixable(f"line {region.lineno} leaves its block: a model.train() after it "
                        "would not run")


def _between(src: Source, node: ast.AST, top: ast.AST) -> list[ast.AST]:
    """The ancestors of `node` below `top`."""
    out = []
    for a in src.ancestors(node):
        if a is top:
            break
        out.append(a)
    return out


def _no_grad_item(src: Source, expr: ast.expr) -> bool:
    return isinstance(expr, ast.Call) and uses.method_name(expr) in (
        "no_grad", "inference_mode")


def _validation_region(src: Source, stmt: ast.stmt) -> ast.stmt:
    """The loop around `stmt` where it is a validation loop (nothing in it trains, calls a
    function of this file that trains, or a function named like training), else `stmt`."""
    for a in src.ancestors(stmt):
        if isinstance(a, SCOPES):
            return stmt
        if isinstance(a, (ast.For, ast.While, ast.AsyncFor)):
            if uses.trains(a) or _calls_training(src, a):
                return stmt
            try:
                src.indent(a)
            except Unfixable:
                return stmt
            return a
    return stmt


def _calls_training(src: Source, node: ast.AST, depth: int = 3) -> bool:
    defs = {d.name: d for d in ast.walk(src.tree)
            if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef))}
    for call in src.calls_in(node):
        name = uses.method_name(call)
        if any(w in name.lower() for w in ("train", "fit", "step", "backward")):
            return True
        d = defs.get(name)
        if d is not None and d is not node and depth > 0 and (
                uses.trains(d) or _calls_training(src, d, depth - 1)):
            return True
    return False


def _accumulated(src: Source, stmt: ast.stmt, holder: str) -> ast.expr:
    """The value `stmt` adds to `holder`: `h += v`, `h.append(v)`, `h.insert(i, v)`,
    `h = h + v`, `h = torch.cat([h, v])`; for an attribute, also `self.h = v`."""
    if isinstance(stmt, ast.AugAssign) and uses.named(stmt.target, holder):
        return stmt.value
    for call in src.calls_in(stmt):
        f = call.func
        if isinstance(f, ast.Attribute) and uses.named(f.value, holder):
            if f.attr == "append" and len(call.args) == 1:
                return call.args[0]
            if f.attr == "insert" and len(call.args) == 2:
                return call.args[1]
    if isinstance(stmt, ast.Assign) and any(uses.named(t, holder) for t in stmt.targets):
        v = stmt.value
        if "." in holder and not any(uses.named(n, holder) for n in ast.walk(v)):
            if isinstance(v, ast.Constant):  # `self.cache = None`: where it starts
                raise Unfixable(f"line {stmt.lineno} sets `{holder}` to a constant, not to "
                                "what it keeps: memlens does not know what to detach")
            return v  # `self.cache = h`: what a module keeps on itself, replaced each step
        if isinstance(v, ast.BinOp) and uses.named(v.left, holder):
            return v.right
        if isinstance(v, ast.BinOp) and uses.named(v.right, holder):
            return v.left
        for arg in (v.args if isinstance(v, ast.Call) else []):
            if isinstance(arg, (ast.List, ast.Tuple)) and any(
                    uses.named(e, holder) for e in arg.elts):
                others = [e for e in arg.elts if not uses.named(e, holder)]
                if len(others) == 1:
                    return others[0]
    raise Unfixable(f"line {stmt.lineno} does not add one value to `{holder}` "
                    "(+=, append, insert, or x = x + v): memlens does not know what to detach")


def _holder_scope(src: Source, stmt: ast.stmt, holder: str) -> ast.AST | None:
    """Where `holder`'s uses are: its function, or the module for a global; None for an
    attribute (read anywhere the object goes)."""
    if "." in holder:
        return None
    scope = src.scope_of(stmt)
    declared = any(isinstance(n, ast.Global) and holder in n.names for n in ast.walk(scope))
    return src.tree if declared else scope


def _starts_as_number(src: Source, scope: ast.AST, holder: str) -> bool:
    """`total = 0` / `losses = []`: what it starts as holds numbers as well as tensors
    (`total = total + v`, an accumulation, is not where it starts)."""
    values = [v for v in uses.assignments(src, scope, holder) if not uses.mentions(v, holder)]
    return bool(values) and all(
        (isinstance(v, ast.Constant) and isinstance(v.value, (int, float))) or (
            isinstance(v, ast.List) and not v.elts) for v in values)


def _returned_then_backwarded(src: Source, stmt: ast.stmt, holder: str) -> int | None:
    """Where a function returns what it kept (`return total_loss / n`) and a caller in this
    file backwards what it got back: that backward's line."""
    func = src.scope_of(stmt)
    if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    if not any(isinstance(n, ast.Return) and n.value is not None and uses.mentions(n, holder)
               for n in uses.in_scope(src, func)):
        return None
    for node in ast.walk(src.tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and (
                uses.method_name(node.value) == func.name):
            for t in node.targets:
                at = uses.backwarded_at(src, src.scope_of(node), src.segment(t))
                if at is not None:
                    return at
    return None


# --- 3: gradients never cleared ---------------------------------------------------------------
def _zero_grad(src: Source, line: int) -> list[Edit]:
    stmt = _simple_statement(src, line)
    steps = [c for c in src.calls_in(stmt) if uses.method_name(c) == "step"
             and isinstance(c.func, ast.Attribute)]
    if not steps:
        raise Unfixable(f"no `.step()` call at line {line}")
    call = steps[0]
    receiver = src.segment(call.func.value)
    if "scaler" in receiver.lower() and call.args:  # GradScaler: scaler.step(optimizer)
        receiver = src.segment(call.args[0])
    elif call.args or call.keywords:
        raise Unfixable(f"the step at line {line} takes a closure: clear the gradients "
                        "inside it (memlens does not change a closure)")
    scope = src.scope_of(stmt)
    nodes = list(uses.in_scope(src, scope))
    cleared = [c for c in nodes if isinstance(c, ast.Call) and uses.method_name(c) == "zero_grad"]
    if cleared:
        raise Unfixable(f"zero_grad is called at line {cleared[0].lineno}, under a condition "
                        "or elsewhere (gradient accumulation?): memlens leaves it as it is")
    before = [c for c in uses.backward_calls(nodes) if c.lineno <= stmt.lineno]
    if not before:
        raise Unfixable(f"no backward before the step at line {line} in its function: "
                        "memlens does not know where to clear the gradients")
    backward = _simple_statement(src, max(before, key=lambda c: c.lineno).lineno)
    return insert_before(src, backward, [f"{receiver}.zero_grad()"])
