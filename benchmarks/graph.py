"""Figure 4: an autograd graph from capture to a drawn scene, and what the GUI feels meanwhile.

As in the app: a worker thread runs the step's forward under memlens.core.graph.GraphCapture and
snapshots the graph (then runs backward, as the loop does); the GUI thread hands the snapshot
to the main window's graph panel, which lays it out on its own worker and builds the scene
in slices. The time runs from the worker's start to the panel's `layout_ready`. A 1 ms
precise timer on the GUI thread notes the longest gap between its ticks meanwhile.

Graphs: the largest of the default presets (by autograd nodes), the lstm preset unrolled with
LSTMCell over its default 35 time steps (1,114 graph nodes: ops, parameters and saved
tensors, not the 2,000 the issue expected), and the same unrolled over 64 steps, which is the
2,000-node graph (2,013). The panel groups large graphs by module by default, so that
graph is also shown with grouping off, every node laid out and drawn.
"""

from __future__ import annotations

import os
import threading
import time

from benchmarks._common import Figure, GcPauses, Settings, SlotErrors, as_launched, median

LIMIT_S = 2.0
STALL_MS = 50.0
TIMEOUT_S = 30.0  # far past the target: the panel is stuck, not slow
PRESETS = ("mlp", "cnn", "lstm", "gan", "transformer")


def _capture(config):
    """Build the preset, capture one step's graph, finish the step. Returns the snapshot."""
    import torch

    from memlens.core.graph.capture import GraphCapture
    from memlens.core.preset_factory import build_preset

    preset = build_preset(config, torch.device("cpu"))
    cap = GraphCapture(preset.models)
    cap.begin()
    result = preset.forward_train(config.techniques)
    snapshot = cap.finish(result.graph_roots(), 0)
    for loss, inputs in result.backward:
        loss.backward(inputs=inputs)
    return snapshot


def _node_count(config) -> int:
    import torch

    from memlens.core.preset_factory import build_preset
    from memlens.core.recorder.recorder import count_graph_nodes

    preset = build_preset(config, torch.device("cpu"))
    result = preset.forward_train(config.techniques)
    return count_graph_nodes([loss for loss, _ in result.backward])


class _Probe:
    """A 1 ms precise timer on the GUI thread: the longest gap between ticks is the longest
    time the event loop could not run."""

    def __init__(self) -> None:
        from PySide6.QtCore import QElapsedTimer, Qt, QTimer

        self.clock = QElapsedTimer()
        self.timer = QTimer()
        self.timer.setTimerType(Qt.PreciseTimer)
        self.timer.setInterval(1)
        self.timer.timeout.connect(self._tick)
        self.gaps: list[float] = []
        self._last = 0

    def _tick(self) -> None:
        now = self.clock.nsecsElapsed()
        self.gaps.append((now - self._last) / 1e6)
        self._last = now

    def start(self) -> None:
        self.gaps.clear()
        self.clock.start()
        self._last = 0
        self.timer.start()

    def stop(self) -> float:
        self.timer.stop()
        return max(self.gaps[1:], default=float("nan"))


def _one(window, panel, config, errors: SlotErrors, ungrouped: bool = False) -> dict:
    """One capture shown in the panel. With `ungrouped`, the user then unticks "grouped" so
    every node is laid out and drawn; the total is then capture plus that full layout."""
    from PySide6.QtCore import QEventLoop, QTimer

    box: dict = {}

    def work() -> None:
        try:
            box["snapshot"] = _capture(config)
        except BaseException as exc:  # reported on the GUI thread
            box["error"] = exc

    state = {"ready": 0, "shown": 0.0, "regroup": 0.0, "first": 0.0}

    def on_ready() -> None:
        if state["shown"]:  # not a layout still finishing from before this capture
            state["ready"] += 1

    panel.layout_ready.connect(on_ready)
    probe = _Probe()
    loop = QEventLoop()
    poll = QTimer()
    poll.setInterval(5)

    def check() -> None:
        now = time.perf_counter()
        if ("snapshot" in box or "error" in box) and not state["shown"]:
            state["shown"] = now
            if "snapshot" in box:
                window.graph_tab.show_snapshots([box["snapshot"]])  # as the window's frame
        if state["ready"] == 1 and not state["first"]:
            state["first"] = now
            if ungrouped and panel.grouped.isChecked():
                state["regroup"] = now
                panel.grouped.setChecked(False)  # the user asks for every node
            else:
                state["ready"] += 1
        if state["ready"] >= 2 or "error" in box or errors.errors or now - t0 > TIMEOUT_S:
            loop.quit()

    poll.timeout.connect(check)
    probe.start()
    t0 = time.perf_counter()
    worker = threading.Thread(target=work, name="capture")
    worker.start()
    poll.start()
    loop.exec()
    end = time.perf_counter()
    poll.stop()
    stall = probe.stop()
    worker.join()
    panel.layout_ready.disconnect(on_ready)
    if "error" in box:
        raise box["error"]
    errors.check("the graph panel")
    if state["ready"] < 2:
        raise RuntimeError(f"the graph panel did not finish the layout in {TIMEOUT_S} s")
    snap = box["snapshot"]
    to_shown = state["shown"] - t0
    full = end - state["regroup"] if state["regroup"] else state["first"] - state["shown"]
    return {"total": to_shown + full, "stall": stall, "nodes": snap.node_count,
            "capture": snap.capture_ms / 1e3, "layout_scene": full,
            "drawn": len(panel.view.nodes) if panel.view is not None else 0,
            "engine": getattr(panel.layout, "engine", "?")}


