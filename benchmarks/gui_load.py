"""Figure 2: the real main window, offscreen, under a producer at 5,000 steps/s.

The window runs a "training" through its own RunSession and worker thread; the train
function (memlens.core.synthetic's producer, no torch) first puts 1,000,000 phase samples into the
session's history, waits until the window has drawn them, then sends 5,000 steps a second,
each with its four phase samples, for 20 s (quick: 2 s). Meanwhile:

- event filters on two objects time the window's refresh timer (the ~30 Hz slot that pulls
  new rows and calls setData) and each top-level paint (the backing store painting what
  changed); a frame is one refresh plus the paints up to the next, and the GUI thread's CPU
  clock is read at each refresh. With $MEMLENS_BENCH_EVENTS=1 every event is timed through
  QApplication.notify instead (and slow ones named), at the cost `_probe_app` describes;
- a 1 ms precise QTimer notes the gaps between its ticks: the longest is the longest time
  the event loop did nothing else;
- at the end the producer stops and the window takes its last frame: the rows sent must all
  be in the history, and all of them in the window's plot series.

Then the lab's own cost of drawing (lab_step_refreshing): a new window trains the mlp preset
for real (torch, the app's worker thread) and its refresh timer is started and stopped in
alternating blocks; each pair of neighbouring blocks gives the ratio of their steps' wall
time (from the records' time_s), refreshing over stopped. The GUI thread's Python holds the
GIL the training thread needs between its ops, so every frame's Python is the training's
time too (2026-12-07: 1.13-1.14x at 30 Hz with the GUI thread at 11-14% CPU, the same with
one torch thread, so the GIL and not the cores).
"""

from __future__ import annotations

import itertools
import os
import threading
import time

from benchmarks._common import (
    Figure,
    GcPauses,
    Settings,
    as_launched,
    median,
    percentile,
    start_up_settled,
)
from benchmarks.watch import follow_latency

STEPS_PER_S = 5000
PRELOAD_SAMPLES = 1_000_000
PHASES = 4  # zero_grad, forward, backward, optimizer (no eval steps in this run)
PAINT_P99_MS = 16.0
STALL_MS = 50.0
REFRESH_HZ = 30.0
REFRESH_TOLERANCE = 0.95  # "30 Hz held": at least 95% of the nominal rate
LAB_BLOCK_S = 1.5  # a block of the lab's steps, refreshing or not
LAB_PAIRS_QUICK, LAB_PAIRS = 4, 12
PROFILE_ENV = "MEMLENS_BENCH_PROFILE"
SLOW_MS = 25.0  # events slower than this are named in the stall figure's note
TRACE_ENV = "MEMLENS_BENCH_EVENTS"


class _CountingSink:
    """Passes the producer's records to the session's sink, steps shifted to follow the
    preloaded ones; counts what it sent."""

    def __init__(self, sink, offset: int) -> None:
        self.sink, self.offset = sink, offset
        self.samples = self.steps = 0

    def on_start(self, meta) -> None:
        pass  # the preload already started the run's history

    def on_samples(self, items) -> None:
        from memlens.core.records import MemorySample, samples_of

        shifted = [MemorySample(s.step + self.offset, s.phase, s.time_s, s.params, s.grads,
                                s.optimizer, s.activations, s.other)
                   for s in samples_of(items) if s.phase != "start"]
        self.sink.on_samples(shifted)
        self.samples += len(shifted)

    def on_steps(self, rows) -> None:
        for r, items in rows:
            self.on_samples(items)
            r.step += self.offset
            self.sink.on_steps([(r, ())])
            self.steps += 1

    def on_event(self, e) -> None:
        e.step += self.offset
        self.sink.on_event(e)

    def on_graph(self, snapshot) -> None:
        self.sink.on_graph(snapshot)

    def on_finish(self, summary) -> None:
        self.sink.on_finish(summary)


