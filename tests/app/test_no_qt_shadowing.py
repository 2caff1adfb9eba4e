"""No attribute of our QObject subclasses hides a Qt (or pyqtgraph) method of the same name.

`self.layout = ...` on a QWidget replaces QWidget.layout() for every caller, Qt's own Python
wrappers included; the breakage shows up far from the cause.
"""

import ast
import importlib
import inspect
import pkgutil

import pytest
from PySide6.QtCore import QObject

import memlens.app


def _app_classes():
    for info in pkgutil.walk_packages(memlens.app.__path__, prefix=memlens.app.__name__ + "."):
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and issubclass(cls, QObject):
                yield cls


def _assigned_attributes(cls) -> set[str]:
    """Names assigned as `self.NAME = ...` (or annotated) in the class's own methods, and
    plain (non-function) class attributes."""
    names = {n for n, v in vars(cls).items()
             if not n.startswith("__") and not inspect.isfunction(v)
             and not isinstance(v, (property, staticmethod, classmethod))}
    tree = ast.parse(inspect.getsource(cls))
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        for t in targets:
            for el in (t.elts if isinstance(t, ast.Tuple) else [t]):
                if (isinstance(el, ast.Attribute) and isinstance(el.value, ast.Name)
                        and el.value.id == "self"):
                    names.add(el.attr)
    return names


def _foreign_methods(cls) -> dict[str, type]:
    """Callable attributes that the class inherits from Qt or pyqtgraph (not from our code)."""
    out: dict[str, type] = {}
    for base in cls.__mro__[1:]:
        if base.__module__.startswith(memlens.app.__name__ + ".") or base is object:
            continue
        for name, value in vars(base).items():
            if not name.startswith("_") and callable(value):
                out.setdefault(name, base)
    return out


CLASSES = sorted(set(_app_classes()), key=lambda c: f"{c.__module__}.{c.__qualname__}")


def test_the_scan_finds_our_widgets():
    names = {c.__name__ for c in CLASSES}
    assert {"MainWindow", "GraphPanel", "PlotStack"} <= names


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_no_attribute_shadows_a_qt_method(cls):
    foreign = _foreign_methods(cls)
    own_methods = {n for n, v in vars(cls).items() if inspect.isfunction(v)}
    clashes = {n: foreign[n].__name__ for n in _assigned_attributes(cls)
               if n in foreign and n not in own_methods}
    assert not clashes, f"{cls.__name__} attributes hide inherited methods: {clashes}"
