"""The two watched runs `fix` compares: the user's script and its patched copy, each as
`python -m memlens watch --stop-after N` in a process of its own (the same arguments, the
same working folder, one after the other), and the figures read back from their folders.

Figures: the peak (steps.csv peak_bytes, the largest), what is held across steps at the end
(retained_bytes: saved for backward by earlier steps and still alive), the most a step's
forwards saved for backward (saved_bytes, the largest), the growth a step
(the least-squares slope of each step's end total, allocated_bytes), the graph's nodes at
the last step, and the median step time with its 95% interval (core.stats, the first step
left out: it warms caches up).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from memlens.core.history import STEP_COLUMNS
from memlens.core.runfolder.format import RunFolderError
from memlens.core.runfolder.reader import read_header_and_steps
from memlens.core.stats import RatioCI, median_interval, ratio_of_medians

WARMUP_STEPS = 1  # left out of step times
_COL = {c: i for i, c in enumerate(STEP_COLUMNS)}


@dataclass
class WatchedRun:
    folder: Path
    exit_code: int
    stdout: str
    stderr: str
    doc: dict | None = None  # run.json, where the folder could be read
    steps: np.ndarray | None = None  # steps.csv as STEP_COLUMNS

    @property
    def diagnoses(self) -> list[dict]:
        events = (self.doc or {}).get("events") or []
        return [e for e in events if e.get("kind") == "diagnosis"]

    @property
    def nothing_found(self) -> bool:
        """No model and no optimizer found: a script the watch sees nothing in."""
        events = (self.doc or {}).get("events") or []
        return self.doc is None or any(e.get("key") == "nothing found" for e in events)

    @property
    def step_count(self) -> int:
        return 0 if self.steps is None else len(self.steps)

    def column(self, name: str) -> np.ndarray:
        if self.steps is None or not len(self.steps):
            return np.empty(0)
        return self.steps[:, _COL[name]]

    def last_error_line(self) -> str:
        lines = [ln for ln in self.stderr.splitlines() if ln.strip()
                 and not ln.startswith("memlens watch:")]
        return lines[-1].strip() if lines else f"exit code {self.exit_code}"


def child_env(script_dir: Path) -> dict[str, str]:
    """The environment of a watched child: this one, with the script's folder on the path
    (its copy under fixed/ imports the modules beside the original) and memlens's own
    (a child imports the memlens that runs here)."""
    env = dict(os.environ)
    own = str(Path(__file__).resolve().parents[3])  # the folder that holds memlens/
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    parts += [p for p in (str(script_dir), own) if p not in parts]
    env["PYTHONPATH"] = os.pathsep.join(parts)
    return env


def watch_run(script: Path, args: list[str], folder: Path, steps: int, *, cwd: Path,
              script_dir: Path) -> WatchedRun:
    """Run `script ARGS` under `main.py watch --stop-after steps --out folder` from `cwd`;
    its printed output is kept beside the folder (`<folder>.stdout`, `<folder>.stderr`)."""
    # every step's detail: a fix's figures are compared step by step, none carried
    cmd = [sys.executable, "-m", "memlens", "watch", "--out", str(folder), "--stop-after",
           str(steps), "--detail", "every", str(script), "--", *args]
    proc = subprocess.run(cmd, cwd=cwd, env=child_env(script_dir), capture_output=True,
                          text=True, errors="replace")
    for ext, text in (("stdout", proc.stdout), ("stderr", proc.stderr)):
        folder.with_name(f"{folder.name}.{ext}").write_text(text, encoding="utf-8")
    run = WatchedRun(folder, proc.returncode, proc.stdout, proc.stderr)
    # no folder where it ended before it trained (nothing kept) or could not start
    with contextlib.suppress(RunFolderError, OSError):
        run.doc, run.steps = read_header_and_steps(folder)
    return run


def figures(run: WatchedRun) -> dict:
    """The run's memory and time figures (fix.json's `before` / `after`)."""
    n = run.step_count
    peak = run.column("peak_bytes")
    retained = run.column("retained_bytes")
    total = run.column("allocated_bytes")
    nodes = run.column("graph_nodes")
    saved = run.column("saved_bytes")
    ms = run.column("step_ms")[WARMUP_STEPS:]
    median, low, high = median_interval(ms)
    return {
        "steps": n, "exit_code": run.exit_code,
        "peak_bytes": _int(np.nanmax(peak)) if n else None,
        "held_bytes": _int(retained[-1]) if n else None,
        "saved_bytes": _int(np.nanmax(saved)) if n else None,
        "growth_bytes_per_step": growth(total),
        "graph_nodes": _int(nodes[-1]) if n else None,
        "step_ms": {"median": _num(median), "ci_low": _num(low), "ci_high": _num(high),
                    "confidence": 0.95, "n": int(np.isfinite(ms).sum())},
    }


def growth(total: np.ndarray) -> float | None:
    """Bytes a step: the least-squares slope of each step's end total, the first step left
    out (it makes the optimizer's state); None with fewer than 3 steps after it."""
    y = np.asarray(total[WARMUP_STEPS:], dtype=float)
    keep = np.isfinite(y)
    if keep.sum() < 3:
        return None
    x = np.arange(len(y), dtype=float)[keep]
    slope = np.polyfit(x, y[keep], 1)[0]
    return round(float(slope), 1) + 0.0  # never -0.0


def step_time_ratio(before: WatchedRun, after: WatchedRun) -> RatioCI:
    """after / before, the ratio of the median step times with its 95% interval."""
    return ratio_of_medians(before.column("step_ms")[WARMUP_STEPS:],
                            after.column("step_ms")[WARMUP_STEPS:])


def printed_difference(before: WatchedRun, after: WatchedRun) -> str | None:
    """None where the script printed the same lines and ended the same way, else the first
    difference, in one line."""
    a, b = before.stdout.splitlines(), after.stdout.splitlines()
    for i, (x, y) in enumerate(zip(a, b, strict=False), 1):
        if x != y:
            return f"printed line {i} differs: {x.strip()!r} -> {y.strip()!r}"
    if len(a) != len(b):
        return f"{len(a)} printed lines before, {len(b)} after"
    if before.exit_code != after.exit_code:
        return f"exit code {before.exit_code} before, {after.exit_code} after"
    return None


def _int(x) -> int | None:
    return int(x) if x is not None and np.isfinite(x) else None


def _num(x: float) -> float | None:
    return round(float(x), 4) if np.isfinite(x) else None
