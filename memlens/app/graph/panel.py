"""GraphPanel: the captured autograd graph, live: zoom, search, bytes, module groups, export."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from PySide6.QtCore import (
    QPointF,
    QSignalBlocker,
    Qt,
    QThreadPool,
    QTimer,
    Signal,
    Slot,
)
from PySide6.QtGui import QAction, QColor, QImage, QPainter
from PySide6.QtWidgets import (
    QFileDialog,
    QListWidgetItem,
    QMenu,
    QWidget,
)

from memlens.app.graph.controls import ENGINES, NO_CAPTURE, build_panel
from memlens.app.graph.workers import (
    ExportSignals,
    ExportTask,
    LayoutJob,
    LayoutSignals,
    LayoutTask,
)
from memlens.core.graph.groups import ViewGraph, default_grouped, group_title, module_of
from memlens.core.graph.layout import (
    DOT_MAX_NODES,
    Layout,
)
from memlens.core.graph.snapshot import GraphSnapshot
from memlens.core.units import format_bytes, format_ms

MAX_CAPTURES = 20  # kept for the capture list (each keeps its whole graph's nodes)
DOT_ALWAYS_TRY = 60  # auto always lets dot try graphs this small


def _capture_text(s: GraphSnapshot) -> str:
    nodes = "no graph" if s.is_empty else f"{s.node_count:,} nodes"
    return f"step {s.step} {s.kind}: {nodes}"


class GraphPanel(QWidget):
    """Shows GraphSnapshots (`show_snapshot`); asks the run for captures by signal."""

    capture_requested = Signal()
    capture_every_changed = Signal(int)
    layout_ready = Signal()  # the scene now shows the latest request
    export_finished = Signal(str)  # a message: what was written, or what went wrong

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.snapshot: GraphSnapshot | None = None  # the one on screen
        self.captures: list[GraphSnapshot] = []  # oldest first
        self.view: ViewGraph | None = None
        self.graph_layout: Layout | None = None
        self.expanded: set[str] = set()
        self.selected: str | None = None
        self._generation = 0
        self._wanted: GraphSnapshot | None = None  # the newest one asked for
        self._running = False  # a layout job is in flight
        self._pending = False  # a newer request waits for it
        self._dot_max_nodes = DOT_MAX_NODES  # lowered when dot loses the race (auto)
        self._requested_at = 0.0
        self._fit_new = False  # the next graph built is a new capture: fit it whole
        self._fit_on_show = False  # one was built while hidden: fit once there is a size
        self._cancel = threading.Event()
        self._hits: list[str] = []
        self._hit_index = -1
        self._pool = QThreadPool(self)
        self._pool.setMaxThreadCount(1)
        self._signals = LayoutSignals(self)
        self._signals.done.connect(self._on_layout_done)
        self._signals.failed.connect(self._on_layout_failed)
        self._export_signals = ExportSignals(self)
        self._export_signals.done.connect(self._on_export_done)
        self._export_signals.failed.connect(self._on_export_failed)
        build_panel(self)

    # --- showing a snapshot ---------------------------------------------------------------
    @Slot(object)
    def show_snapshot(self, snapshot: GraphSnapshot) -> None:
        """Add a captured graph and show it (returns at once; layout runs on a worker).

        Every capture goes into the trend and the capture list. An eval graph that arrives
        right after the train graph of the same step is listed, not shown over it.
        """
        self.trend.add(snapshot.step, snapshot.node_count, snapshot.kind)
        self.captures.append(snapshot)
        del self.captures[:-MAX_CAPTURES]
        with QSignalBlocker(self.capture_list):
            self.capture_list.insertItem(0, _capture_text(snapshot))
            while self.capture_list.count() > MAX_CAPTURES:
                self.capture_list.removeItem(self.capture_list.count() - 1)
        wanted = self._wanted
        if (snapshot.kind == "eval" and wanted is not None and wanted.kind == "train"
                and wanted.step == snapshot.step and wanted in self.captures):
            with QSignalBlocker(self.capture_list):
                self.capture_list.setCurrentIndex(self.captures[::-1].index(wanted))
            return
        with QSignalBlocker(self.capture_list):
            self.capture_list.setCurrentIndex(0)
        self._display(snapshot)

    @Slot(int)
    def _on_capture_chosen(self, index: int) -> None:
        if 0 <= index < len(self.captures):
            self._display(self.captures[::-1][index])

    def clear(self) -> None:
        """Forget every capture (a new run, or Reset): a graph belongs to its run."""
        self._cancel_layout()
        self._generation += 1  # a layout still in flight is dropped when it lands
        self._running = self._pending = False
        self._wanted = self.snapshot = self.view = self.graph_layout = None
        self.expanded, self.selected = set(), None
        self.captures.clear()
        self.trend.clear()
        with QSignalBlocker(self.capture_list):
            self.capture_list.clear()
        for b in self.export_buttons.values():
            b.setEnabled(False)
        self.notes.setText("")
        self._clear_selection_list()
        self._on_search_changed(self.search.text())
        # the last graph's fit may have zoomed far out: the message reads at its own size,
        # wrapped to the view
        width = min(460, max(160, self.graph_view.viewport().width() - 48))
        self.scene.show_message("No graph captured in this run yet.", width)
        self.graph_view.zoom_to(1.0, self.scene.sceneRect().center())
        self.header.setText(NO_CAPTURE)

    def _display(self, snapshot: GraphSnapshot) -> None:
        """Make `snapshot` the one to show; its layout starts now, or once the running one
        ends (captures can come every step: the view keeps up without queueing them)."""
        self._fit_new = True
        self._wanted = snapshot
        self.expanded = set()
        self.selected = None
        for b in self.export_buttons.values():
            b.setEnabled(True)
        with QSignalBlocker(self.grouped):
            self.grouped.setChecked(default_grouped(snapshot))
        if snapshot.is_empty:
            self._cancel_layout()
            self._running = self._pending = False
            self._generation += 1
            self.snapshot, self.view, self.graph_layout = snapshot, None, None
            self.notes.setText("\n".join(snapshot.notes))
            self._clear_selection_list()
            self.scene.show_message(f"Step {snapshot.step} ({snapshot.kind}): "
                                    f"{snapshot.message}")
            self.graph_view.fit()
            self._update_header()
            self.layout_ready.emit()
            return
        self._relayout(interrupt=False)

    def _relayout(self, interrupt: bool = True) -> None:
        """Lay out the wanted snapshot as the controls say. `interrupt`: a user action that
        drops a running layout; otherwise a running layout finishes first."""
        if self._wanted is None or self._wanted.is_empty:
            return
        if self._running and not interrupt:
            self._pending = True
            self._update_header()
            return
        self._cancel_layout()
        self._generation += 1
        self._running, self._pending = True, False
        self._requested_at = time.perf_counter()
        job = LayoutJob(self._generation, self._wanted, frozenset(self.expanded),
                         self.grouped.isChecked(), self.show_saved.isChecked(),
                         ENGINES[self.engine.currentText()], self._dot_max_nodes)
        self._cancel = threading.Event()
        self._pool.start(LayoutTask(job, self.scene.metrics, self._signals, self._cancel))
        self._update_header()

    def _cancel_layout(self) -> None:
        self._cancel.set()

    @Slot(int, object, object, object)
    def _on_layout_done(self, generation: int, snapshot: GraphSnapshot, view: ViewGraph,
                        layout: Layout) -> None:
        if generation != self._generation:
            return  # superseded by a newer request
        self._running = False
        if snapshot is not self.snapshot:
            self._clear_selection_list()
        self.snapshot, self.view, self.graph_layout = snapshot, view, layout
        if layout.dot_lost:  # do not make the next expand wait for dot again at this size
            self._dot_max_nodes = max(DOT_ALWAYS_TRY, min(self._dot_max_nodes,
                                                          len(view.nodes) - 1))
        self.notes.setText("\n".join([*snapshot.notes, *layout.notes]))
        if self._pending:  # a newer capture came meanwhile: lay it out while this one shows
            self._relayout(interrupt=False)
        # No refit on the resizes a build may cause: _on_graph_built places the new graph.
        self.graph_view.fitted = False
        self.scene.show_graph(view, layout)  # builds in slices, then graph_built

    @Slot()
    def _on_graph_built(self) -> None:
        view, layout = self.view, self.graph_layout
        if view is None or layout is None:
            return
        if self._fit_new:  # a new capture opens whole; an expand keeps reading where it was
            self._fit_new = False
            self.graph_view.fit()
            self._fit_on_show = not self.graph_view.isVisible()
        else:
            focus = None
            for v in view.nodes:
                if v.kind == "output" and v.id in layout.positions:
                    focus = QPointF(*layout.positions[v.id])
            self.graph_view.show_readable(focus)
        if self.selected in self.scene.boxes:
            self.select_node(self.selected)
        self._on_search_changed(self.search.text())
        self._update_header()
        if not self._running:
            self.layout_ready.emit()

    @Slot(int, str)
    def _on_layout_failed(self, generation: int, message: str) -> None:
        if generation != self._generation:
            return
        self._running = False
        self.scene.show_message(f"The layout failed: {message}")
        self._update_header()
        if self._pending:
            self._relayout(interrupt=False)
        else:
            self.layout_ready.emit()

    def _clear_selection_list(self) -> None:
        self.saved_list.clear()
        self.selection_title.setText("Click a node to list what it saved for backward.")

    def _update_header(self) -> None:
        s = self.snapshot
        if s is None:
            if self._wanted is not None:
                self.header.setText(f"Laying out step {self._wanted.step}…")
            return
        if s.is_empty:
            self.header.setText(f"<b>Step {s.step}</b> ({s.kind}): {s.message}")
            return
        text = (f"<b>Step {s.step}</b> ({s.kind}) · <b>{s.node_count:,} nodes</b> "
                f"({s.count('op'):,} ops, {s.count('param'):,} parameters, "
                f"{s.count('saved'):,} saved tensors) · saved for backward "
                f"<b>{format_bytes(s.saved_bytes)}</b> · capture "
                f"{format_ms(s.capture_ms)}")
        if self._running or self._pending:
            wanted = self._wanted
            newer = f" step {wanted.step}" if wanted is not None and wanted is not s else ""
            text += f" · <i>laying out{newer}…</i>"
        elif self.graph_layout is not None and self.view is not None:
            shown = len(self.view.nodes)
            what = f"{shown:,} shown, " if shown != s.node_count else ""
            text += (f" · {what}layout: {self.graph_layout.engine} "
                     f"{self.graph_layout.seconds:.2f} s")
        self.header.setText(text)

    # --- interaction ----------------------------------------------------------------------
    @Slot(int)
    def _on_every_changed(self, value: int) -> None:
        self.capture_every_changed.emit(value)

    def set_capture_every(self, value: int) -> None:
        """Show the run's setting without echoing it back as a change."""
        with QSignalBlocker(self.every):
            self.every.setValue(value)

    @Slot(bool)
    def _on_grouped_changed(self, _checked: bool) -> None:
        self.expanded = set()
        self._relayout()

    @Slot(bool)
    def _on_show_saved_changed(self, _checked: bool) -> None:
        self._relayout()

    @Slot(str)
    def _on_node_clicked(self, view_id: str) -> None:
        self.select_node(view_id)
        v = self._view_node(view_id)
        if v is not None and v.kind == "group":
            self.expand(v.group)

    def expand(self, key: str) -> None:
        self.expanded.add(key)
        self._relayout()

    def collapse(self, key: str) -> None:
        self.expanded.discard(key)
        for k in list(self.expanded):  # inner calls close with their module
            if self._inside(k, key):
                self.expanded.discard(k)
        self._relayout()

    def _inside(self, inner: str, outer: str) -> bool:
        return any(inner in n.scope and outer in n.scope[: n.scope.index(inner)]
                   for n in self.snapshot.nodes if inner in n.scope)

    @Slot(str, object)
    def _on_node_context(self, view_id: str, where) -> None:
        v = self._view_node(view_id)
        if v is None or v.node is None or not self.grouped.isChecked():
            return
        menu = QMenu(self)
        for key in v.node.scope:
            if key in self.expanded:
                title = group_title(key, self.snapshot.module_type(module_of(key)))
                act = QAction(f"Collapse {title}", menu)
                act.triggered.connect(lambda _c=False, k=key: self.collapse(k))
                menu.addAction(act)
        if not menu.isEmpty():
            menu.popup(where)

    def _view_node(self, view_id: str):
        if self.view is None:
            return None
        return next((v for v in self.view.nodes if v.id == view_id), None)

    def select_node(self, view_id: str) -> None:
        """Select a node and list its saved tensors in `saved_list`."""
        v = self._view_node(view_id)
        if v is None:
            return
        self.selected = view_id
        self.scene.select(view_id)
        self.saved_list.clear()
        if v.kind == "group":
            inside = [self.snapshot.node(m) for m in v.members]
            tensors = [(n, t) for n in inside if n.kind == "op" for t in n.saved]
            tensors.sort(key=lambda nt: -nt[1].bytes)
            self.selection_title.setText(
                f"<b>{v.title}</b>: {len(inside)} nodes, saved "
                f"{format_bytes(v.saved_bytes)} (largest first)")
            for n, t in tensors[:500]:
                self._add_saved_row(f"{n.op}.{t.describe()}", t)
            return
        n = v.node
        where = f" in module {n.module}" if n.module else ""
        if n.kind == "op":
            count = f"{len(n.saved)} tensor{'' if len(n.saved) == 1 else 's'}"
            if n.saved_bytes or not n.held_bytes:
                what = f"{format_bytes(n.saved_bytes)} of them counted at this op"
            else:  # every storage it saved was saved first by another op
                what = (f"{format_bytes(n.held_bytes)}, all storages another op saved "
                        "first: counted there, not again here")
            self.selection_title.setText(f"<b>{n.op}</b>{where} saved {count}, {what}")
        elif n.kind == "saved":
            self.selection_title.setText(f"<b>saved tensor {n.title}</b>{where}")
        else:
            self.selection_title.setText(f"<b>{n.kind} {n.title}</b>{where}")
        for t in n.saved:
            self._add_saved_row(t.describe(), t)
        if not n.saved:
            self.saved_list.addItem("(saves no tensors)")

    def _add_saved_row(self, text: str, t) -> None:
        item = QListWidgetItem(text)
        item.setToolTip(text)
        item.setData(Qt.ItemDataRole.UserRole, t)
        if t.counted:
            item.setForeground(QColor("#b34700"))
        self.saved_list.addItem(item)

    @Slot(str)
    def _on_search_changed(self, text: str) -> None:
        self.scene.mark(())
        self._hits = []
        self._hit_index = -1
        self.search_count.setText("")
        if self.view is None or self.snapshot is None or not text.strip():
            return
        self._hits = [h for h in self.view.find(self.snapshot, text) if h in self.scene.boxes]
        self.scene.mark(self._hits)
        self.search_count.setText(f"{len(self._hits)} match{'' if len(self._hits) == 1 else 'es'}")
        self.search.setToolTip("Enter goes to the next match")

    @property
    def search_hits(self) -> list[str]:
        return list(self._hits)

    @Slot()
    def _next_hit(self) -> None:
        if not self._hits:
            return
        self._hit_index = (self._hit_index + 1) % len(self._hits)
        box = self.scene.boxes[self._hits[self._hit_index]]
        if self.graph_view.zoom < 0.6:
            self.graph_view.zoom_to(0.9)
        self.graph_view.centerOn(box.centre)
        self.select_node(self._hits[self._hit_index])

    # --- export ---------------------------------------------------------------------------
    def _ask_export(self, fmt: str) -> None:
        if self.snapshot is None:
            return
        path, _ = QFileDialog.getSaveFileName(
            self, f"Export graph as {fmt.upper()}", f"graph_step{self.snapshot.step}.{fmt}",
            f"{fmt.upper()} (*.{fmt})")
        if path:
            self.export_to(path, fmt)

    def export_to(self, path: str | Path, fmt: str | None = None) -> None:
        """Write the snapshot (DOT as captured; SVG/PNG via Graphviz, see docs/graph.md) on
        a worker; `export_finished` reports the result. PNG without Graphviz: the scene."""
        from memlens.core.graph import graphviz
        from memlens.core.graph.export import format_of
        from memlens.core.runfolder.atomic import ExportError

        if self.snapshot is None:
            return
        path = Path(path)
        try:
            fmt = format_of(path, fmt)
        except ExportError as exc:
            self._on_export_failed(str(exc))
            return
        if fmt == "png" and graphviz.find_dot() is None:
            self._export_scene_png(path)
            return
        QThreadPool.globalInstance().start(
            ExportTask(self.snapshot, path, fmt, self._export_signals))

    def _export_scene_png(self, path: Path) -> None:
        from memlens.app.images import save_png

        rect = self.scene.sceneRect()
        scale = min(2.0, 16000 / max(rect.width(), rect.height(), 1))
        image = QImage(int(rect.width() * scale) + 1, int(rect.height() * scale) + 1,
                       QImage.Format.Format_ARGB32)
        image.fill(QColor("white"))
        painter = QPainter(image)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        shown = self.scene.labels_shown
        self.scene.show_labels(True)  # the file is read zoomed in, whatever the view shows
        self.scene.label(rect, now=True)
        self.scene.render(painter)
        self.scene.show_labels(shown)
        painter.end()
        problem = save_png(image, path)
        if problem:
            self._on_export_failed(problem)
            return
        self._on_export_done(f"Wrote {path.name} (the view as drawn; no Graphviz found)")

    @Slot(str)
    def _on_export_done(self, message: str) -> None:
        self.notes.setText(message)
        self.export_finished.emit(message)

    @Slot(str)
    def _on_export_failed(self, message: str) -> None:
        self.notes.setText(f"Export failed: {message}")
        self.export_finished.emit(f"Export failed: {message}")

    def showEvent(self, event) -> None:
        super().showEvent(event)
        if self._fit_on_show:  # built while hidden, on a view without its real size yet
            self._fit_on_show = False
            QTimer.singleShot(0, self.graph_view.fit)

    def closeEvent(self, event) -> None:
        self._cancel_layout()
        super().closeEvent(event)

