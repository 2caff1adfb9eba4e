"""The window's pinned runs: faded curves under the live one, added, hidden and removed,
named by the settings in which they differ, and the Lessons tab's pick of two arms."""

from __future__ import annotations

from memlens.app.series.pins import PinnedRun, compare_names, pin_color, run_name
from memlens.app.series.run_series import RunSeries


class PinBoard:
    def __init__(self, window) -> None:
        self.window = window
        self.pins: list[PinnedRun] = []
        self._next_id = 0
        self._lesson_ids: set[int] = set()  # the pins of the Lessons tab's picked row
        self._state: tuple[bool, str] | None = None  # what the pin controls show

    def pin_current(self) -> PinnedRun | None:
        can, why = self.can_pin()
        if not can:
            self.window.statusBar().showMessage(why, 4000)
            return None
        return self.add(self.window.series)

    def add(self, series: RunSeries, name: str = "") -> PinnedRun:
        pin = PinnedRun(self._next_id, name or run_name(series.history.meta, series.step_count),
                        series, pin_color(self._next_id), named=bool(name))
        self._next_id += 1
        self.pins.append(pin)
        self.changed()
        return pin

    def add_history(self, history, name: str = "") -> PinnedRun:
        """A loaded run as a pin (File > Open while a run is going; the Runs dock names it
        by its folder, which tells apart runs of the same settings)."""
        series = RunSeries(history)
        series.pull()
        return self.add(series, name)

    def remove(self, pin_id: int) -> None:
        self.pins = [p for p in self.pins if p.pin_id != pin_id]
        self.changed()

    def set_visible(self, pin_id: int, visible: bool) -> None:
        for pin in self.pins:
            if pin.pin_id == pin_id:
                pin.visible = visible
        self.changed()

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

            zoom_to_steps(self.window.plots, 0, steps - 1)
        return added

    def changed(self) -> None:
        w = self.window
        # Compared runs are named by the settings in which they differ from each other.
        unnamed = [p for p in self.pins if not p.named]
        names = compare_names([p.series.history.meta for p in unnamed],
                              [p.series.step_count for p in unnamed])
        for pin, name in zip(unnamed, names, strict=True):
            pin.name = name
        w.pins_panel.set_pins(self.pins)
        w.plots.set_pins(self.pins)
        w.pin_compare.set_runs(self.pins, w.history)
        w.set_state(w.state)

    def update_state(self) -> None:
        """The pin button, its tooltip and the menu entry say whether this run can be pinned
        now; rechecked on each text refresh, as a run's first steps make it pinnable."""
        can_pin, why = self.can_pin()
        if (can_pin, why) == self._state:
            return
        self._state = (can_pin, why)
        self.window.pins_panel.set_can_pin(can_pin, why)
        self.window.pin_action.setEnabled(can_pin)

    def can_pin(self) -> tuple[bool, str]:
        w = self.window
        if w.series is None or w.series.step_count == 0:
            return False, "Nothing to pin yet: run or open a run first"
        if w.running:
            return False, "Pin a run once it has finished or stopped"
        if any(p.series is w.series for p in self.pins):
            return False, "This run is pinned already"
        return True, ""
