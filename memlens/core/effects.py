"""What a toggle did: memory at each phase (exact bytes) and step time (a ratio of medians
with its 95% interval), over the steps before and after it.

One computation for the app's "What just happened", run.json's `effect` on each toggle event
and the CLI summary. A window stops where the setting it measures stops being the one in
force (a later toggle), where an error cut the run, or at the run's end, and says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memlens.core.records import SAMPLE_PHASES, RunEvent
from memlens.core.stats import RatioCI, ratio_of_medians
from memlens.core.units import format_bytes

WINDOW_STEPS = 10
# How far from a toggle (in steps each side) the run's own unchanged splits gauge the
# machine's noise: near enough to share its load, far enough for dozens of splits.
NOISE_REACH = 200
# A memory change smaller than this share of the memory in use (or 512 B) is called
# unchanged: tensor bytes move by a few bytes with the loss scalars a leak keeps.
NEGLIGIBLE_SHARE = 0.002
NEGLIGIBLE_BYTES = 512
_MEASURED_PHASES = SAMPLE_PHASES[1:]  # `start` is before any step
# A step-time noise band wider than this (in percent either way) measures the machine, not
# the change: the text says so instead of a band like "±3135%" (the figure stays in details).
BUSY_NOISE_PCT = 100.0
TOO_BUSY = "step time not measured: the machine was too busy to measure time"


@dataclass(frozen=True)
class ToggleEffect:
    """One toggle's effect. Memory figures are the median sample of each phase over the
    window's steps (the lower median: always a sample's own exact value)."""

    event: RunEvent
    before_steps: int
    after_steps: int
    window: int
    memory_before: dict[str, int] = field(default_factory=dict)
    memory_after: dict[str, int] = field(default_factory=dict)
    time: RatioCI | None = None
    # Why the after-window is shorter than `window`, e.g. "superseded at step 18"; "" if not.
    cut: str = ""
    complete: bool = False  # the after-window is final (full, or cut)

    @property
    def memory_change(self) -> dict[str, int]:
        return {p: self.memory_after[p] - self.memory_before[p]
                for p in _MEASURED_PHASES if p in self.memory_after and p in self.memory_before}

    def main_change(self) -> tuple[str, int] | None:
        """The phase whose memory changed most and by how much, or None if none changed
        beyond the noise threshold."""
        delta = self.memory_change
        if not delta:
            return None
        phase = max(delta, key=lambda p: abs(delta[p]))
        scale = max(self.memory_before.values(), default=0)
        if abs(delta[phase]) <= max(NEGLIGIBLE_SHARE * scale, NEGLIGIBLE_BYTES):
            return None
        return phase, delta[phase]

    def text(self) -> str:
        """The effect in a line; a watch's toggle adds what it does to the results (its
        message), the lab's have none."""
        text = self._text()
        return f"{text}; {self.event.message}" if self.event.message else text

    def _text(self) -> str:
        head = self.event.label()
        if self.before_steps == 0:
            return f"{head}: no steps before it to compare with"
        if self.after_steps == 0:
            if self.complete:
                return f"{head}: no steps after it to compare with ({self.cut})"
            return f"{head}: measuring (0 of {self.window} steps after)"
        main = self.main_change()
        if not self.memory_change:
            memory = "memory n/a"
        elif main is None:
            memory = "memory unchanged"
        else:
            memory = f"{format_bytes(main[1], signed=True)} at {main[0]}"
        parts = [memory, self.time_text()]
        if not self.complete:
            tail = f" (measuring: {self.after_steps} of {self.window} steps)"
        elif self.cut:
            tail = f" (measured over {self.after_steps} steps; {self.cut})"
        else:
            tail = ""
        return f"{head}: {', '.join(parts)}{tail}"

    def time_text(self) -> str:
        """The step time's part of the text: its change, "within noise (±X%)", or, where
        the noise band is wider than BUSY_NOISE_PCT, that the machine was too busy."""
        if self.time is None:
            return "step time n/a"
        if not self.time.significant and self.time.half_width_pct > BUSY_NOISE_PCT:
            return TOO_BUSY
        return self.time.describe("step time")

    def details(self) -> str:
        """Every phase, for a tooltip."""
        lines = [f"{self.event.label()} at step {self.event.step}",
                 f"median of {self.before_steps} steps before vs {self.after_steps} after"
                 + (f" ({self.cut})" if self.cut else "") + ":"]
        for phase, d in self.memory_change.items():
            lines.append(f"  after {phase}: {format_bytes(self.memory_before[phase])} -> "
                         f"{format_bytes(self.memory_after[phase])} "
                         f"({format_bytes(d, signed=True)})")
        if self.time is not None:
            lines.append(f"  {self.time.describe('step time')}")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        """run.json's `effect` of a toggle event."""
        return {
            "window": self.window, "before_steps": self.before_steps,
            "after_steps": self.after_steps, "complete": self.complete, "cut": self.cut,
            "memory_bytes": {p: {"before": self.memory_before[p], "after": self.memory_after[p],
                                 "change": d} for p, d in self.memory_change.items()},
            "step_time": self.time.as_dict() if self.time is not None else None,
            "significant": bool(self.time is not None and self.time.significant),
            "text": self.text(),
        }


