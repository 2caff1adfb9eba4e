"""View > Exact bytes: every byte figure in exact bytes, texts written before the switch too,
and a log scale's every tick labelled."""

from __future__ import annotations

import re

import numpy as np
from PySide6.QtGui import QImage, QPainter
from PySide6.QtWidgets import QPushButton

from tests.app.drive import choose, click, wait_steps
from tests.app.test_view_help_theme import action, run_to_end

BYTE_FIGURE = re.compile(r"[+-]?[\d,.]+ (?:B|KiB|MiB|GiB)\b")


def test_exact_bytes_re_renders_the_effects_of_toggles_made_before_the_switch(qtbot, window):
    choose(window, steps=100_000)
    click(qtbot, window.findChild(QPushButton, "run_button"))
    wait_steps(qtbot, window, 12)
    window.techniques_panel.fields["retain_graph"].widget.setChecked(True)  # flipped live
    toggles = lambda: [e for e in window.events_panel.events if e.kind == "toggle"]  # noqa: E731
    qtbot.waitUntil(lambda: bool(toggles()), timeout=30_000)
    wait_steps(qtbot, window, toggles()[0].step + 12)  # steps after it to measure
    window.stop_run()
    qtbot.waitUntil(lambda: window.state == "finished", timeout=60_000)
    window.refresh_now()
    rows = [i for i, e in enumerate(window.events_panel.events) if e.kind == "toggle"]
    assert len(rows) == 1
    item = window.events_panel.list.item(rows[0])
    binary = item.toolTip()
    figures = BYTE_FIGURE.findall(binary)
    assert figures and any(f.endswith("iB") for f in figures), binary

    action(window, "exact_bytes_action").trigger()
    exact = BYTE_FIGURE.findall(item.toolTip())
    assert len(exact) == len(figures)
    assert all(re.fullmatch(r"[+-]?\d{1,3}(,\d{3})* B", f) for f in exact), exact
    assert window.events_panel.detail.text() == item.toolTip()  # the pane shows it too

    action(window, "exact_bytes_action").trigger()
    assert BYTE_FIGURE.findall(item.toolTip()) == figures  # and back


def _as_bytes(figure: str) -> float:
    number, unit = figure.lstrip("+").replace(",", "").split()
    return float(number) * 1024 ** ["B", "KiB", "MiB", "GiB"].index(unit)


def test_exact_bytes_re_renders_a_leak_found_before_the_switch(qtbot, window):
    """A leak's explanation ("grows 1.2 MiB per step") written in MiB before View > Exact
    bytes is written again in bytes after it, each the same figure to its three digits, and
    back again: also in the run folder's events read back."""
    # growth every step (eval off), over the leak check's threshold: the default sizes
    choose(window, steps=100_000, eval_every=0, batch_size=0, width=0)
    click(qtbot, window.findChild(QPushButton, "run_button"))
    wait_steps(qtbot, window, 4)
    window.techniques_panel.fields["leak_cache"].widget.setChecked(True)  # flipped live
    leaks = lambda: [i for i, e in enumerate(window.events_panel.events)  # noqa: E731
                     if e.kind == "leak"]
    qtbot.waitUntil(lambda: bool(leaks()), timeout=60_000)
    window.stop_run()
    qtbot.waitUntil(lambda: window.state == "finished", timeout=60_000)
    item = window.events_panel.list.item(leaks()[0])
    window.events_panel.list.setCurrentItem(item)
    binary = BYTE_FIGURE.findall(item.toolTip())
    assert binary and all(f.endswith("iB") for f in binary), item.toolTip()

    action(window, "exact_bytes_action").trigger()
    exact = BYTE_FIGURE.findall(item.toolTip())
    assert len(exact) == len(binary)
    assert all(re.fullmatch(r"[+-]?\d{1,3}(,\d{3})* B", f) for f in exact), exact
    for b, e in zip(binary, exact, strict=True):  # the same figure, more exactly
        assert abs(_as_bytes(b) - _as_bytes(e)) <= 0.01 * _as_bytes(e), (b, e)
    assert window.events_panel.detail.text() == item.toolTip()  # the pane shows it too
    action(window, "exact_bytes_action").trigger()
    assert BYTE_FIGURE.findall(item.toolTip()) == binary  # and back


def test_log_scale_with_exact_bytes_labels_every_tick_over_the_whole_range(qtbot, window):
    window.resize(1280, 800)
    run_to_end(qtbot, window, steps=4)
    action(window, "exact_bytes_action").trigger()
    action(window, "log_memory_plot_action").trigger()
    memory = window.plots.memory_plot
    axis = memory.getPlotItem().getAxis("left")
    floor = axis.log_floor * axis.unit  # bytes at the bottom edge
    memory.getPlotItem().vb.setYRange(0, np.log10(2**36 / floor), padding=0)  # 1 KiB..64 GiB
    qtbot.waitUntil(lambda: axis.range[1] >= np.log10(2**35 / floor))
    image = QImage(10, 10, QImage.Format_ARGB32)
    painter = QPainter(image)
    try:
        specs = axis.generateDrawSpecs(painter)
    finally:
        painter.end()
    assert specs is not None
    drawn = [text for _rect, _flags, text in specs[2]]
    values = axis.tickValues(axis.range[0], axis.range[1], axis.height())[0][1]
    assert len(values) >= 4
    assert drawn == axis.tickStrings(values, 1, 1)  # every tick has its label
    units = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
    labelled = []
    for text, v in zip(drawn, values, strict=True):
        number, unit = text.split()
        labelled.append(float(number.replace(",", "")) * units[unit])
        assert labelled[-1] == round(floor * 10**v)  # each label the tick's exact bytes
    assert max(labelled) > 2**30
