"""The window's parts (app/window/*) take what they use in their constructors: widgets, the
settings, and the window only as a RunOnScreen or for Qt's own QMainWindow methods (docks,
drops). None reads the main window's attributes: a part that did was the same class in
another file (#45 point 5). main_window.py and launch.py (its callers) are the window."""

from __future__ import annotations

import ast
from pathlib import Path

from PySide6.QtWidgets import QMainWindow

WINDOW = Path(__file__).resolve().parents[2] / "memlens" / "app" / "window"
THE_WINDOW = {"main_window.py", "launch.py"}
WINDOW_NAMES = {"window", "main_window", "w", "win"}
QT_METHODS = set(dir(QMainWindow))


def window_reads(tree: ast.AST) -> list[str]:
    """`window.x` / `self.window.x` where x is not a QMainWindow method."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        base = node.value
        named = (isinstance(base, ast.Name) and base.id in WINDOW_NAMES) or (
            isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name)
            and base.value.id == "self" and base.attr in WINDOW_NAMES | {"window_"})
        if named and node.attr not in QT_METHODS:
            found.append(f"{node.lineno}: .{node.attr}")
    return found


def test_no_part_of_the_window_reads_the_main_windows_attributes():
    parts = sorted(p for p in WINDOW.glob("*.py") if p.name not in THE_WINDOW)
    assert len(parts) >= 20
    reads = {p.name: window_reads(ast.parse(p.read_text(encoding="utf-8"))) for p in parts}
    assert {name: found for name, found in reads.items() if found} == {}


def test_the_check_finds_a_part_that_reads_the_window():
    source = "class Part:\n    def __init__(self, window):\n        self.window = window\n" \
             "    def go(self):\n        return self.window.history, window.addDockWidget\n"
    assert window_reads(ast.parse(source)) == ["5: .history"]
