"""View > X axis: Steps or Wall time for every timeline plot at once, remembered."""

from __future__ import annotations

from memlens.app.app_settings import X_AXIS_CHOICES, AppSettings
from memlens.app.window.choice_menu import ChoiceMenu

LABELS = {"steps": "&Steps", "wall_time": "&Wall time"}


class XAxisMenu(ChoiceMenu):
    """Radio actions x_axis_<choice>_action, applied to `plots` (the plot stack)."""

    def __init__(self, parent, settings: AppSettings, plots) -> None:
        self.settings, self.plots = settings, plots
        super().__init__(parent, "x_axis", "&X axis",
                         {c: LABELS[c] for c in X_AXIS_CHOICES}, settings.x_axis(),
                         self._remember_choice, self._show)
        self.plots.set_wall_time(self.choice == "wall_time")

    def _remember_choice(self, choice: str) -> None:
        self.settings.set_x_axis(choice)
        self.settings.sync()

    def _show(self, choice: str) -> None:
        self.plots.set_wall_time(choice == "wall_time")
        self.plots.refresh(False)
