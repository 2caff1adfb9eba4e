"""The window's pinned runs: faded curves under the live one, added, hidden and removed,
named by the settings in which they differ, and the Lessons tab's pick of two arms."""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from memlens.app.series.pins import PinnedRun, compare_names, pin_color, run_name
from memlens.app.series.run_series import RunSeries
from memlens.app.window.shown_run import RunOnScreen


class PinBoard(QObject):
    """Owns the pins; shows them on `plots`, `pins_panel` and `pin_compare` (against the
    run `shown`). `changed` after every change; `can_pin_changed(can, why)` when pinning
    the run on screen becomes possible or not."""

    changed = Signal()
    can_pin_changed = Signal(bool, str)

    def __init__(self, plots, pins_panel, pin_compare, shown: RunOnScreen,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._plots, self._pins_panel, self._compare = plots, pins_panel, pin_compare
        self._shown = shown
        self.pins: list[PinnedRun] = []
        self._next_id = 0
        self._lesson_ids: set[int] = set()  # the pins of the Lessons tab's picked row
        self._state: tuple[bool, str] | None = None  # what the pin controls show

    def pin_current(self) -> PinnedRun | None:
        can, why = self.can_pin()
        if not can:
            self._shown.say(why, 4000)
            return None
        return self.add(self._shown.series)

    def add(self, series: RunSeries, name: str = "") -> PinnedRun:
        pin = PinnedRun(self._next_id, name or run_name(series.history.meta, series.step_count),
                        series, pin_color(self._next_id), named=bool(name))
        self._next_id += 1
        self.pins.append(pin)
        self._show()
        return pin

    def add_history(self, history, name: str = "") -> PinnedRun:
        """A loaded run as a pin (File > Open while a run is going)."""
        series = RunSeries(history)
        series.pull()
        return self.add(series, name)

    def remove(self, pin_id: int) -> None:
        self.pins = [p for p in self.pins if p.pin_id != pin_id]
        self._show()

    def set_visible(self, pin_id: int, visible: bool) -> None:
        for pin in self.pins:
            if pin.pin_id == pin_id:
                pin.visible = visible
        self._show()

    def pin_lesson_runs(self, runs: list) -> list[PinnedRun]:
        """The Lessons tab's pick: its runs (name, history) replace the previous pick's pins,
        so the timeline shows the two arms overlaid."""
        self.pins = [p for p in self.pins if p.pin_id not in self._lesson_ids]
        added = []
        for name, history in runs:
            series = RunSeries(history)
            series.pull()
            added.append(self.add(series, name))
        self._lesson_ids = {p.pin_id for p in added}
        steps = max((len(h.steps) for _name, h in runs), default=0)
        if steps:  # the step axis spans the two arms, however long the run shown before
            from memlens.app.timeline.plot_zoom import zoom_to_steps

            zoom_to_steps(self._plots, 0, steps - 1)
        return added

    def show_against(self, history) -> None:
        """Compare the pins with the run now on screen."""
        self._compare.set_runs(self.pins, history)

    def _show(self) -> None:
        # Compared runs are named by the settings in which they differ from each other.
        unnamed = [p for p in self.pins if not p.named]
        names = compare_names([p.series.history.meta for p in unnamed],
                              [p.series.step_count for p in unnamed])
        for pin, name in zip(unnamed, names, strict=True):
            pin.name = name
        self._pins_panel.set_pins(self.pins)
        self._plots.set_pins(self.pins)
        self.show_against(self._shown.history)
        self.changed.emit()

    def update_state(self) -> None:
        """Whether this run can be pinned now, said to the pin controls when it changes;
        rechecked on each text refresh, as a run's first steps make it pinnable."""
        can_pin, why = self.can_pin()
        if (can_pin, why) == self._state:
            return
        self._state = (can_pin, why)
        self._pins_panel.set_can_pin(can_pin, why)
        self.can_pin_changed.emit(can_pin, why)

    def can_pin(self) -> tuple[bool, str]:
        series = self._shown.series
        if series is None or series.step_count == 0:
            return False, "Nothing to pin yet: run or open a run first"
        if self._shown.running:
            return False, "Pin a run once it has finished or stopped"
        if any(p.series is series for p in self.pins):
            return False, "This run is pinned already"
        return True, ""