class _Producer:
    """The window's train function: preload, wait for the go, produce at a fixed rate."""

    def __init__(self, preload_steps: int) -> None:
        self.preload_steps = preload_steps
        self.preloaded = threading.Event()
        self.go = threading.Event()
        self.counter: _CountingSink | None = None
        self.t_start = self.t_end = 0.0

    def __call__(self, config, controls, sink, on_error="pause"):
        from memlens.core.history import RunHistory
        from memlens.core.synthetic import fill_history, synthetic_training

        # the session's sink is a FanOut with the history first (app.run_session.session_sink)
        history = next(x for x in getattr(sink, "sinks", [sink]) if isinstance(x, RunHistory))
        fill_history(history, self.preload_steps)
        self.preloaded.set()
        while not self.go.wait(0.05):
            if controls.stop_requested:
                return None
        self.counter = _CountingSink(sink, self.preload_steps)
        self.t_start = time.perf_counter()
        try:
            return synthetic_training(config, controls, self.counter, on_error=on_error,
                                      steps_per_s=STEPS_PER_S)
        finally:
            self.t_end = time.perf_counter()


def tracing() -> bool:
    """$MEMLENS_BENCH_EVENTS=1: name every slow event, at a cost (see _probe_app)."""
    return os.environ.get(TRACE_ENV, "") not in ("", "0")


def _probe_app():
    """The QApplication a GUI benchmark runs: a plain one, as the app makes it, unless
    `tracing()`. Then it is a subclass whose Python `notify` times every event and names the
    slow ones; but that runs Python, under the GIL, for every event Qt delivers (each child
    widget's paint included), and while another thread runs Python each of those calls can
    wait out a GIL switch interval. It measures the probe as much as the app: the all-nodes
    graph's longest stall read 55 ms traced and 18-33 ms plain. The frame figures come from
    `_FrameProbe` instead, which runs Python only for the refresh and the window's paints."""
    from PySide6.QtCore import QEvent, QTimer
    from PySide6.QtWidgets import QApplication

    if QApplication.instance() is not None:
        return QApplication.instance()
    if not tracing():
        return QApplication([])

    class ProbeApp(QApplication):
        def __init__(self, argv) -> None:
            super().__init__(argv)
            self.recording = False
            self._depth = 0
            self.slow: list[tuple[float, str, float]] = []  # (ms, what, start)
            # (start, wall ms, GUI-thread CPU ms, kind and receiver) of every outermost event
            self.busy: list[tuple[float, float, float, str]] = []
            self.stall_timer: QTimer | None = None

        def notify(self, obj, event):
            # Any outermost event slower than SLOW_MS is kept by kind and receiver.
            if not self.recording:
                return super().notify(obj, event)
            kind = event.type()
            self._depth += 1
            c0 = time.thread_time()
            t0 = time.perf_counter()
            try:
                return super().notify(obj, event)
            finally:
                ms = (time.perf_counter() - t0) * 1e3
                self._depth -= 1
                if self._depth == 0 and obj is not self.stall_timer:
                    what = f"{QEvent.Type(kind).name} -> {_name(obj)}"
                    self.busy.append((t0, ms, (time.thread_time() - c0) * 1e3, what))
                    if ms > SLOW_MS:
                        self.slow.append((ms, what, t0))

    return ProbeApp([])


def _frame_probe(refresh_timer, window):
    """Times the window's refresh (its timer's slot) and its top-level paints through event
    filters on those two objects only, delivering each event itself between two clock
    reads. Also reads the GUI thread's CPU clock at each refresh."""
    from PySide6.QtCore import QEvent, QObject

    class FrameProbe(QObject):
        def __init__(self) -> None:
            super().__init__()
            self.recording = False
            self.frames: list[tuple[float, float]] = []  # (start, ms) of each refresh
            self.frame_cpu: list[float] = []  # GUI-thread CPU seconds at each refresh start
            self.paints: list[tuple[float, float]] = []  # (start, ms) of each top-level paint
            self._timer_type = QEvent.Timer
            self._paint_types = (QEvent.UpdateRequest, QEvent.Paint)
            self._in_paint = False

        def eventFilter(self, obj, event) -> bool:
            if not self.recording:
                return False
            kind = event.type()
            if obj is refresh_timer and kind == self._timer_type:
                record = self.frames
                self.frame_cpu.append(time.thread_time())
            elif obj is window and kind in self._paint_types and not self._in_paint:
                record = self.paints
                self._in_paint = True
            else:
                return False
            t0 = time.perf_counter()
            try:
                obj.event(event)
            finally:
                record.append((t0, (time.perf_counter() - t0) * 1e3))
                self._in_paint = False
            return True

    probe = FrameProbe()
    refresh_timer.installEventFilter(probe)
    window.installEventFilter(probe)
    return probe


