"""Source changes made from a file's syntax tree: the text is edited at the exact positions of
its nodes (ast's line and column offsets), never reprinted, so the user's formatting,
comments and blank lines stay as they were; only the lines a fix touches change.

An `Edit` replaces text[start:end] with `text`; insertions at one offset keep the order they
were made in. `Source` finds statements and their blocks, indentation and the lines inside
multi-line strings (never re-indented: that would change the string).
"""

from __future__ import annotations

import ast
import io
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


class Unfixable(Exception):
    """No safe change exists here; the message says why, in one line."""


@dataclass(frozen=True)
class Edit:
    start: int  # offsets in the file's text (characters)
    end: int
    text: str


# The compound statements whose header a fix never edits, and the scopes of names.
COMPOUND = (ast.For, ast.AsyncFor, ast.While, ast.If, ast.With, ast.AsyncWith, ast.Try,
            ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Match)
SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.Module)
if hasattr(ast, "TryStar"):
    COMPOUND = (*COMPOUND, ast.TryStar)


class Source:
    """One Python file, parsed: its text, tree, and where each node is in the text."""

    def __init__(self, path: Path, text: str) -> None:
        self.path, self.text = path, text
        self.tree = ast.parse(text, filename=str(path))  # SyntaxError: the caller's to say
        self.lines = text.splitlines(keepends=True)
        self._starts = [0]
        for line in self.lines:
            self._starts.append(self._starts[-1] + len(line))
        self.parents: dict[ast.AST, ast.AST] = {}
        for node in ast.walk(self.tree):
            for child in ast.iter_child_nodes(node):
                self.parents[child] = node
        self._in_string = _lines_inside_strings(text)

    @classmethod
    def read(cls, path: Path) -> Source:
        return cls(path, path.read_text(encoding="utf-8"))

    # --- positions -------------------------------------------------------------------------
    def offset(self, lineno: int, col: int) -> int:
        """The text offset of ast's (lineno, col): col counts UTF-8 bytes."""
        line = self.lines[lineno - 1] if lineno <= len(self.lines) else ""
        return self._starts[lineno - 1] + len(line.encode("utf-8")[:col].decode("utf-8",
                                                                               "ignore"))

    def span(self, node: ast.AST) -> tuple[int, int]:
        return (self.offset(node.lineno, node.col_offset),
                self.offset(node.end_lineno, node.end_col_offset))

    def segment(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.text[start:end]

    def line_start(self, lineno: int) -> int:
        return self._starts[lineno - 1]

    def line_end(self, lineno: int) -> int:
        """The offset just past line `lineno`'s newline (the next line's start)."""
        return self._starts[lineno]

    # --- statements ------------------------------------------------------------------------
    def statement_at(self, line: int) -> ast.stmt:
        """The innermost statement that holds `line` (a compound statement only where the
        line is in its header)."""
        holding = [n for n in ast.walk(self.tree)
                   if isinstance(n, ast.stmt) and n.lineno <= line <= n.end_lineno]
        best = min(holding, key=lambda n: (n.end_lineno - n.lineno, -n.col_offset),
                   default=None)
        if best is None:
            raise Unfixable(f"line {line} of {self.path.name} holds no statement")
        return best

    def ancestors(self, node: ast.AST) -> Iterator[ast.AST]:
        while node in self.parents:
            node = self.parents[node]
            yield node

    def scope_of(self, node: ast.AST) -> ast.AST:
        """The function (or the module) whose body holds `node`."""
        return next((a for a in self.ancestors(node) if isinstance(a, SCOPES)), self.tree)

    def class_of(self, node: ast.AST) -> ast.ClassDef | None:
        return next((a for a in self.ancestors(node) if isinstance(a, ast.ClassDef)), None)

    def indent(self, stmt: ast.stmt) -> str:
        """The whitespace before a statement that starts its line; Unfixable where other code
        comes before it on that line (`if x: y = f()`, `a = 1; b = 2`)."""
        line = self.lines[stmt.lineno - 1]
        before = line[: self.offset(stmt.lineno, stmt.col_offset) - self.line_start(
            stmt.lineno)]
        if before.strip():
            raise Unfixable(f"line {stmt.lineno} of {self.path.name} holds more than one "
                            "statement: memlens edits only a statement that has its own lines")
        rest = self.text[self.span(stmt)[1]:self.line_end(stmt.end_lineno)]
        if rest.strip() and not rest.strip().startswith("#"):
            raise Unfixable(f"line {stmt.end_lineno} of {self.path.name} holds more than one "
                            "statement: memlens edits only a statement that has its own lines")
        return before

    def indent_unit(self) -> str:
        """The file's own indentation step (four spaces where it has no block)."""
        for node in ast.walk(self.tree):
            body = getattr(node, "body", None)
            if isinstance(node, ast.stmt) and isinstance(body, list) and body and (
                    body[0].lineno > node.lineno):
                outer = self.lines[node.lineno - 1]
                inner = self.lines[body[0].lineno - 1]
                o = outer[: len(outer) - len(outer.lstrip())]
                i = inner[: len(inner) - len(inner.lstrip())]
                if i.startswith(o) and len(i) > len(o):
                    return i[len(o):]
        return "    "

    def calls_in(self, node: ast.AST) -> list[ast.Call]:
        return [n for n in ast.walk(node) if isinstance(n, ast.Call)]


def _lines_inside_strings(text: str) -> set[int]:
    """Lines that begin inside a multi-line string (its later lines)."""
    inside: set[int] = set()
    f_start, f_end = (getattr(tokenize, n, -1) for n in ("FSTRING_START", "FSTRING_END"))
    opened: list[int] = []  # Python 3.12+: an f-string is tokens from its start to its end
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.STRING:
                inside.update(range(tok.start[0] + 1, tok.end[0] + 1))
            elif tok.type == f_start:
                opened.append(tok.start[0])
            elif tok.type == f_end and opened:
                inside.update(range(opened.pop() + 1, tok.end[0] + 1))
    except (tokenize.TokenError, SyntaxError):
        pass
    return inside


# --- the changes ------------------------------------------------------------------------------
def insert_before(src: Source, stmt: ast.stmt, code: list[str]) -> list[Edit]:
    """New lines (each a statement) before `stmt`, at its indentation."""
    indent = src.indent(stmt)
    at = src.line_start(stmt.lineno)
    return [Edit(at, at, "".join(f"{indent}{c}\n" for c in code))]


def insert_after(src: Source, stmt: ast.stmt, code: list[str]) -> list[Edit]:
    """New lines after `stmt` (and its trailing comment), at its indentation."""
    indent = src.indent(stmt)
    at = src.line_end(stmt.end_lineno)
    newline = "" if src.text[:at].endswith("\n") else "\n"
    return [Edit(at, at, newline + "".join(f"{indent}{c}\n" for c in code))]


def wrap_in_with(src: Source, first: ast.stmt, last: ast.stmt, header: str) -> list[Edit]:
    """`header` (`with torch.no_grad():`) over the statements first..last of one block:
    their lines indented one step more, except lines inside a multi-line string."""
    indent = src.indent(first)
    src.indent(last)
    unit = src.indent_unit()
    at = src.line_start(first.lineno)
    edits = [Edit(at, at, f"{indent}{header}\n")]
    for lineno in range(first.lineno, last.end_lineno + 1):
        if lineno in src._in_string or not src.lines[lineno - 1].strip():
            continue
        start = src.line_start(lineno)
        edits.append(Edit(start, start, unit))
    return edits


ATOMS = (ast.Name, ast.Attribute, ast.Call, ast.Subscript)


def call_on(src: Source, expr: ast.expr, method: str) -> list[Edit]:
    """`expr.method()`: appended to an atom (`loss` -> `loss.detach()`), else the
    expression in parentheses first (`a * b` -> `(a * b).detach()`)."""
    start, end = src.span(expr)
    if isinstance(expr, ATOMS):
        return [Edit(end, end, f".{method}()")]
    return [Edit(start, start, "("), Edit(end, end, f").{method}()")]


def torch_name(src: Source) -> tuple[str, list[Edit]]:
    """The name the file's top level binds torch to (`torch`, `th`), and the edit that adds
    `import torch` after its imports where it binds none."""
    for node in src.tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "torch":
                    return alias.asname or "torch", []
                if alias.name.startswith("torch.") and alias.asname is None:
                    return "torch", []
    body = src.tree.body
    imports = [n for n in body if isinstance(n, (ast.Import, ast.ImportFrom))]
    docstring = body[:1] if body and isinstance(body[0], ast.Expr) and isinstance(
        getattr(body[0], "value", None), ast.Constant) and isinstance(
        body[0].value.value, str) else []
    after = (imports or docstring or [None])[-1]
    at = src.line_end(after.end_lineno) if after is not None else 0
    newline = "" if at == 0 or src.text[:at].endswith("\n") else "\n"
    return "torch", [Edit(at, at, f"{newline}import torch\n")]


def apply(text: str, edits: list[Edit]) -> str:
    """The text with every edit made. Overlapping replacements are a ValueError (two fixes
    that change the same text); insertions at one offset go in the order given."""
    ordered = sorted(enumerate(edits), key=lambda ie: (ie[1].start, ie[1].end, ie[0]))
    out, pos = [], 0
    for _, e in ordered:
        if e.start < pos:
            raise ValueError(f"two changes overlap at offset {e.start}")
        out.append(text[pos:e.start])
        out.append(e.text)
        pos = e.end
    out.append(text[pos:])
    return "".join(out)