def _first_row_at(table, step: int) -> int:
    """The first row of a step-ordered table whose step is >= `step` (binary search, a few
    one-value reads: a long run's table is never copied whole)."""
    lo, hi = 0, len(table)
    while lo < hi:
        mid = (lo + hi) // 2
        if table.column("step", mid, mid + 1)[0] < step:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _rows(table, s0: int, s1: int, columns: tuple[str, ...]) -> list[np.ndarray]:
    """Columns of the rows with s0 <= step < s1."""
    if s1 <= s0:
        return [np.empty(0) for _ in columns]
    i0, i1 = _first_row_at(table, s0), _first_row_at(table, s1)
    rows = table.rows(i0, i1)
    return [rows[:, table.index[c]] for c in columns]


def _phase_medians(samples, s0: int, s1: int) -> dict[str, int]:
    phases, totals = _rows(samples, s0, s1, ("phase", "total"))
    out = {}
    for code, phase in enumerate(SAMPLE_PHASES):
        if phase == "start":
            continue
        values = np.sort(totals[phases == code])
        if len(values):
            out[phase] = int(values[(len(values) - 1) // 2])
    return out


def toggle_effect(history, event: RunEvent, window: int = WINDOW_STEPS) -> ToggleEffect:
    """The effect of a toggle that took effect at the start of `event.step`: the steps
    before it since the previous toggle (at most `window`), against `event.step` and the
    steps after it up to the next toggle or error (at most `window`). `history`: a
    memlens.core.history.RunHistory (or anything with its `steps`, `samples`, `events()` and
    `summary`)."""
    s = event.step
    events = history.events()
    earlier = [e.step for e in events if e.kind == "toggle" and e.step < s]
    start = max(s - window, max(earlier, default=-1))
    end, cut = s + window, ""
    for e in events:
        if e.step < s or e is event or (e.kind == "toggle" and e.step == s):
            continue
        if e.kind == "toggle" and e.step < end:
            end, cut = e.step, f"superseded at step {e.step}"
        elif e.kind == "error" and e.step < end:
            end, cut = e.step, f"cut by an error at step {e.step}"
    last_step = int(history.steps.column("step", len(history.steps) - 1)[0]) \
        if len(history.steps) else -1
    finished = history.summary is not None
    if finished and not cut and last_step < end - 1:
        end, cut = last_step + 1, f"run ended at step {last_step}"
    (before_ms,) = _rows(history.steps, start, s, ("step_ms",))
    (after_ms,) = _rows(history.steps, s, end, ("step_ms",))
    # Complete when the window is full or cut for good, or when the run is over.
    complete = bool(cut) or finished or last_step >= end - 1
    time = None
    if len(before_ms) and len(after_ms):
        changes = [e.step for e in events if e.kind in ("toggle", "error")]
        time = ratio_of_medians(before_ms, after_ms).with_machine_noise(
            _placebo_ratios(history.steps, s, len(before_ms), len(after_ms), [*changes, s]),
            _later_ratio(history.steps, s, end, max(earlier, default=-1), changes,
                         window))
    return ToggleEffect(
        event=event, before_steps=len(before_ms), after_steps=len(after_ms), window=window,
        memory_before=_phase_medians(history.samples, start, s),
        memory_after=_phase_medians(history.samples, s, end), time=time,
        cut=cut if complete and len(after_ms) < window else "", complete=complete,
    )


def _later_ratio(steps, s: int, end: int, previous: int, changes: list[int], window: int
                 ) -> float | None:
    """Median step of the setting's steps after the window (up to NOISE_REACH, until the
    next change) over the median of its predecessor's steps (up to NOISE_REACH), or None
    with fewer than `window` later steps."""
    stop = min([c for c in changes if c > s] + [end + NOISE_REACH])
    (later,) = _rows(steps, end, stop, ("step_ms",))
    if len(later) < window:
        return None
    (before,) = _rows(steps, max(previous, s - NOISE_REACH), s, ("step_ms",))
    b = np.median(before)
    return float(np.median(later) / b) if b > 0 else None


def _placebo_ratios(steps, s: int, nb: int, na: int, others: list[int]) -> np.ndarray:
    """The toggle's statistic (median of `na` steps / median of the `nb` before them) at
    every other split within NOISE_REACH steps of step `s` where nothing changed: no toggle
    (this one included) or error inside the split's steps. What the machine alone does to
    it: a load burst that slows the steps after a toggle ends somewhere, and its end is one
    of these splits."""
    i_s = _first_row_at(steps, s)
    i0 = max(0, i_s - NOISE_REACH - nb)
    (step, ms) = _rows(steps, -1 if i0 == 0 else int(steps.column("step", i0, i0 + 1)[0]),
                       s + NOISE_REACH + na, ("step", "step_ms"))
    if len(ms) < nb + na + 1:
        return np.empty(0)
    windows = np.lib.stride_tricks.sliding_window_view
    med_b = np.median(windows(ms, nb), axis=1)  # med_b[k]: steps k .. k+nb-1
    med_a = np.median(windows(ms, na), axis=1)
    splits = np.arange(nb, len(ms) - na + 1)  # the split before row p
    before, after = med_b[splits - nb], med_a[splits]
    keep = np.ones(len(splits), dtype=bool)
    for other in others:  # a change inside the split's steps is not the machine's noise
        keep &= ~((step[splits - nb] < other) & (other <= step[splits + na - 1]))
    keep &= (before > 0) & np.isfinite(before) & np.isfinite(after)
    return after[keep] / before[keep]



def events_with_effects(history, window: int = WINDOW_STEPS) -> list[dict[str, Any]]:
    """The history's events as run.json lists them: each toggle with its `effect`."""
    out = []
    for e in history.events():
        d = e.to_dict()
        if e.kind == "toggle":
            d["effect"] = toggle_effect(history, e, window).as_dict()
        out.append(d)
    return out
