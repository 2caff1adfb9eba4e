"""Watching a user's script: its step time watched vs unwatched, side by side, on the two
examples (each side in its own process, alternating); and the app's follow latency, from a
step row written to the plot holding it (run with the GUI group, benchmarks/gui_load.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._common import ROOT, Figure, Settings, percentile
from memlens.core.stats import ratio_of_medians

EXAMPLES = {"rnn_lm": [], "dcgan": ["--sample-every", "10"]}
OVERHEAD_LIMIT = 1.05
FOLLOW_LIMIT_MS = 250.0


def _step_times(cmd: list[str], times: Path, threads: int) -> list[tuple[float, float]]:
    """Each step's (wall ms, the training thread's CPU ms), as the script timed them."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONPATH=str(ROOT))
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return [(float(w), float(c)) for w, c in
            (line.split() for line in times.read_text().splitlines() if line.strip())]


def overhead(s: Settings) -> list[Figure]:
    steps, skip = (40, 10) if s.quick else (150, 20)
    reps = max(2, s.reps // 5) if not s.quick else 2
    out = []
    for name, extra in EXAMPLES.items():
        script = str(ROOT / "examples" / f"{name}.py")
        plain: list[tuple[float, float]] = []
        watched: list[tuple[float, float]] = []
        with tempfile.TemporaryDirectory(prefix="memlens-watch-bench-") as tmp:
            t = Path(tmp) / "times.txt"
            args = ["--steps", str(steps), "--times", str(t), *extra]
            for rep in range(reps):  # alternate which side goes first
                sides = [("plain", [sys.executable, script, *args]),
                         ("watched", [sys.executable, str(ROOT / "main.py"), "watch", script,
                                      "--out", str(Path(tmp) / f"run{rep}"), "--", *args])]
                for side, cmd in (sides if rep % 2 == 0 else sides[::-1]):
                    (plain if side == "plain" else watched).extend(
                        _step_times(cmd, t, s.threads)[skip:])
        for col, what, suffix, limit in ((0, "step time", "", OVERHEAD_LIMIT),
                                         (1, "step thread CPU time", "_cpu", None)):
            a, b = [x[col] for x in plain], [x[col] for x in watched]
            ci = ratio_of_medians(a, b)
            out.append(Figure(
                f"watch_overhead_{name}{suffix}", f"watch: {name} {what}, watched / plain",
                ci.ratio, "x", limit,
                note=f"95% CI {ci.low:.3f}-{ci.high:.3f}; {reps} processes a side, "
                     f"{steps - skip} steps each; median plain {percentile(a, 50):.2f} ms, "
                     f"watched {percentile(b, 50):.2f} ms"))
    return out


def follow_latency(s: Settings) -> list[Figure]:
    """A RunWriter in this process appends step rows; the window follows the folder."""
    from PySide6.QtWidgets import QApplication

    from memlens.app.main_window import MainWindow
    from memlens.core.records import MemorySample, StepRecord
    from memlens.core.run_files import RunWriter

    app = QApplication.instance() or QApplication([])
    lat: list[float] = []
    with tempfile.TemporaryDirectory(prefix="memlens-follow-bench-") as tmp:
        w = RunWriter(Path(tmp) / "run")
        w.on_start({"source": "watch", "pid": os.getpid()})
        window = MainWindow(runs_dir=None)
        window.show()
        window.follow_run(Path(tmp) / "run")
        curve = window.plots.loss_plot.curves["loss"]
        for i in range(10 if s.quick else 40):
            w.on_sample(MemorySample(i, "forward", i, 100, 0, 0, 10, 0))
            t0 = time.perf_counter()
            w.on_step(StepRecord(i, i, 1.0, 1.0, 1, 0, 0, 0, 0, 0, 100, 110, None, 1, 10, 0))
            while len(curve.getData()[0] if curve.getData()[0] is not None else ()) < i + 1:
                app.processEvents()
                time.sleep(0.001)
                if time.perf_counter() - t0 > 5:
                    break
            lat.append((time.perf_counter() - t0) * 1e3)
            time.sleep(0.05)  # rows arrive at step rate, not all at once
        window.close()
        w.on_finish({})
    return [Figure("follow_latency_p50_ms", "follow: row written -> plot, median",
                   percentile(lat, 50), "ms", FOLLOW_LIMIT_MS,
                   note=f"max {max(lat):.0f} ms over {len(lat)} rows"),
            Figure("follow_latency_max_ms", "follow: row written -> plot, max", max(lat), "ms",
                   FOLLOW_LIMIT_MS)]


def run(s: Settings) -> list[Figure]:
    return overhead(s)  # the follow latency is measured with the GUI group (gui_load)
