"""Menu entries, made one way: a named action with its shortcut and slot."""

from __future__ import annotations

from PySide6.QtGui import QAction, QKeySequence


def add_action(parent, menu, text: str, shortcut, slot, name: str,
               checkable: bool = False) -> QAction:
    """An action `name` (its objectName: tests and scripts find it by it) on `menu`."""
    made = QAction(text, parent)
    made.setObjectName(name)
    if shortcut is not None:
        made.setShortcut(QKeySequence(shortcut))
    made.setCheckable(checkable)
    made.triggered.connect(slot)
    menu.addAction(made)
    return made
