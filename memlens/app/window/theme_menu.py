"""View > Theme: System, Light or Dark, applied at once and remembered across launches."""

from __future__ import annotations

from PySide6.QtCore import QObject
from PySide6.QtGui import QAction, QActionGroup

from memlens.app.app_settings import THEME_CHOICES, AppSettings
from memlens.app.theme import THEMES, Theme, system_theme

LABELS = {"system": "&System", "light": "&Light", "dark": "&Dark"}


def chosen_theme(choice: str) -> Theme:
    """The theme a View > Theme choice stands for ("system": the system's scheme now)."""
    return system_theme() if choice == "system" else THEMES[choice]


class ThemeMenu(QObject):
    """Radio actions theme_<choice>_action; `apply(theme)` shows a theme (conventions')."""

    def __init__(self, window, settings: AppSettings, apply) -> None:
        super().__init__(window)
        self.settings, self._apply = settings, apply
        self.choice = settings.theme()
        group = QActionGroup(self)
        group.setExclusive(True)
        self.actions: dict[str, QAction] = {}
        for choice in THEME_CHOICES:
            action = QAction(LABELS[choice], window)
            action.setObjectName(f"theme_{choice}_action")
            action.setCheckable(True)
            action.setChecked(choice == self.choice)
            action.triggered.connect(lambda _=False, c=choice: self.choose(c))
            group.addAction(action)
            self.actions[choice] = action

    def add_to(self, view_menu) -> None:
        menu = view_menu.addMenu("T&heme")
        menu.setObjectName("theme_menu")
        menu.addActions(list(self.actions.values()))

    @property
    def follows_system(self) -> bool:
        return self.choice == "system"

    def choose(self, choice: str) -> None:
        self.choice = choice
        self.actions[choice].setChecked(True)
        self.settings.set_theme(choice)
        self.settings.sync()
        self._apply(chosen_theme(choice))
