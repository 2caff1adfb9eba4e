"""Figure 5: `python main.py` to the first painted window.

Each launch is a fresh interpreter running benchmarks/_startup_probe.py, which runs main.py
unchanged and reports when the main window's first paint has finished, and whether torch
was imported by then (nothing the first window shows needs it). The clock starts just
before the process is spawned, so interpreter start-up and every import count.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks._common import Figure, Settings, median

LIMIT_S = 1.5
PROBE = Path(__file__).with_name("_startup_probe.py")


def launch_once() -> dict[str, float]:
    env = dict(os.environ, QT_QPA_PLATFORM=os.environ.get("QT_QPA_PLATFORM", "offscreen"))
    t0 = time.time()
    proc = subprocess.run([sys.executable, str(PROBE)], capture_output=True, text=True,
                          env=env, timeout=120, cwd=PROBE.parent.parent)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("STARTUP ")), "")
    if "painted=" not in line:
        raise RuntimeError(f"no first paint reported (exit {proc.returncode}): "
                           f"{proc.stdout[-500:]} {proc.stderr[-1500:]}")
    marks = dict(part.split("=") for part in line.split()[1:])
    return {"total": float(marks["painted"]) - t0,
            "interpreter": float(marks["probe"]) - t0,
            "to_exec": float(marks["exec"]) - float(marks["probe"]),
            "paint": float(marks["painted"]) - float(marks["exec"]),
            "torch": float(marks["torch"])}


def run(s: Settings) -> list[Figure]:
    launch_once()  # warm the file cache: the figure is a warm start, as a user's second one
    runs = [launch_once() for _ in range(1 if s.quick else 7)]
    totals = [r["total"] for r in runs]
    part = {k: median([r[k] for r in runs]) for k in ("interpreter", "to_exec", "paint")}
    return [
        Figure("startup_first_paint_s", "python main.py -> first painted window",
               median(totals), "s", LIMIT_S,
               note=f"median of {len(runs)} warm launches; max {max(totals):.2f} s"),
        Figure("startup_imports_and_window_s", "  of which imports + building the window",
               part["to_exec"], "s", note=f"interpreter start {part['interpreter']:.2f} s"),
        Figure("startup_first_paint_after_exec_s", "  of which event loop -> painted",
               part["paint"], "s"),
        Figure("startup_torch_before_paint", "  launches with torch imported before the paint",
               sum(r["torch"] for r in runs), "", 0,
               note=f"of {len(runs)}; torch loads after the first paint, off the GUI thread"),
    ]
