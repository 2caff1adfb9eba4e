""""What just happened": each toggle's effect, measured while its window fills, written on
its row of the events list and, for the newest toggle, under the plots. The text is core's
(memlens.core.effects), the one run.json saves: it is measured again until nothing it reads
can change any more (its window and the noise splits around it are in), and once more when
the run ends, as the run folder's writer measures it then."""

from __future__ import annotations

from PySide6.QtWidgets import QLabel

from memlens.core.effects import NOISE_REACH, WINDOW_STEPS, toggle_effect
from memlens.core.records import RunEvent

EFFECT_HINT = "Flip a technique while a run goes: what it did shows here."
# Steps after a toggle beyond which no figure of its effect changes: the after-window, the
# noise splits around it and the later steps that tell a load burst from a change.
SETTLED_AFTER = 2 * WINDOW_STEPS + NOISE_REACH


class ToggleEffects:
    """Owns the toggles' rows and which of them are still measured; writes their texts with
    `events_panel.set_effect(row, text, details)` and on `label`."""

    def __init__(self, events_panel, label: QLabel) -> None:
        self._events_panel, self._label = events_panel, label
        self._rows: list[tuple[int, RunEvent]] = []  # (events list row, event)
        self._measuring: list[tuple[int, RunEvent]] = []

    def clear(self) -> None:
        self._rows.clear()
        self._measuring.clear()
        self._label.setText(EFFECT_HINT)
        self._label.setToolTip("")

    def add(self, row: int, event: RunEvent) -> None:
        self._rows.append((row, event))
        self._measuring.append((row, event))

    def measure_all_again(self) -> None:
        """Every toggle is measured at the next update (the run ended, or the bytes'
        display changed)."""
        self._measuring = list(self._rows)

    def update(self, history, running: bool) -> None:
        if not self._measuring or history is None:
            return
        last = int(history.steps.column("step", len(history.steps) - 1)[0]) \
            if len(history.steps) else -1
        still = []
        for row, event in self._measuring:
            effect = toggle_effect(history, event)
            text = effect.text()
            self._events_panel.set_effect(row, text, effect.details())
            if (row, event) == self._rows[-1]:
                self._label.setText(f"What just happened: {text}")
                self._label.setToolTip(effect.details())
            if running and last < event.step + SETTLED_AFTER:
                still.append((row, event))
        self._measuring = still
