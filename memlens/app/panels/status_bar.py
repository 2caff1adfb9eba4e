"""The status bar: device, memory source, steps/s, progress with an ETA, step, total and
peak memory."""

from __future__ import annotations

import time
from collections import deque

from PySide6.QtWidgets import QLabel, QStatusBar

from memlens.app.elided_label import ElidedLabel
from memlens.core.units import format_bytes

QWIDGETSIZE_MAX = (1 << 24) - 1  # Qt's largest widget size (C++'s QWIDGETSIZE_MAX)
RATE_WINDOW_S = 1.5
MIN_RATE_SPAN_S = 0.5
# Set several times a second while a run goes: their widths only grow (see _set_steady).
STEADY_FIELDS = ("rate", "progress", "step", "total", "peak")
MIN_RATE_STEPS = 3
# A message (File > Export's "Wrote 14 files to …") takes the room of these fields, in this
# order, until it shows whole; they come back when it goes.
YIELD_TO_MESSAGES = ("memory_source", "rate", "progress", "device", "step", "total", "peak")


class RunStatusBar(QStatusBar):
    FIELDS = ("device", "memory_source", "rate", "progress", "step", "total", "peak")
    SOURCE_TIP = ("Where the memory figures come from: CPU tensor bytes counted by category, "
                  "every CPU allocation (precise mode) or the CUDA caching allocator")

    def __init__(self, parent=None, clock=time.monotonic) -> None:
        super().__init__(parent)
        self.clock = clock  # tests give a fake one
        self.planned: int | None = None  # steps the run was started for
        self.labels: dict[str, QLabel] = {}
        for name in self.FIELDS:
            label = ElidedLabel("") if name == "memory_source" else QLabel("")
            label.setObjectName(f"status_{name}")
            label.setContentsMargins(6, 0, 6, 0)
            self.addPermanentWidget(label)
            self.labels[name] = label
        self.labels["memory_source"].setToolTip(self.SOURCE_TIP)
        self.labels["peak"].setToolTip("Highest per-step peak so far (on CPU outside precise "
                                       "mode, the highest phase sample: a lower bound)")
        self._counts: deque[tuple[float, int]] = deque()
        self._yielded: list[QLabel] = []  # fields hidden while a message shows
        self.messageChanged.connect(self._on_message_changed)
        self.clear_run()

    def _on_message_changed(self, text: str) -> None:
        """A message shows whole: the fields give it their room while it is up."""
        for label in self._yielded:
            label.show()
        self._yielded = []
        if not text:
            return
        need = self.fontMetrics().horizontalAdvance(text) + 24
        room = self.width() - sum(w.width() for w in self.findChildren(QLabel)
                                  if w.isVisible() and w.objectName().startswith("status_"))
        for name in YIELD_TO_MESSAGES:
            if room >= need:
                break
            label = self.labels[name]
            if label.isVisible():
                room += label.width()
                label.hide()
                self._yielded.append(label)

    def clear_run(self) -> None:
        for name in STEADY_FIELDS:  # a new run's texts start from their own widths
            self.labels[name].setMinimumSize(0, 0)
            self.labels[name].setMaximumSize(QWIDGETSIZE_MAX, QWIDGETSIZE_MAX)
        self._counts.clear()
        self.planned = None
        self.set_environment({})
        self.set_progress(None, 0, None, None, live=False)

    def set_planned(self, steps: int | None) -> None:
        """The steps the run was started for: progress and ETA count towards it."""
        self.planned = steps
        # The widest text this run can show, reserved: the label never cuts its ETA
        # ("ETA 4" for "ETA 4:30") nor jumps as the digits change.
        widest = progress_text(steps or 0, steps, None, False) + ", ETA 00:00:00" if steps else ""
        label = self.labels["progress"]
        label.setMinimumWidth(label.fontMetrics().horizontalAdvance(widest)
                              + label.contentsMargins().left() + label.contentsMargins().right()
                              + 4 if widest else 0)

    def set_environment(self, env: dict) -> None:
        self.labels["device"].setText(f"device: {env.get('device', '–')}")
        source = self.labels["memory_source"]
        source.setText(env.get("memory_label", "memory: –"))
        note = env.get("precise_note")
        source.setToolTip(self.SOURCE_TIP + (
            f"\nPrecise mode: {env.get('precise_backend', '')}, because {note}" if note else ""))

    def set_progress(self, step: int | None, steps_done: int, total: float | None,
                     peak: float | None, live: bool) -> None:
        now = self.clock()
        if live:
            self._note_steps(now, steps_done)
        else:
            self._counts.clear()
        per_s = self._rate(now)
        rate = "–" if per_s is None else f"{per_s:.2f}" if per_s < 1 else f"{per_s:.1f}"
        texts = {
            "rate": f"steps/s: {rate}",
            "progress": progress_text(steps_done, self.planned, per_s, live),
            "step": f"step: {'–' if step is None or step < 0 else step}",
            "total": f"total: {format_bytes(total) if total is not None else '–'}",
            "peak": f"peak: {format_bytes(peak) if peak is not None else '–'}",
        }
        for name, text in texts.items():
            _set_steady(self.labels[name], text)

    def _note_steps(self, now: float, steps_done: int) -> None:
        """Keep the moments the step count changed: the last RATE_WINDOW_S of them, and
        always the last MIN_RATE_STEPS steps' worth, so a step slower than the window
        still has a rate (counting frames would read 0 between two slow steps)."""
        counts = self._counts
        if counts and steps_done == counts[-1][1]:
            return
        if counts and steps_done < counts[-1][1]:
            counts.clear()  # another run
        counts.append((now, steps_done))
        while len(counts) > MIN_RATE_STEPS + 1 and now - counts[1][0] > RATE_WINDOW_S:
            counts.popleft()

    def _rate(self, now: float) -> float | None:
        if len(self._counts) < 2:
            return None
        (t0, n0), (t1, n1) = self._counts[0], self._counts[-1]
        if t1 - t0 < MIN_RATE_SPAN_S:  # shorter spans only show how steps bunch up
            return None
        # A step that has taken longer than the measured ones so far slows the rate as
        # it goes, instead of holding a figure the run no longer keeps up.
        return (n1 - n0) / max(t1 - t0, now - t0 - (t1 - t0) / (n1 - n0))


def _set_steady(label: QLabel, text: str) -> None:
    """Set a label's text, its size fixed at the largest any of its texts needed so far. A
    label of fixed size tells no layout that it changed: a status text that changes width
    would otherwise lay the whole main window out again (and start an animation per dock)
    at every refresh of the text."""
    if text == label.text():
        return
    label.setText(text)
    need, held = label.sizeHint(), label.minimumSize()
    if held != label.maximumSize() or need.width() > held.width() or need.height() > held.height():
        label.setFixedSize(max(need.width(), held.width()), max(need.height(), held.height()))


def progress_text(done: int, planned: int | None, per_s: float | None, live: bool) -> str:
    """"12 of 200 steps (6%), ETA 0:31": the ETA only while a run goes at a measured rate."""
    if not planned:
        return ""
    text = f"{done:,} of {planned:,} steps ({100 * min(done, planned) // planned}%)"
    if live and done < planned:
        if per_s and per_s > 0:
            left = round((planned - done) / per_s)
            hours, rest = divmod(left, 3600)
            text += f", ETA {hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else \
                f", ETA {rest // 60}:{rest % 60:02d}"
        else:
            text += ", ETA –"
    return text
