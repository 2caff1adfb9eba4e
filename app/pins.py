"""Pinned runs: finished or loaded runs kept on the plots, faded, to compare against."""

from __future__ import annotations

from dataclasses import dataclass

from app.run_series import RunSeries
from core.model_file import preset_label

# Pinned runs, in pin order; drawn faded and dashed so the live run stays in front.
PIN_COLORS: tuple[str, ...] = ("#9467BD", "#17BECF", "#BCBD22", "#E377C2", "#7F7F7F")


@dataclass
class PinnedRun:
    pin_id: int
    name: str
    series: RunSeries
    color: str
    visible: bool = True

    @property
    def label(self) -> str:
        """Short, for legends; the pins list shows it with the full name."""
        return f"pin {self.pin_id + 1}"


def run_name(meta: dict, steps: int) -> str:
    """A short name for a run: preset and the techniques that differ from the defaults."""
    from core.config import TechniqueToggles

    config = meta.get("config") or {}
    techniques = config.get("techniques") or {}
    defaults = TechniqueToggles().to_dict()
    changed = [f"{k}={_text(v)}" for k, v in techniques.items() if defaults.get(k) != v]
    schedule = config.get("schedule") or []
    parts = [preset_label(str(config.get("preset", "run"))), *changed]
    if schedule:
        parts.append(f"{len(schedule)} scheduled")
    return f"{' '.join(parts)} ({steps} steps)"


def _text(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def pin_color(pin_id: int) -> str:
    return PIN_COLORS[pin_id % len(PIN_COLORS)]
