"""Pinned runs: finished or loaded runs kept on the plots, faded, to compare against."""

from __future__ import annotations

from dataclasses import dataclass

from memlens.app.series.run_series import RunSeries
from memlens.core.model_file import preset_label

# Pinned runs, in pin order; drawn faded and dashed so the live run stays in front.
PIN_COLORS: tuple[str, ...] = ("#9467BD", "#17BECF", "#BCBD22", "#E377C2", "#7F7F7F")


@dataclass
class PinnedRun:
    pin_id: int
    name: str
    series: RunSeries
    color: str
    visible: bool = True
    # A name its pinner gave (the Lessons tab's "mlp zero_grad: zeros"): kept, never
    # replaced by the settings the pins differ in.
    named: bool = False

    @property
    def label(self) -> str:
        """Short, for legends; the pins list shows it with the full name."""
        return f"pin {self.pin_id + 1}"


def run_name(meta: dict, steps: int) -> str:
    """A short name for a run: preset and the techniques that differ from the defaults."""
    from memlens.core.config import TechniqueToggles

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
    from memlens.core.options import format_value

    return format_value(value)


def _settings(meta: dict) -> dict:
    """A run's settings as one flat dict (techniques beside the run options)."""
    config = dict(meta.get("config") or {})
    techniques = config.pop("techniques", None) or {}
    schedule = config.pop("schedule", None) or []
    flat = {**config, **techniques}
    flat["schedule"] = tuple(str(c) for c in schedule)  # "50:zero_grad=off" strings
    return flat


def compare_names(metas: list[dict], steps: list[int]) -> list[str]:
    """Names for runs shown together: each says the settings in which the runs differ
    (`mlp zero_grad=off batch_size=16`), so two pins never read the same. With one run, or
    runs that differ in nothing but their length, each run is named by run_name."""
    flats = [_settings(m) for m in metas]
    keys: list[str] = []
    for flat in flats:
        keys += [k for k in flat if k not in keys]
    differ = [k for k in keys if k not in ("preset", "steps")
              and len({repr(f.get(k)) for f in flats}) > 1]
    if len(metas) < 2 or (not differ and len({f.get("preset") for f in flats}) == 1):
        return [run_name(m, n) for m, n in zip(metas, steps, strict=True)]
    names = []
    for flat, n in zip(flats, steps, strict=True):
        parts = [preset_label(str(flat.get("preset", "run")))]
        for k in differ:
            v = flat.get(k)
            if k == "schedule":
                parts.append("at " + ", ".join(v) if v else "no schedule")
            else:
                parts.append(f"{k}={_text(v)}")
        names.append(f"{' '.join(parts)} ({n} steps)")
    return names


def pin_color(pin_id: int) -> str:
    return PIN_COLORS[pin_id % len(PIN_COLORS)]
