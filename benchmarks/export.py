"""Figure 6: a 100,000-step run to every export format.

The run is made from a real one: the default preset runs 22 steps through memlens.core.loop, and one
eval period of it (10 steps, one with eval) is repeated to 100,000 steps with times, steps
and storage ids shifted, so the exporters see the real loop's rows at the real rate. Twice:
a light-mode run (every format it can give: the snapshot needs precise mode) and a precise
run (every format). Each is exported as the app's File > Export does it, with every choice
ticked (run files, PNG and SVG of each plot, snapshot, trace, timeline; not the
allocations.csv text, which is a choice made on request, as it was not a part before); the
writers it calls are timed as they run, in wall and in their thread's CPU seconds. The run
files are copied by a helper thread beside the rest, so that part overlaps the others.

A run in the app streams its run files into its folder as it goes (RunWriter), and a run
opened from disk has its folder too; Export copies those files when they hold what the
history holds. So before the timed export the run folder is written as the run would have
left it (write_history: the same bytes RunWriter streams), and the window knows it as the
run's folder, as File > Open leaves it. That write is timed too and reported as context:
it is what Export costs for a run kept in memory only (no runs folder).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

from benchmarks._common import Figure, Settings

STEPS = 100_000
QUICK_STEPS = 2_000
LIMIT_S = 10.0
PERIOD = 10  # one eval period of the default config (eval_every=10)
FIRST = 10  # the repeated steps start here, after the first steps' one-off allocations


def real_run(precise: bool):
    from memlens.core.config import RunConfig
    from memlens.core.history import RunHistory
    from memlens.core.loop import run_training

    history = RunHistory()
    config = RunConfig(device="cpu", steps=FIRST + PERIOD + 2, precise=precise)
    run_training(config, sink=history)
    return history


def tiled(real, steps: int):
    """`real` with its steps [FIRST, FIRST + PERIOD) repeated up to `steps` steps."""
    import numpy as np

    from memlens.core.history import RunHistory

    copies = (steps - FIRST) // PERIOD
    out = RunHistory()
    out.meta = dict(real.meta)
    out.frames = list(real.frames)
    out._frame_ids = {f: i for i, f in enumerate(out.frames)}
    for e in real.events():
        if e.step < FIRST:
            out.on_event(e)
    times = real.steps.column("time_s")
    period_s = float(times[FIRST + PERIOD] - times[FIRST])
    for src, dst in ((real.steps, out.steps), (real.samples, out.samples)):
        rows = src.rows()
        step = rows[:, src.index["step"]]
        block = rows[(step >= FIRST) & (step < FIRST + PERIOD)]
        many = np.tile(block, (copies, 1))
        shift = np.repeat(np.arange(copies, dtype=np.float64), len(block))
        many[:, src.index["step"]] += shift * PERIOD
        many[:, src.index["time_s"]] += shift * period_s
        if "x" in src.index:
            many[:, src.index["x"]] += shift * PERIOD
        dst.extend(np.vstack([rows[step < FIRST], many]))
    if len(real.allocs):
        rows = real.allocs.rows()
        col = real.allocs.index
        step = rows[:, col["step"]]
        block = rows[(step >= FIRST) & (step < FIRST + PERIOD)]
        new = block[block[:, col["action"]] == 0, col["storage"]]
        first_id, stride = new.min(), len(new)
        many = np.tile(block, (copies, 1))
        shift = np.repeat(np.arange(copies, dtype=np.float64), len(block))
        many[:, col["t_us"]] += shift * round(period_s * 1e6)
        many[:, col["step"]] += shift * PERIOD
        # Storages born in this period or the one before move with the copy (a free of last
        # period's gradient pairs with the previous copy); long-lived ones keep their ids.
        moves = many[:, col["storage"]] >= first_id - stride
        many[moves, col["storage"]] += shift[moves] * stride
        out.allocs.extend(np.vstack([rows[step < FIRST], many]))
    out.summary = dict(real.summary or {}, steps_done=len(out.steps))
    return out


class _Breakdown:
    """Times the writers File > Export calls, by wrapping them where app.exporting finds them
    (so the run is exported once): wall seconds, and CPU seconds of the thread that ran it."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self._undo: list = []

    def wrap(self, owner, name: str, label) -> None:
        original = getattr(owner, name)

        def timed(*args, **kwargs):
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                return original(*args, **kwargs)
            finally:
                key = label(*args, **kwargs)
                self.seconds[key] = self.seconds.get(key, 0.0) + time.perf_counter() - t0
                self.cpu[key] = self.cpu.get(key, 0.0) + time.thread_time() - c0

        setattr(owner, name, timed)
        self._undo.append((owner, name, original))

    def __enter__(self) -> _Breakdown:
        import memlens.app.window.exporting as exporting
        import memlens.core.exports as exports

        self.wrap(exporting, "export_run_files", lambda *a, **k: "run files")
        self.wrap(exporting, "_export_scene", lambda widget, path, kind: f"plots {kind}")
        self.wrap(exports, "export_run", lambda h, folder, formats, **k: "+".join(formats))
        # ... and inside export_run, each writer
        from memlens.core.exports import _allocs, chrome_trace, memory_timeline, snapshot

        for owner, name in ((_allocs, "allocation_events"), (snapshot, "write_snapshot"),
                            (chrome_trace, "write_chrome_trace"),
                            (memory_timeline, "write_memory_timeline")):
            self.wrap(owner, name, lambda *a, name=name, **k: f"  {name}")
        return self

    def __exit__(self, *exc) -> None:
        for owner, name, original in reversed(self._undo):
            setattr(owner, name, original)

    def text(self) -> str:
        return ", ".join(f"{k} {v:.2f} s (cpu {self.cpu[k]:.2f})" for k, v in
                         sorted(self.seconds.items(), key=lambda kv: -kv[1]))


