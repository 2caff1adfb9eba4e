"""What every benchmark group shares: a figure row, interleaved timing, percentiles, child
processes."""

from __future__ import annotations

import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def run_child(module_args: list[str]) -> tuple[int, Any]:
    """`python -m <module_args> --out FILE` in a new process, from the repository root:
    (its exit status, the JSON it wrote to FILE, or None where it wrote none or failed)."""
    with tempfile.TemporaryDirectory(prefix="memlens-bench-") as tmp:
        out = Path(tmp) / "out.json"
        rc = subprocess.call([sys.executable, "-m", *module_args, "--out", str(out)], cwd=ROOT)
        if rc != 0 or not out.is_file():
            return rc, None
        return rc, json.loads(out.read_text(encoding="utf-8"))


@dataclass
class Figure:
    """One row of the table and one key of the JSON: a measured number and its target.

    `limit` with `better` ("lower" or "higher") makes it a target; without a limit the row is
    context only (printed, never hit or missed).
    """

    name: str
    label: str
    value: float
    unit: str = ""
    limit: float | None = None
    better: str = "lower"
    note: str = ""

    @property
    def hit(self) -> bool | None:
        if self.limit is None:
            return None
        if self.value is None or math.isnan(self.value):
            return False
        return self.value <= self.limit if self.better == "lower" else self.value >= self.limit

    @property
    def target(self) -> str:
        if self.limit is None:
            return ""
        sign = "<=" if self.better == "lower" else ">="
        return f"{sign} {fmt(self.limit, self.unit)}"

    @property
    def verdict(self) -> str:
        return {None: "", True: "hit", False: "MISS"}[self.hit]


@dataclass
class Settings:
    quick: bool
    threads: int
    reps: int  # interleaved repetitions (after warm-up) for ratios
    warmup: int


def fmt(value: float, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if unit == "x":
        return f"{value:.3f}x"
    if unit == "B":
        return human_bytes(value)
    if unit in ("ms", "s", "Hz", "B/row", "steps/s", "rows/s", "nodes"):
        digits = 0 if abs(value) >= 1000 else (1 if abs(value) >= 10 else 2)
        return f"{value:,.{digits}f} {unit}"
    if float(value).is_integer():
        return f"{int(value):,}{(' ' + unit) if unit else ''}"
    return f"{value:.3g}{(' ' + unit) if unit else ''}"


def human_bytes(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), linear between ranks; nan for no values."""
    if not values:
        return math.nan
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


def interleaved(variants: dict[str, Callable[[], float]], reps: int, warmup: int,
                seed: int = 0) -> dict[str, list[float]]:
    """Run each variant's block once per round, rounds after `warmup` recorded.

    Each round runs the variants in a new order, shuffled (seeded: the same orders every
    run). A rotation (A B C, B C A, ...) would change who runs first but never who runs
    right before whom: B would always follow A, and whatever A leaves behind (garbage for
    the collector, a changed heap, evicted caches) would always fall on B. Shuffled, every
    variant follows every other in turn, and contention from other processes falls on
    every variant alike. Each block returns its own measurement (seconds per step);
    returns the lists by name.
    """
    rng = random.Random(seed)
    names = list(variants)
    out: dict[str, list[float]] = {n: [] for n in names}
    for r in range(warmup + reps):
        order = names[:]
        rng.shuffle(order)
        for name in order:
            value = variants[name]()
            if r >= warmup:
                out[name].append(value)
    return out


def paired_ratios(times: dict[str, list[float]], num: str, den: str) -> list[float]:
    """Per-round ratios num/den: each pair ran in the same round, under the same load."""
    return [a / b for a, b in zip(times[num], times[den], strict=True) if b > 0]


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "unknown"


def machine() -> dict[str, str]:
    import platform

    return {"nproc": str(os.cpu_count()), "cpu": cpu_model(), "python": platform.python_version(),
            "platform": platform.platform(), "load_avg": " ".join(
                f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else ""}



class SlotErrors:
    """Collects exceptions that Qt reports through sys.excepthook (an exception in a slot
    does not reach the caller), so a benchmark can stop and say what failed."""

    def __init__(self) -> None:
        import sys

        self.errors: list[BaseException] = []
        self._sys = sys
        self._previous = sys.excepthook

    def __enter__(self) -> SlotErrors:
        def hook(kind, value, tb) -> None:
            self.errors.append(value)
            self._previous(kind, value, tb)

        self._sys.excepthook = hook
        return self

    def __exit__(self, *exc) -> None:
        self._sys.excepthook = self._previous

    def check(self, what: str) -> None:
        if self.errors:
            e = self.errors[0]
            raise RuntimeError(f"{what} raised {type(e).__name__}: {e}") from e


class GcPauses:
    """Records Python's garbage-collector pauses (any thread; a collection holds the GIL, so
    it stops the GUI thread too): [(generation, ms)]."""

    def __init__(self) -> None:
        self.pauses: list[tuple[int, float]] = []
        self._t0 = 0.0

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            self.pauses.append((info.get("generation", -1), (time.perf_counter() - self._t0) * 1e3))

    def __enter__(self) -> GcPauses:
        import gc

        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc) -> None:
        import gc

        gc.callbacks.remove(self._callback)

    def text(self) -> str:
        if not self.pauses:
            return "no GC pauses"
        worst = max(self.pauses, key=lambda p: p[1])
        full = sum(1 for g, _ in self.pauses if g == 2)
        return (f"{len(self.pauses)} GC pauses ({full} full), longest {worst[1]:.0f} ms "
                f"(gen {worst[0]})")


def as_launched(window) -> None:
    """Finish start-up as memlens.app.window.launch.launch() does after making the window (it then
    enters the event loop, which a benchmark runs itself): the same function, so the
    benchmark cannot drift from the app (show, GC freeze, GIL switch interval)."""
    from memlens.app.window.launch import finish_start_up

    finish_start_up(window)


def start_up_settled(window) -> bool:
    """Whether the work the window defers past its first paint (the AMP check, which imports
    torch) has answered: a window that has shown a long run did that long before, and a
    torch import overlapping a measurement would compete with it for the GIL."""
    amp = window.amp_support
    return amp.asked > 0 and amp.answered == amp.asked