def _start_worker() -> None:
    """What the app's run worker does at Start before the loop (and so before any capture):
    memlens.app.window.run_session.core_training() loads torch and the loop."""
    from memlens.app.window.run_session import core_training

    core_training()


def _settle(panel, action) -> None:
    """Do `action` and let the relayout it starts finish before the next case."""
    from PySide6.QtCore import QEventLoop, QTimer

    loop = QEventLoop()
    panel.layout_ready.connect(loop.quit)
    QTimer.singleShot(int(TIMEOUT_S * 1000), loop.quit)
    action()
    loop.exec()
    panel.layout_ready.disconnect(loop.quit)


def run(s: Settings) -> list[Figure]:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from benchmarks.gui_load import TRACE_ENV, _probe_app, _slowest, tracing

    app = _probe_app()  # plain, unless tracing() (it then names the events behind a stall)
    traced = tracing()
    from memlens.app.window.main_window import MainWindow
    from memlens.core.config import RunConfig

    counts = {p: _node_count(RunConfig(preset=p, device="cpu")) for p in PRESETS}
    largest = max(counts, key=counts.get)
    cases = {
        "largest": (f"{largest} (largest default)", RunConfig(preset=largest, device="cpu")),
        "lstm_cell": ("lstm, LSTMCell x35", RunConfig(preset="lstm", device="cpu",
                                                      lstm_cell=True)),
        "lstm_cell_2000": ("lstm, LSTMCell x64", RunConfig(preset="lstm", device="cpu",
                                                           lstm_cell=True, seq_len=64)),
        "lstm_cell_2000_all": ("LSTMCell x64, all nodes", RunConfig(
            preset="lstm", device="cpu", lstm_cell=True, seq_len=64)),
    }
    window = MainWindow(RunConfig(), runs_dir=None)
    as_launched(window)
    _start_worker()
    window.tabs.setCurrentWidget(window.graph_tab)  # the user opens the graph tab
    panel = window.graph_tab.ensure_panel()
    if panel is None:
        raise RuntimeError("the graph panel cannot be built: " + window.graph_tab.error)
    app.processEvents()
    out: list[Figure] = []
    for key, (label, config) in cases.items():
        every = key.endswith("_all")
        with SlotErrors() as errors:
            _one(window, panel, config, errors, every)  # warm-up: imports, layout, fonts
            if traced:
                app.slow.clear()
                app.recording = True
            with GcPauses() as gc_pauses:
                runs = [_one(window, panel, config, errors, every)
                        for _ in range(1 if s.quick else 3)]
            if traced:
                app.recording = False
            if not panel.grouped.isChecked():
                _settle(panel, lambda: panel.grouped.setChecked(True))
        total = median([r["total"] for r in runs])
        capture = median([r["capture"] for r in runs])
        rest = median([r["layout_scene"] for r in runs])
        last = runs[-1]
        slowest = _slowest(app.slow) if traced else f"not traced ({TRACE_ENV}=1 names them)"
        out += [
            Figure(f"graph_{key}_s", f"graph {label}: capture -> scene", total, "s", LIMIT_S,
                   note=f"{last['nodes']:,} nodes, {last['drawn']:,} drawn; capture "
                        f"{capture:.2f} s, layout+scene {rest:.2f} s ({last['engine']}); "
                        f"median of {len(runs)}"),
            Figure(f"graph_{key}_stall_ms", f"graph {label}: longest GUI stall",
                   max(r["stall"] for r in runs), "ms", STALL_MS,
                   note=f"1 ms timer, worst run; slowest events: {slowest}; "
                        f"{gc_pauses.text()}"),
            Figure(f"graph_{key}_nodes", f"graph {label}: nodes (context)", last["nodes"], ""),
        ]
    window.close()
    return out