def _run_folder(history, folder: Path) -> float:
    """Leave the run folder as the run would have streamed it; the seconds it took."""
    from memlens.core.runfolder.history_files import write_history

    t0 = time.perf_counter()
    write_history(history, folder)
    return time.perf_counter() - t0


def _app_export(window, history, folder: Path, run_folder: Path
                ) -> tuple[float, int, _Breakdown]:
    from memlens.app.window.exporting import PNG, RUN_FILES, SVG, extra_formats
    from memlens.core.exports import ON_REQUEST

    window.show_history(history)  # what File > Open does once the run is loaded
    window.loaded_from = run_folder  # ... and the folder it was opened from
    choices = {RUN_FILES, PNG, SVG, *(f for f in extra_formats() if f not in ON_REQUEST)}
    with _Breakdown() as parts:
        t0 = time.perf_counter()
        written = window.export_to(folder, choices)
        seconds = time.perf_counter() - t0
    return seconds, len(written), parts


def _sizes(folder: Path) -> str:
    files = sorted(p for p in folder.iterdir() if p.is_file())
    return ", ".join(f"{p.name} {p.stat().st_size / 1e6:.0f} MB" for p in files
                     if p.stat().st_size >= 1e6) or "all under 1 MB"


def run(s: Settings) -> list[Figure]:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication([])
    from memlens.app.window.main_window import MainWindow
    from memlens.core.config import RunConfig

    steps = QUICK_STEPS if s.quick else STEPS
    scale = "" if steps == STEPS else f" (quick: {steps:,} steps, not {STEPS:,})"
    window = MainWindow(RunConfig(), runs_dir=None)
    window.show()
    app.processEvents()
    out: list[Figure] = []
    tmp = Path(tempfile.mkdtemp(prefix="memlens-export-"))
    try:
        for mode in ("light", "precise"):
            history = tiled(real_run(mode == "precise"), steps)
            what = (f"{len(history.steps):,} steps, {len(history.samples):,} samples, "
                    f"{len(history.allocs):,} alloc events")
            unsaved_s = _run_folder(history, tmp / f"{mode}-run")
            app_s, n, parts = _app_export(window, history, tmp / f"{mode}-app",
                                          tmp / f"{mode}-run")
            sizes = _sizes(tmp / f"{mode}-app")
            out += [
                Figure(f"export_{mode}_all_s", f"export {mode} run, every format (app)", app_s,
                       "s", LIMIT_S, note=f"{n} files; {what}{scale}"),
                Figure(f"export_{mode}_bytes", f"  {mode}: bytes written (context)",
                       sum(p.stat().st_size for p in (tmp / f"{mode}-app").iterdir()), "B",
                       note=sizes),
                Figure(f"export_{mode}_parts_s", f"  {mode}: slowest part (context)",
                       max(parts.seconds.values(), default=0.0), "s", note=parts.text()),
                Figure(f"export_{mode}_unsaved_run_files_s",
                       f"  {mode}: run files of a run kept in memory only (context)", unsaved_s,
                       "s", note="written from the history: no run folder to copy from"),
            ]
            for name in (f"{mode}-app", f"{mode}-run"):
                shutil.rmtree(tmp / name, ignore_errors=True)
            del history
    finally:
        window.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return out