def _name(obj) -> str:
    """Class and object name; only the class once the event has deleted the object."""
    try:
        name = obj.objectName()
    except RuntimeError:  # its C++ side is gone (an animation deletes itself when done)
        name = ""
    return type(obj).__name__ + (f"({name})" if name else "")


def _frame_totals(frames: list[tuple[float, float]], busy: list[tuple], field: int = 1
                  ) -> list[float]:
    """GUI-thread time per frame: every outermost event from one refresh to the next (the
    refresh itself, the scene updates and paints it caused, text, input), the stall
    timer's own ticks left out."""
    totals = []
    j = 0
    for i, (start, _ms) in enumerate(frames):
        end = frames[i + 1][0] if i + 1 < len(frames) else float("inf")
        total = 0.0
        while j < len(busy) and busy[j][0] < start:
            j += 1
        while j < len(busy) and busy[j][0] < end:
            total += busy[j][field]
            j += 1
        totals.append(total)
    return totals[:-1] if len(totals) > 1 else totals  # the last frame is cut short


def _gui_profiler():
    """With $MEMLENS_BENCH_PROFILE=FILE, profile the GUI thread while the load runs, in
    thread CPU time (blind to other processes), into FILE for pstats / snakeviz."""
    if not os.environ.get(PROFILE_ENV):
        return None
    import cProfile

    profile = cProfile.Profile(time.thread_time)
    profile.enable()
    return profile


def _slowest(slow: list[tuple[float, str, float]], n: int = 3) -> str:
    """The kinds of slow event that cost most, with their count and worst time."""
    by: dict[str, list[float]] = {}
    for ms, what, _t in slow:
        by.setdefault(what, []).append(ms)
    top = sorted(by.items(), key=lambda kv: -sum(kv[1]))[:n]
    return "; ".join(f"{what} x{len(v)} (max {max(v):.0f} ms)" for what, v in top) or "none"


def spin_until(done, timeout: float) -> bool:
    """Run the real event loop (as app.exec would) until done() or the timeout."""
    from PySide6.QtCore import QEventLoop, QTimer

    loop = QEventLoop()
    poll = QTimer()
    poll.setInterval(10)
    end = time.perf_counter() + timeout
    poll.timeout.connect(lambda: (done() or time.perf_counter() > end) and loop.quit())
    poll.start()
    if not done():
        loop.exec()
    poll.stop()
    return done()


def _measure(app, probe, producer, history, duration: float):
    """Frames, paints and stalls while the producer floods the window for `duration`."""
    from PySide6.QtCore import QElapsedTimer, Qt, QTimer

    gaps: list[float] = []
    clock = QElapsedTimer()
    stall = QTimer()
    stall.setTimerType(Qt.PreciseTimer)
    stall.setInterval(1)
    last = [0]

    def tick() -> None:
        now = clock.nsecsElapsed()
        gaps.append((now - last[0]) / 1e6)
        last[0] = now

    stall.timeout.connect(tick)
    traced = tracing()
    if traced:
        app.stall_timer = stall
    preload_rows = (len(history.samples), len(history.steps))
    profile = _gui_profiler()
    gc_pauses = GcPauses().__enter__()
    probe.recording = app.recording = True
    clock.start()
    stall.start()
    t0 = time.perf_counter()
    producer.go.set()
    spin_until(lambda: time.perf_counter() - t0 >= duration, duration + 5)
    elapsed = time.perf_counter() - t0
    stall.stop()
    probe.recording = app.recording = False
    gc_pauses.__exit__()
    if profile is not None:
        profile.disable()
        profile.dump_stats(os.environ[PROFILE_ENV])
    frames, paints = list(probe.frames), list(probe.paints)
    if traced:  # every outermost event, timed by the tracing app
        busy = list(app.busy)
        cpu = _frame_totals(frames, busy, field=2)
    else:  # the refresh and the top-level paints; CPU from clock reads at each refresh
        busy = sorted([(t, ms, 0.0) for t, ms in frames] + [(t, ms, 0.0) for t, ms in paints])
        clocks = probe.frame_cpu
        cpu = [(b - a) * 1e3 for a, b in itertools.pairwise(clocks)]  # the last is cut short

    return (frames, paints, busy, cpu, gaps, elapsed, preload_rows, gc_pauses, traced)


