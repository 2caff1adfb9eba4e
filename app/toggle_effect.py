"""What a toggle did: mean memory at each phase and mean step time, 10 steps before vs after.

No Qt here: reads a RunSeries, returns numbers and the one line the window shows, e.g.
"zero_grad: zeros -> set_to_none: -2.6 MiB at zero_grad, step time -3%".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from app.run_series import RunSeries
from app.units import format_bytes, format_ms, format_percent_change
from core.history import PHASES_PER_STEP
from core.records import PHASES, RunEvent

WINDOW_STEPS = 10
# A change smaller than this share of the memory in use is noise, not an effect.
NEGLIGIBLE_SHARE = 0.002


@dataclass
class ToggleEffect:
    event: RunEvent
    before_steps: int
    after_steps: int
    memory_before: dict[str, float] = field(default_factory=dict)  # phase -> mean bytes
    memory_after: dict[str, float] = field(default_factory=dict)
    step_ms_before: float = math.nan
    step_ms_after: float = math.nan
    window: int = WINDOW_STEPS
    last_step: int = -1  # the newest step the run has recorded

    @property
    def complete(self) -> bool:
        # By step numbers, not records: a failed step inside the window has no record.
        return self.last_step >= self.event.step + self.window - 1

    @property
    def memory_delta(self) -> dict[str, float]:
        return {p: self.memory_after[p] - self.memory_before[p]
                for p in PHASES if p in self.memory_after and p in self.memory_before}

    def text(self) -> str:
        head = self.event.label()
        if self.before_steps == 0:
            return f"{head}: no steps before it to compare with"
        if self.after_steps == 0:
            return f"{head}: measuring (0 of {self.window} steps after)"
        parts = [self._memory_text()]
        change = format_percent_change(self.step_ms_before, self.step_ms_after)
        if change in ("+0%", "-0%"):
            parts.append("step time unchanged")
        elif change != "n/a":
            parts.append(f"step time {change}")
        done = min(self.last_step - self.event.step + 1, self.window)
        tail = "" if self.complete else f" (measuring: {done} of {self.window} steps)"
        return f"{head}: {', '.join(parts)}{tail}"

    def _memory_text(self) -> str:
        delta = self.memory_delta
        if not delta:
            return "memory n/a"
        phase = max(delta, key=lambda p: abs(delta[p]))
        scale = max(self.memory_before.values(), default=0.0)
        if abs(delta[phase]) <= max(NEGLIGIBLE_SHARE * scale, 512):
            return "memory unchanged"
        return f"{format_bytes(delta[phase], signed=True)} at {phase}"

    def details(self) -> str:
        """Every phase, for a tooltip."""
        lines = [f"{self.event.label()} at step {self.event.step}",
                 f"mean of {self.before_steps} steps before vs {self.after_steps} after:"]
        for phase, d in self.memory_delta.items():
            lines.append(f"  after {phase}: {format_bytes(self.memory_before[phase])} -> "
                         f"{format_bytes(self.memory_after[phase])} "
                         f"({format_bytes(d, signed=True)})")
        lines.append(f"  step time: {format_ms(self.step_ms_before)} -> "
                     f"{format_ms(self.step_ms_after)} "
                     f"({format_percent_change(self.step_ms_before, self.step_ms_after)})")
        return "\n".join(lines)


def _phase_means(series: RunSeries, x0: float, x1: float) -> dict[str, float]:
    i0, i1 = series.samples.index(x0), series.samples.index(x1)
    xs, totals = series.samples.rows("total", i0, i1)
    totals = totals[0].astype(np.float64)
    codes = np.rint((xs - np.floor(xs)) * PHASES_PER_STEP).astype(int)
    out = {}
    for code, phase in enumerate(PHASES, start=1):
        mask = codes == code
        if mask.any():
            out[phase] = float(totals[mask].mean())
    return out


def _step_range(series: RunSeries, s0: int, s1: int) -> np.ndarray:
    i0, i1 = series.steps.index(s0), series.steps.index(s1)
    return series.step_column("step_ms", i0, i1).astype(np.float64)


def toggle_effect(series: RunSeries, event: RunEvent, window: int = WINDOW_STEPS) -> ToggleEffect:
    """The toggle takes effect at the start of `event.step`: before = the `window` steps
    before it, after = `event.step` and the steps that follow (as many as exist yet)."""
    s = event.step
    before_ms = _step_range(series, s - window, s)
    after_ms = _step_range(series, s, s + window)
    return ToggleEffect(
        event=event, before_steps=len(before_ms), after_steps=len(after_ms),
        memory_before=_phase_means(series, s - window, s),
        memory_after=_phase_means(series, s, s + window),
        step_ms_before=float(before_ms.mean()) if len(before_ms) else math.nan,
        step_ms_after=float(after_ms.mean()) if len(after_ms) else math.nan,
        window=window, last_step=series.last_step,
    )  # fmt: skip
