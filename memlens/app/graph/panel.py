"""GraphPanel: the captured autograd graph, live: zoom, search, bytes, module groups, export."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import (
    QObject,
    QPointF,
    QRunnable,
    Qt,
    QThreadPool,
    QTimer,
    Signal,
    Slot,
)
from PySide6.QtGui import QAction, QColor, QImage, QPainter, QPen, QPolygonF
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QSpinBox,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from memlens.app.graph.scene import GraphScene, GraphView, TextMetrics
from memlens.app.signals import signals_blocked
from memlens.core.graph.groups import ViewGraph, default_grouped, group_title, module_of, view_graph
from memlens.core.graph.layout import (
    DOT_MAX_NODES,
    Layout,
    LayoutCancelled,
    LayoutRequest,
    layout_graph,
)
from memlens.core.graph.snapshot import GraphSnapshot
from memlens.core.units import format_bytes, format_ms

ENGINES = {"auto": "auto", "Graphviz dot": "dot", "memlens layered": "layered"}
TREND_KEEP = 200
MAX_CAPTURES = 20  # kept for the capture list (a 2,000-node one is about 1 MB)
DOT_ALWAYS_TRY = 60  # auto always lets dot try graphs this small
BYTES_LEGEND = ("Bytes saved for backward count each storage once, at the first op that "
                "saved it. “shares N”: this op saved only storages already counted at "
                "another op. Parameters are never counted: they exist anyway.")
MIN_WIDTH = 560  # below its controls' width the panel scrolls sideways
NO_CAPTURE = "No graph captured yet. Press “Capture next step” while a run is going."


def _capture_text(s: GraphSnapshot) -> str:
    nodes = "no graph" if s.is_empty else f"{s.node_count:,} nodes"
    return f"step {s.step} {s.kind}: {nodes}"


# --- the layout worker ----------------------------------------------------------------------
@dataclass(frozen=True)
class _LayoutJob:
    generation: int
    snapshot: GraphSnapshot
    expanded: frozenset[str]
    grouped: bool
    show_saved: bool
    engine: str
    dot_max_nodes: int


class _LayoutSignals(QObject):
    done = Signal(int, object, object, object)  # generation, GraphSnapshot, ViewGraph, Layout
    failed = Signal(int, str)


class _LayoutTask(QRunnable):
    """Builds the view graph and lays it out off the GUI thread; checks `cancel` between
    stages so a newer request is not kept waiting."""

    def __init__(self, job: _LayoutJob, metrics: TextMetrics, signals: _LayoutSignals,
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


class _ExportSignals(QObject):
    done = Signal(str)
    failed = Signal(str)


class _ExportTask(QRunnable):
    def __init__(self, snapshot: GraphSnapshot, path: Path, fmt: str,
                 signals: _ExportSignals) -> None:
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


# --- small widgets --------------------------------------------------------------------------
class NodeTrend(QWidget):
    """Node count per capture on a step axis, train and eval apart: a graph that grows from
    capture to capture (carried state not detached, eval under grad) shows at a glance."""

    COLOURS = {"train": "#1565c0", "eval": "#e65100"}

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("graph_trend")
        self.series: dict[str, list[tuple[int, int]]] = {"train": [], "eval": []}
        self.setMinimumHeight(86)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def add(self, step: int, nodes: int, kind: str = "train") -> None:
        points = self.series.setdefault(kind, [])
        points.append((step, nodes))
        del points[:-TREND_KEEP]
        self.setToolTip("\n".join(self._caption(k) for k, pts in self.series.items() if pts))
        self.update()

    def counts(self, kind: str = "train") -> list[int]:
        return [n for _, n in self.series.get(kind, ())]

    def clear(self) -> None:
        for points in self.series.values():
            points.clear()
        self.update()

    def _caption(self, kind: str, short: bool = False) -> str:
        """`short`: the numbers without the words, for a narrow panel."""
        points = self.series[kind]
        (s0, first), (_s1, last) = points[0], points[-1]
        if len(points) == 1:
            return f"{kind}: {last:,}" if short else f"{kind}: {last:,} nodes at step {s0}"
        if short:
            return f"{kind}: {first:,}→{last:,} ({last - first:+,})"
        return f"{kind}: {first:,} → {last:,} nodes ({last - first:+,} since step {s0})"

    def caption_fitting(self, kind: str, fm, width: int) -> str:
        """The caption in the width: whole, else without its words (the numbers matter),
        else cut with an ellipsis. The tooltip keeps the whole text."""
        for text in (self._caption(kind), self._caption(kind, short=True)):
            if fm.horizontalAdvance(text) <= width:
                return text
        return fm.elidedText(text, Qt.TextElideMode.ElideRight, width)

    def paintEvent(self, event) -> None:
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        fm = p.fontMetrics()
        line = fm.height()
        kinds = [k for k, pts in self.series.items() if pts]
        p.setPen(QColor("#555555"))
        if not kinds:
            p.drawText(4, line, "Nodes per capture: no captures yet")
            return
        p.drawText(4, line, "Nodes per capture")
        width = self.width() - 8
        for i, kind in enumerate(kinds):
            p.setPen(QColor(self.COLOURS.get(kind, "#555555")))
            p.drawText(4, line * (2 + i), self.caption_fitting(kind, fm, width))
        r = self.rect().adjusted(6, int(line * (len(kinds) + 1) + 6), -6, -4)
        every = [pt for k in kinds for pt in self.series[k]]
        s_lo, s_hi = min(s for s, _ in every), max(s for s, _ in every)
        n_lo, n_hi = min(n for _, n in every), max(n for _, n in every)

        def at(step: int, nodes: int) -> QPointF:
            fx = (step - s_lo) / (s_hi - s_lo) if s_hi > s_lo else 1.0
            fy = (nodes - n_lo) / (n_hi - n_lo) if n_hi > n_lo else 0.5
            return QPointF(r.left() + r.width() * fx, r.bottom() - r.height() * fy)

        p.setPen(QPen(QColor("#dddddd"), 1))
        p.drawLine(r.bottomLeft(), r.bottomRight())
        # A few calls per series, not one per point: a paint's every call into Qt may wait
        # for the GIL while the training or layout thread runs Python.
        for kind in kinds:
            colour = QColor(self.COLOURS.get(kind, "#555555"))
            pts = [at(s, n) for s, n in self.series[kind]]
            p.setPen(QPen(colour, 1.6))
            p.drawPolyline(QPolygonF(pts))
            dot = QPen(colour, 4.8)
            dot.setCapStyle(Qt.PenCapStyle.RoundCap)
            p.setPen(dot)
            p.drawPoints(QPolygonF(pts[-60:]))


# --- the panel ------------------------------------------------------------------------------
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
        self.last_layout_s = 0.0  # request -> on screen, for the header and tests
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
        self._signals = _LayoutSignals(self)
        self._signals.done.connect(self._on_layout_done)
        self._signals.failed.connect(self._on_layout_failed)
        self._export_signals = _ExportSignals(self)
        self._export_signals.done.connect(self._on_export_done)
        self._export_signals.failed.connect(self._on_export_failed)
        self._build()

    # --- widgets --------------------------------------------------------------------------
    def _build(self) -> None:
        self.header = QLabel(NO_CAPTURE)
        self.header.setObjectName("graph_header")
        self.header.setWordWrap(True)
        self.header.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        # Room for two lines whatever it says: a header that grows a line when "laying
        # out…" shows and shrinks back would resize the view, repainting all of it twice.
        self.header.setMinimumHeight(2 * self.header.fontMetrics().lineSpacing() + 2)

        self.capture_button = QPushButton("Capture next step")
        self.capture_button.setObjectName("capture_button")
        self.capture_button.setToolTip("Capture the autograd graph of the next training step, "
                                       "before its backward frees it")
        self.capture_button.clicked.connect(self.capture_requested)
        self.every = QSpinBox()
        self.every.setObjectName("capture_every")
        self.every.setRange(0, 100000)
        self.every.setPrefix("every ")
        self.every.setSuffix(" steps")
        self.every.setSpecialValueText("every: off")
        self.every.setToolTip("Also capture every N steps (0 = only on request)")
        self.every.valueChanged.connect(self._on_every_changed)

        self.search = QLineEdit()
        self.search.setObjectName("graph_search")
        self.search.setPlaceholderText("Find op, parameter or module…")
        self.search.setClearButtonEnabled(True)
        self.search.setMinimumWidth(180)
        self.search_count = QLabel("")
        self.search_count.setObjectName("graph_search_count")
        self.search_count.setMinimumWidth(70)
        self.search.textChanged.connect(self._on_search_changed)
        self.search.returnPressed.connect(self._next_hit)
        self.grouped = QCheckBox("Group by module")
        self.grouped.setObjectName("graph_grouped")
        self.grouped.setToolTip("Collapse each module call into one node; click it to expand")
        self.grouped.toggled.connect(self._on_grouped_changed)
        self.show_saved = QCheckBox("Saved tensors")
        self.show_saved.setChecked(True)
        self.show_saved.setToolTip("Draw saved tensors as orange nodes (as torchviz does)")
        self.show_saved.toggled.connect(self._on_show_saved_changed)
        self.capture_list = QComboBox()
        self.capture_list.setObjectName("graph_capture")
        self.capture_list.setToolTip("Captured graphs, newest first")
        self.capture_list.setMinimumContentsLength(18)
        self.capture_list.currentIndexChanged.connect(self._on_capture_chosen)
        self.engine = QComboBox()
        self.engine.setObjectName("graph_engine")
        self.engine.addItems(list(ENGINES))
        self.engine.setToolTip("auto: Graphviz dot for small graphs (bounded in time), "
                               "memlens' layered layout otherwise")
        self.engine.currentTextChanged.connect(lambda _t: self._relayout())  # interrupts
        fit = QPushButton("Fit")
        fit.setToolTip("Show the whole graph")
        fit.clicked.connect(lambda: self.graph_view.fit())
        self.export_buttons = {}
        for fmt in ("dot", "svg", "png"):
            b = QPushButton(fmt.upper())
            b.setObjectName(f"export_{fmt}")
            b.setToolTip(f"Export the captured graph as {fmt.upper()}")
            b.clicked.connect(lambda _c=False, f=fmt: self._ask_export(f))
            b.setEnabled(False)
            self.export_buttons[fmt] = b

        self.scene = GraphScene(self)
        self.scene.graph_built.connect(self._on_graph_built)
        self.graph_view = GraphView(self.scene)
        self.graph_view.node_clicked.connect(self._on_node_clicked)
        self.graph_view.node_context.connect(self._on_node_context)

        self.trend = NodeTrend()
        self.selection_title = QLabel("Click a node to list what it saved for backward.")
        self.selection_title.setWordWrap(True)
        self.saved_list = QListWidget()
        self.saved_list.setObjectName("saved_list")
        # Long rows ("addmm.mat1 [64, 784] float32: ...") wrap in a narrow side panel, and
        # each keeps its whole text as a tooltip.
        self.saved_list.setWordWrap(True)
        self.saved_list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.saved_list.setTextElideMode(Qt.TextElideMode.ElideNone)
        self.legend = QLabel(BYTES_LEGEND)
        self.legend.setObjectName("graph_legend")
        self.legend.setWordWrap(True)
        self.notes = QLabel("")
        self.notes.setObjectName("graph_notes")
        self.notes.setWordWrap(True)

        # Three short rows rather than two long ones: the panel fits beside both docks on a
        # 1280-pixel screen.
        top = QHBoxLayout()  # capturing, and which capture
        for w in (self.capture_button, self.every, QLabel("Showing:")):
            top.addWidget(w)
        top.addWidget(self.capture_list, 1)
        find_row = QHBoxLayout()  # finding, and what to do with a capture
        for w in (self.search, self.search_count):
            find_row.addWidget(w)
        find_row.addStretch(1)
        find_row.addWidget(QLabel("Export:"))
        for b in self.export_buttons.values():
            b.setMaximumWidth(56)
            find_row.addWidget(b)
        view_row = QHBoxLayout()  # how to look at it
        for w in (self.grouped, self.show_saved, QLabel("Layout:"), self.engine, fit):
            view_row.addWidget(w)
        view_row.addStretch(1)
        side = QWidget()
        side_box = QVBoxLayout(side)
        side_box.setContentsMargins(0, 0, 0, 0)
        side_box.addWidget(self.trend)
        side_box.addWidget(self.selection_title)
        side_box.addWidget(self.saved_list, 1)
        side_box.addWidget(self.legend)
        side_box.addWidget(self.notes)
        split = QSplitter(Qt.Orientation.Horizontal)
        split.setObjectName("graph_splitter")  # its sizes are remembered by name
        split.addWidget(self.graph_view)
        split.addWidget(side)
        split.setStretchFactor(0, 4)
        split.setStretchFactor(1, 1)
        split.setSizes([800, 260])
        content = QWidget()
        box = QVBoxLayout(content)
        box.addWidget(self.header)
        box.addLayout(top)
        box.addLayout(find_row)
        box.addLayout(view_row)
        box.addWidget(split, 1)
        # The panel's widgets sit in a scroll area that never scrolls: it stops their size
        # changes at the panel's edge. Without it a new header or notes text (every layout
        # changes them) relays out the window up to the tab widget, which then repaints
        # every widget in the window, each paint an event to deliver while the layout
        # thread holds the GIL.
        frame = QScrollArea()
        frame.setFrameShape(QFrame.Shape.NoFrame)
        frame.setWidgetResizable(True)
        # Narrower than its two rows of controls (a 1280-pixel screen with both docks), it
        # scrolls sideways instead of widening the window past the screen.
        frame.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        frame.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        frame.setWidget(content)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(frame)
        least = content.minimumSizeHint()
        self.setMinimumSize(min(least.width(), MIN_WIDTH), least.height())

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
        with signals_blocked(self.capture_list):
            self.capture_list.insertItem(0, _capture_text(snapshot))
            while self.capture_list.count() > MAX_CAPTURES:
                self.capture_list.removeItem(self.capture_list.count() - 1)
        wanted = self._wanted
        if (snapshot.kind == "eval" and wanted is not None and wanted.kind == "train"
                and wanted.step == snapshot.step and wanted in self.captures):
            with signals_blocked(self.capture_list):
                self.capture_list.setCurrentIndex(self.captures[::-1].index(wanted))
            return
        with signals_blocked(self.capture_list):
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
        with signals_blocked(self.capture_list):
            self.capture_list.clear()
        for b in self.export_buttons.values():
            b.setEnabled(False)
        self.notes.setText("")
        self._clear_selection_list()
        self._on_search_changed(self.search.text())
        self.scene.show_message("No graph captured in this run yet.")
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
        with signals_blocked(self.grouped):
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
        job = _LayoutJob(self._generation, self._wanted, frozenset(self.expanded),
                         self.grouped.isChecked(), self.show_saved.isChecked(),
                         ENGINES[self.engine.currentText()], self._dot_max_nodes)
        self._cancel = threading.Event()
        self._pool.start(_LayoutTask(job, self.scene.metrics, self._signals, self._cancel))
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
        self.last_layout_s = time.perf_counter() - self._requested_at
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
        with signals_blocked(self.every):
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
            _ExportTask(self.snapshot, path, fmt, self._export_signals))

    def _export_scene_png(self, path: Path) -> None:
        from memlens.core.runfolder.atomic import ExportError, atomic_open

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
        try:
            from PySide6.QtCore import QBuffer, QByteArray, QIODevice

            data = QByteArray()
            buf = QBuffer(data)
            buf.open(QIODevice.OpenModeFlag.WriteOnly)
            image.save(buf, "PNG")
            with atomic_open(path, "wb") as fh:
                fh.write(bytes(data))
        except ExportError as exc:
            self._on_export_failed(str(exc))
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