def _figures(s, app, frames, paints, busy, cpu, gaps, elapsed, preload_rows, gc_pauses,
             traced, sent, produced_s, dropped, shows_last, interval) -> list[Figure]:
    slowest = _slowest(app.slow) if traced else f"not traced ({TRACE_ENV}=1 names them)"
    frame_ms = [ms for _, ms in frames]
    paint_ms = [ms for _, ms in paints]
    totals = _frame_totals(frames, busy)
    gaps = gaps[1:]
    longest = max(gaps) if gaps else float("nan")
    refresh_hz = len(frames) / elapsed
    n_paint = len(paints)
    what = "every event" if traced else "refresh + paints"
    cpu_what = ("every event" if traced else
                "all the GUI thread's CPU from one refresh to the next, stall timer included")
    return [
        Figure("gui_producer_steps_per_s", "producer rate achieved (5,000 asked)",
               sent.steps / produced_s, "steps/s", STEPS_PER_S * 0.95, "higher",
               note=f"{sent.steps:,} steps, {sent.samples:,} samples in {produced_s:.1f} s; "
                    f"{preload_rows[0]:,} samples preloaded"),
        Figure("gui_records_dropped", "records dropped (sent -> history -> plots)", dropped,
               "", 0, note="the view reaches the newest sample" if shows_last
               else "the view does NOT reach the newest sample"),
        Figure("gui_frame_p50_ms", f"frame p50 ({what})",
               median(totals), "ms", note=f"{len(totals)} frames in {elapsed:.1f} s"),
        Figure("gui_frame_p99_ms", f"frame p99 ({what})",
               percentile(totals, 99), "ms", PAINT_P99_MS, note=f"max {max(totals):.1f} ms"
               if totals else ""),
        Figure("gui_frame_cpu_p99_ms", "  same p99 in GUI-thread CPU time (context)",
               percentile(cpu, 99), "ms", note=f"p50 {median(cpu):.1f} ms; {cpu_what}; CPU time "
               "leaves out waiting for a core or the GIL (the producer)"),
        Figure("gui_refresh_p50_ms", "  refresh slot p50 (pull + setData)", median(frame_ms),
               "ms", note=f"p99 {percentile(frame_ms, 99):.1f} ms"),
        Figure("gui_paint_p50_ms", "  paint p50 (top-level update)", median(paint_ms), "ms",
               note=f"p99 {percentile(paint_ms, 99):.1f} ms; {n_paint / elapsed:.1f} paints/s"),
        Figure("gui_longest_stall_ms", "longest event-loop stall", longest, "ms", STALL_MS,
               note=f"1 ms timer; gap p99 {percentile(gaps, 99):.1f} ms; slowest events: "
                    f"{slowest}; {gc_pauses.text()}"),
        Figure("gui_refresh_hz", "refresh rate achieved", refresh_hz, "Hz",
               REFRESH_HZ * REFRESH_TOLERANCE, "higher",
               note=f"timer asks for {1000 / interval:.1f} Hz"),
        *follow_latency(s),  # File > Follow run: a row written -> the plot holds it
    ]


