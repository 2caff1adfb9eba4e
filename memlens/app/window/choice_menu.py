"""A View submenu of exclusive choices (View > Theme, View > X axis): radio actions, the
choice remembered in the settings and applied at once."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject
from PySide6.QtGui import QAction, QActionGroup


class ChoiceMenu(QObject):
    """Radio actions `<name>_<choice>_action`; `choose(choice)` ticks it, calls `remember`
    and then `apply` with it."""

    def __init__(self, window, name: str, title: str, labels: dict[str, str], current: str,
                 remember: Callable[[str], None], apply: Callable[[str], None]) -> None:
        super().__init__(window)
        self.name, self.title = name, title
        self.choice = current
        self._remember, self._apply = remember, apply
        group = QActionGroup(self)
        group.setExclusive(True)
        self.actions: dict[str, QAction] = {}
        for choice, label in labels.items():
            action = QAction(label, window)
            action.setObjectName(f"{name}_{choice}_action")
            action.setCheckable(True)
            action.setChecked(choice == current)
            action.triggered.connect(lambda _=False, c=choice: self.choose(c))
            group.addAction(action)
            self.actions[choice] = action

    def add_to(self, view_menu) -> None:
        menu = view_menu.addMenu(self.title)
        menu.setObjectName(f"{self.name}_menu")
        menu.addActions(list(self.actions.values()))

    def choose(self, choice: str) -> None:
        self.choice = choice
        self.actions[choice].setChecked(True)
        self._remember(choice)
        self._apply(choice)
