"""How a program uses a value later, read from its syntax tree: whether a name is backwarded
(then no fix may cut its graph), whether it is used only as a number (then `.item()` will
do, else `.detach()`), what form carried state has (a tensor, a tuple), and which calls
train (a loop without them is a validation loop)."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from memlens.core.fix.edits import SCOPES, Source

BACKWARD_CALLS = ("backward", "manual_backward")  # x.backward(), self.manual_backward(x)
TRAINING_CALLS = (*BACKWARD_CALLS, "step", "zero_grad")
# Built-ins and methods that take a number as well as a tensor, and give back a number
NUMBER_FUNCS = ("print", "float", "round", "int", "str", "format", "abs", "min", "max")
TENSOR_FACTORIES = ("zeros", "ones", "randn", "rand", "empty", "full", "zeros_like",
                    "ones_like", "randn_like", "empty_like", "full_like", "tensor",
                    "new_zeros", "new_ones", "new_empty", "new_full", "detach", "clone")
USE_DEPTH = 3  # how far `avg = total / n`, then avg's own uses, are followed


def named(node: ast.AST, text: str) -> bool:
    """`node` is the name or attribute chain `text` (`hidden`, `self.hidden`)."""
    if isinstance(node, ast.Name):
        return node.id == text
    if isinstance(node, ast.Attribute):
        head, _, attr = text.rpartition(".")
        return bool(head) and node.attr == attr and named(node.value, head)
    return False


def mentions(node: ast.AST, text: str) -> bool:
    return any(named(n, text) for n in ast.walk(node))


def in_scope(src: Source, scope: ast.AST) -> Iterator[ast.AST]:
    """The nodes of `scope`, not those of functions defined inside it."""
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, SCOPES):
            stack.extend(ast.iter_child_nodes(node))


def method_name(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def backward_calls(nodes) -> list[ast.Call]:
    """x.backward(), self.manual_backward(loss), accelerator.backward(loss),
    torch.autograd.backward(...) / grad(...)."""
    out = []
    for n in nodes:
        if not isinstance(n, ast.Call):
            continue
        name = method_name(n)
        if name in BACKWARD_CALLS or (name == "grad" and isinstance(n.func, ast.Attribute)
                                      and isinstance(n.func.value, ast.Attribute)
                                      and n.func.value.attr == "autograd"):
            out.append(n)
    return out


def backwarded_at(src: Source, scope: ast.AST, text: str) -> int | None:
    """The line of a backward in `scope` that takes `text` (or something made from it:
    `(total / k).backward()`), or None."""
    for call in backward_calls(in_scope(src, scope)):
        if mentions(call, text):
            return call.lineno
    return None


def trains(node: ast.AST) -> bool:
    """A backward, an optimizer step or a zero_grad inside `node`."""
    return any(isinstance(n, ast.Call) and method_name(n) in TRAINING_CALLS
               for n in ast.walk(node))


def targets(stmt: ast.stmt) -> list[ast.expr]:
    """The names and attributes a statement assigns (tuple targets unpacked)."""
    if isinstance(stmt, ast.Assign):
        raw = list(stmt.targets)
    elif isinstance(stmt, (ast.AugAssign, ast.AnnAssign)):
        raw = [stmt.target]
    else:
        return []
    out: list[ast.expr] = []
    while raw:
        t = raw.pop(0)
        if isinstance(t, (ast.Tuple, ast.List)):
            raw = list(t.elts) + raw
        elif isinstance(t, ast.Starred):
            raw.insert(0, t.value)
        elif isinstance(t, (ast.Name, ast.Attribute)):
            out.append(t)
    return out


def assignments(src: Source, scope: ast.AST, text: str) -> list[ast.AST]:
    """The values `text` is given in `scope` (a tuple target's whole value where it is
    unpacked from one)."""
    values: list[ast.AST] = []
    for n in in_scope(src, scope):
        if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None:
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                if named(t, text):
                    values.append(n.value)
                elif isinstance(t, (ast.Tuple, ast.List)) and any(
                        named(e, text) for e in t.elts):
                    values.append(ast.Tuple(elts=[], ctx=ast.Load()))  # an element: unknown
    return values


def carried_form(src: Source, scope: ast.AST, text: str) -> tuple[str, bool]:
    """("tensor" | "tuple" | "unknown", whether it may be None) for carried state, from the
    values the scope gives it: `torch.zeros(...)` is a tensor, `(h0, c0)` a tuple."""
    forms, maybe_none = set(), False
    for value in assignments(src, scope, text):
        if isinstance(value, ast.Constant) and value.value is None:
            maybe_none = True
        elif (isinstance(value, (ast.Tuple, ast.List)) and value.elts) or (
                isinstance(value, ast.Call) and method_name(value) in ("tuple", "list")):
            forms.add("tuple")
        elif isinstance(value, ast.Call) and method_name(value) in TENSOR_FACTORIES:
            forms.add("tensor")
    return (forms.pop() if len(forms) == 1 else "unknown"), maybe_none


def numeric_only(src: Source, scope: ast.AST, text: str, skip: ast.AST,
                 depth: int = USE_DEPTH) -> bool:
    """Whether every use of `text` in `scope` but the accumulation `skip` takes a number as
    well as a tensor: formatted with a format spec, compared, in arithmetic whose result is
    used so too, passed to print/float/round, `sum`/`len` of a list. A use returned, passed
    elsewhere or read as a tensor (`.item()`, `torch.stack`) is not. A module's name is
    looked for in its functions too."""
    skipped = set(map(id, ast.walk(skip)))
    nodes = ast.walk(scope) if isinstance(scope, ast.Module) else in_scope(src, scope)
    uses = [n for n in nodes
            if named(n, text) and isinstance(getattr(n, "ctx", None), ast.Load)
            and id(n) not in skipped]
    return all(_number_use(src, scope, u, depth) for u in uses)


def _number_use(src: Source, scope: ast.AST, node: ast.AST, depth: int) -> bool:
    parent = src.parents.get(node)
    if isinstance(parent, ast.FormattedValue):
        return parent.format_spec is not None
    if isinstance(parent, (ast.Compare, ast.UnaryOp)):
        return True
    if isinstance(parent, ast.BinOp):
        return depth > 0 and _number_use(src, scope, parent, depth - 1)
    if isinstance(parent, ast.AugAssign) and parent.value is node:
        return True  # added into another number
    if isinstance(parent, ast.Call) and node in parent.args:
        name = method_name(parent)
        if isinstance(parent.func, ast.Name) and name in NUMBER_FUNCS:
            return True
        if isinstance(parent.func, ast.Name) and name in ("sum", "len"):
            return name == "len" or (depth > 0 and _number_use(src, scope, parent, depth - 1))
        return False
    if isinstance(parent, ast.Assign) and parent.value is node and depth > 0:
        names = [t for t in parent.targets if isinstance(t, ast.Name)]
        return len(names) == len(parent.targets) and all(
            numeric_only(src, scope, t.id, parent, depth - 1) for t in names)
    return False
