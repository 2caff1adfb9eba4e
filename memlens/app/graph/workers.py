"""The graph panel's work off the GUI thread: laying a capture out (cancelled by a newer
request between stages), and exporting it."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject, QRunnable, Signal

from memlens.app.graph.boxes import TextMetrics
from memlens.core.graph.groups import view_graph
from memlens.core.graph.layout import LayoutCancelled, LayoutRequest, layout_graph
from memlens.core.graph.snapshot import GraphSnapshot


@dataclass(frozen=True)
class LayoutJob:
    generation: int
    snapshot: GraphSnapshot
    expanded: frozenset[str]
    grouped: bool
    show_saved: bool
    engine: str
    dot_max_nodes: int


class LayoutSignals(QObject):
    done = Signal(int, object, object, object)  # generation, GraphSnapshot, ViewGraph, Layout
    failed = Signal(int, str)


class LayoutTask(QRunnable):
    """Builds the view graph and lays it out off the GUI thread; checks `cancel` between
    stages so a newer request is not kept waiting."""

    def __init__(self, job: LayoutJob, metrics: TextMetrics, signals: LayoutSignals,
                 cancel: threading.Event) -> None:
        super().__init__()
        self.job, self.metrics, self.signals, self.cancel = job, metrics, signals, cancel
        self.setAutoDelete(True)

    def run(self) -> None:
        job = self.job
        if self.cancel.is_set():
            return
        try:
            view = view_graph(job.snapshot, job.expanded, grouped=job.grouped,
                              show_saved=job.show_saved)
            request = LayoutRequest(
                ids=tuple(v.id for v in view.nodes),
                sizes=tuple(self.metrics.size(v.label) for v in view.nodes),
                edges=view.edges, attached=view.attached,
            )
            layout = layout_graph(request, job.engine, should_stop=self.cancel.is_set,
                                  dot_max_nodes=job.dot_max_nodes)
        except LayoutCancelled:
            return
        except Exception as exc:  # reported on the GUI thread, never lost
            if not self.cancel.is_set():
                self.signals.failed.emit(job.generation, f"{type(exc).__name__}: {exc}")
            return
        if not self.cancel.is_set():
            self.signals.done.emit(job.generation, job.snapshot, view, layout)


class ExportSignals(QObject):
    done = Signal(str)
    failed = Signal(str)


class ExportTask(QRunnable):
    def __init__(self, snapshot: GraphSnapshot, path: Path, fmt: str,
                 signals: ExportSignals) -> None:
        super().__init__()
        self.snapshot, self.path, self.fmt, self.signals = snapshot, path, fmt, signals

    def run(self) -> None:
        from memlens.core.graph.export import export_graph

        try:
            r = export_graph(self.snapshot, self.path, self.fmt)
        except Exception as exc:  # ExportError, DotError, a full disk: shown, not raised
            self.signals.failed.emit(str(exc))
            return
        self.signals.done.emit(f"Wrote {r.path.name} ({r.how}, {r.seconds:.2f} s)")