def run(s: Settings) -> list[Figure]:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    app = _probe_app()

    from memlens.app.window.main_window import MainWindow
    from memlens.core.config import RunConfig

    duration = 2.0 if s.quick else 20.0
    preload_steps = PRELOAD_SAMPLES // PHASES  # plus the run's one `start` sample
    producer = _Producer(preload_steps)
    config = RunConfig(preset="mlp", steps=10_000_000, eval_every=0)
    window = MainWindow(config, runs_dir=None, train_fn=producer)
    as_launched(window)
    probe = _frame_probe(window.refresh_timer, window)  # the ~30 Hz refresh is the frame

    session = window.start_config(config)
    history = session.history
    if not spin_until(producer.preloaded.is_set, 120):
        raise RuntimeError("the producer did not preload the history")
    # The window catches up with the preload (one big pull) before anything is measured.
    if not spin_until(lambda: window.series is not None
                      and window.series.sample_count >= len(history.samples)
                      and window.series.step_count >= len(history.steps), 120):
        raise RuntimeError("the window did not pull the preloaded history")
    if not spin_until(lambda: start_up_settled(window), 120):
        raise RuntimeError("the window's start-up work (the AMP check) did not answer")
    settle = time.perf_counter() + 0.5  # let the first draws of the full history settle
    spin_until(lambda: time.perf_counter() > settle, 5)

    m = _measure(app, probe, producer, history, duration)
    frames, paints, busy, cpu, gaps, elapsed, preload_rows, gc_pauses, traced = m
    session.stop()
    if not spin_until(lambda: not window.running, 30):
        raise RuntimeError("the run did not stop")
    window.refresh_now()
    sent = producer.counter
    produced_s = max(producer.t_end - producer.t_start, 1e-9)
    stored = (len(history.samples) - preload_rows[0], len(history.steps) - preload_rows[1])
    series = window.series
    dropped = ((sent.samples - stored[0]) + (sent.steps - stored[1])
               + (len(history.samples) - series.sample_count)
               + (len(history.steps) - series.step_count))
    shows_last = window.plots.x_range()[1] >= series.sample_x[-1]
    interval = window.refresh_timer.interval()
    window.close()

    figures = _figures(s, app, frames, paints, busy, cpu, gaps, elapsed, preload_rows,
                       gc_pauses, traced, sent, produced_s, dropped, shows_last, interval)
    return [*figures, lab_step_refreshing(s)]


def _never() -> bool:
    return False


def lab_step_refreshing(s: Settings) -> Figure:
    """The mlp preset trained in a real window, its ~30 Hz refresh on and off in alternating
    blocks (see the module doc): refreshing / stopped, the median over neighbouring pairs."""
    from memlens.app.window.main_window import MainWindow
    from memlens.core.config import RunConfig
    from memlens.core.stats import median_pair_ratio

    config = RunConfig(preset="mlp", steps=10_000_000, eval_every=0)
    window = MainWindow(config, runs_dir=None)
    as_launched(window)
    session = window.start_config(config)
    steps, timer = session.history.steps, window.refresh_timer
    if not spin_until(lambda: len(steps) > 50 and start_up_settled(window), 120):
        raise RuntimeError("the lab's run did not start")
    walls: dict[bool, list[float]] = {True: [], False: []}
    gui_share = []
    for refreshing in [True, False] * (LAB_PAIRS_QUICK if s.quick else LAB_PAIRS):
        if refreshing:
            timer.start()
        else:
            timer.stop()
        spin_until(_never, 0.3)  # the event loop runs this long: settled into the mode
        n0, c0, t0 = len(steps), time.thread_time(), time.perf_counter()
        spin_until(_never, LAB_BLOCK_S)
        if refreshing:
            gui_share.append((time.thread_time() - c0) / (time.perf_counter() - t0))
        t = steps.column("time_s", n0, len(steps))
        walls[refreshing].append((t[-1] - t[0]) / (len(t) - 1) if len(t) > 2 else float("nan"))
    timer.start()
    interval = timer.interval()
    session.stop()
    spin_until(lambda: not window.running, 30)
    window.close()
    ci = median_pair_ratio(walls[False], walls[True])
    return Figure("gui_lab_step_refreshing",
                  "lab step (mlp, real training) with the window refreshing / stopped",
                  ci.ratio, "x",
                  note=f"95% CI {ci.low:.3f}-{ci.high:.3f}, {ci.n_after} pairs of "
                       f"{LAB_BLOCK_S} s blocks; stopped {median(walls[False]) * 1e3:.2f} ms a "
                       f"step; GUI thread CPU {median(gui_share):.0%} of the wall clock "
                       f"refreshing, every {interval} ms: its Python is the training's time "
                       f"(the GIL), the cost the app adds to the lab's overhead figures")
