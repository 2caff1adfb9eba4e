"""View > X axis: Steps or Wall time for every timeline plot at once, remembered."""

from __future__ import annotations

from PySide6.QtCore import QObject
from PySide6.QtGui import QAction, QActionGroup

from memlens.app.app_settings import X_AXIS_CHOICES, AppSettings

LABELS = {"steps": "&Steps", "wall_time": "&Wall time"}


class XAxisMenu(QObject):
    """Radio actions x_axis_<choice>_action, applied to the window's plot stack."""

    def __init__(self, window, settings: AppSettings) -> None:
        super().__init__(window)
        self.settings, self.plots = settings, window.plots
        self.choice = settings.x_axis()
        group = QActionGroup(self)
        group.setExclusive(True)
        self.actions: dict[str, QAction] = {}
        for choice in X_AXIS_CHOICES:
            action = QAction(LABELS[choice], window)
            action.setObjectName(f"x_axis_{choice}_action")
            action.setCheckable(True)
            action.setChecked(choice == self.choice)
            action.triggered.connect(lambda _=False, c=choice: self.choose(c))
            group.addAction(action)
            self.actions[choice] = action
        self.plots.set_wall_time(self.choice == "wall_time")

    def add_to(self, view_menu) -> None:
        menu = view_menu.addMenu("&X axis")
        menu.setObjectName("x_axis_menu")
        menu.addActions(list(self.actions.values()))

    def choose(self, choice: str) -> None:
        self.choice = choice
        self.actions[choice].setChecked(True)
        self.settings.set_x_axis(choice)
        self.settings.sync()
        self.plots.set_wall_time(choice == "wall_time")
        self.plots.refresh(False)
