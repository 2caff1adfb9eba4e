"""The graph panel's controls and layout, made once: the header, capturing, finding and
exporting, how to look at the graph, the view, and the side panel of what a node saved."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from memlens.app.graph.node_trend import NodeTrend
from memlens.app.graph.scene import GraphScene
from memlens.app.graph.view import GraphView

ENGINES = {"auto": "auto", "Graphviz dot": "dot", "memlens layered": "layered"}
BYTES_LEGEND = ("Bytes saved for backward count each storage once, at the first op that "
                "saved it. “shares N”: this op saved only storages already counted at "
                "another op. Parameters are never counted: they exist anyway.")
MIN_WIDTH = 240  # below its controls' width the panel scrolls sideways (never the window)
NO_CAPTURE = "No graph captured yet. Press “Capture next step” while a run is going."


def build_panel(panel) -> None:
    """Every widget of `panel` (a GraphPanel), connected to its slots, and its layout."""
    _header(panel)
    _capture_controls(panel)
    fit = _view_controls(panel)
    _graph(panel)
    _side_widgets(panel)
    content = QWidget()
    box = QVBoxLayout(content)
    box.addWidget(panel.header)
    for row in _rows(panel, fit):
        box.addLayout(row)
    box.addWidget(_splitter(panel), 1)
    _frame(panel, content)


def _header(panel) -> None:
    panel.header = QLabel(NO_CAPTURE)
    panel.header.setObjectName("graph_header")
    panel.header.setWordWrap(True)
    panel.header.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    # Room for two lines whatever it says: a header that grows a line when "laying
    # out…" shows and shrinks back would resize the view, repainting all of it twice.
    panel.header.setMinimumHeight(2 * panel.header.fontMetrics().lineSpacing() + 2)


def _capture_controls(panel) -> None:
    panel.capture_button = QPushButton("Capture next step")
    panel.capture_button.setObjectName("capture_button")
    panel.capture_button.setToolTip("Capture the autograd graph of the next training step, "
                                   "before its backward frees it")
    panel.capture_button.clicked.connect(panel.capture_requested)
    panel.every = QSpinBox()
    panel.every.setObjectName("capture_every")
    panel.every.setRange(0, 100000)
    panel.every.setPrefix("every ")
    panel.every.setSuffix(" steps")
    panel.every.setSpecialValueText("every: off")
    panel.every.setToolTip("Also capture every N steps (0 = only on request)")
    panel.every.valueChanged.connect(panel._on_every_changed)


def _view_controls(panel) -> QPushButton:
    """Finding, grouping, saved tensors, layout engine and export; returns the Fit button."""
    panel.search = QLineEdit()
    panel.search.setObjectName("graph_search")
    panel.search.setPlaceholderText("Find op, parameter or module…")
    panel.search.setClearButtonEnabled(True)
    panel.search.setMinimumWidth(180)
    panel.search_count = QLabel("")
    panel.search_count.setObjectName("graph_search_count")
    panel.search_count.setMinimumWidth(70)
    panel.search.textChanged.connect(panel._on_search_changed)
    panel.search.returnPressed.connect(panel._next_hit)
    panel.grouped = QCheckBox("Group by module")
    panel.grouped.setObjectName("graph_grouped")
    panel.grouped.setToolTip("Collapse each module call into one node; click it to expand")
    panel.grouped.toggled.connect(panel._on_grouped_changed)
    panel.show_saved = QCheckBox("Saved tensors")
    panel.show_saved.setChecked(True)
    panel.show_saved.setToolTip("Draw saved tensors as orange nodes (as torchviz does)")
    panel.show_saved.toggled.connect(panel._on_show_saved_changed)
    panel.capture_list = QComboBox()
    panel.capture_list.setObjectName("graph_capture")
    panel.capture_list.setToolTip("Captured graphs, newest first")
    panel.capture_list.setMinimumContentsLength(18)
    panel.capture_list.currentIndexChanged.connect(panel._on_capture_chosen)
    panel.engine = QComboBox()
    panel.engine.setObjectName("graph_engine")
    panel.engine.addItems(list(ENGINES))
    panel.engine.setToolTip("auto: Graphviz dot for small graphs (bounded in time), "
                           "memlens' layered layout otherwise")
    panel.engine.currentTextChanged.connect(lambda _t: panel._relayout())  # interrupts
    fit = QPushButton("Fit")
    fit.setToolTip("Show the whole graph")
    fit.clicked.connect(lambda: panel.graph_view.fit())
    panel.export_buttons = {}
    for fmt in ("dot", "svg", "png"):
        b = QPushButton(fmt.upper())
        b.setObjectName(f"export_{fmt}")
        b.setToolTip(f"Export the captured graph as {fmt.upper()}")
        b.clicked.connect(lambda _c=False, f=fmt: panel._ask_export(f))
        b.setEnabled(False)
        panel.export_buttons[fmt] = b
    return fit


def _graph(panel) -> None:
    panel.scene = GraphScene(panel)
    panel.scene.graph_built.connect(panel._on_graph_built)
    panel.graph_view = GraphView(panel.scene)
    panel.graph_view.node_clicked.connect(panel._on_node_clicked)
    panel.graph_view.node_context.connect(panel._on_node_context)


def _side_widgets(panel) -> None:
    panel.trend = NodeTrend()
    panel.selection_title = QLabel("Click a node to list what it saved for backward.")
    panel.selection_title.setWordWrap(True)
    panel.saved_list = QListWidget()
    panel.saved_list.setObjectName("saved_list")
    # Long rows ("addmm.mat1 [64, 784] float32: ...") wrap in a narrow side panel, and
    # each keeps its whole text as a tooltip.
    panel.saved_list.setWordWrap(True)
    panel.saved_list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
    panel.saved_list.setTextElideMode(Qt.TextElideMode.ElideNone)
    panel.legend = QLabel(BYTES_LEGEND)
    panel.legend.setObjectName("graph_legend")
    panel.legend.setWordWrap(True)
    panel.notes = QLabel("")
    panel.notes.setObjectName("graph_notes")
    panel.notes.setWordWrap(True)


def _rows(panel, fit) -> list[QHBoxLayout]:
    # Three short rows rather than two long ones: the panel fits beside both docks on a
    # 1280-pixel screen.
    top = QHBoxLayout()  # capturing, and which capture
    for w in (panel.capture_button, panel.every, QLabel("Showing:")):
        top.addWidget(w)
    top.addWidget(panel.capture_list, 1)
    find_row = QHBoxLayout()  # finding, and what to do with a capture
    for w in (panel.search, panel.search_count):
        find_row.addWidget(w)
    find_row.addStretch(1)
    find_row.addWidget(QLabel("Export:"))
    for b in panel.export_buttons.values():
        b.setMaximumWidth(56)
        find_row.addWidget(b)
    view_row = QHBoxLayout()  # how to look at it
    for w in (panel.grouped, panel.show_saved, QLabel("Layout:"), panel.engine, fit):
        view_row.addWidget(w)
    view_row.addStretch(1)
    return [top, find_row, view_row]


def _splitter(panel) -> QSplitter:
    side = QWidget()
    side_box = QVBoxLayout(side)
    side_box.setContentsMargins(0, 0, 0, 0)
    side_box.addWidget(panel.trend)
    side_box.addWidget(panel.selection_title)
    side_box.addWidget(panel.saved_list, 1)
    side_box.addWidget(panel.legend)
    side_box.addWidget(panel.notes)
    split = QSplitter(Qt.Orientation.Horizontal)
    split.setObjectName("graph_splitter")  # its sizes are remembered by name
    split.addWidget(panel.graph_view)
    split.addWidget(side)
    split.setStretchFactor(0, 4)
    split.setStretchFactor(1, 1)
    split.setSizes([800, 260])
    return split


def _frame(panel, content: QWidget) -> None:
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
    outer = QVBoxLayout(panel)
    outer.setContentsMargins(0, 0, 0, 0)
    outer.addWidget(frame)
    least = content.minimumSizeHint()
    panel.setMinimumSize(min(least.width(), MIN_WIDTH), least.height())
