"""The memory plot's process lines: RSS and the malloc heap beside the tensor bytes, as
memory.csv recorded them, in colours no other series or pinned run has."""

from __future__ import annotations

import csv
import math
import re

import numpy as np
from PySide6.QtWidgets import QCheckBox

from memlens.app.series.pins import PIN_COLORS
from memlens.app.theme import DARK, LIGHT
from memlens.app.timeline.memory_plot import Y_UNIT
from memlens.app.timeline.plot_style import (
    CATEGORY_COLORS,
    ERROR_COLOR,
    GRAD_NORM_COLOR,
    INFO_COLOR,
    LOSS_COLOR,
    PEAK_COLOR,
    PHASE_COLORS,
    RESERVED_COLOR,
    TOGGLE_COLOR,
    TOTAL_COLOR,
)
from memlens.core.units import format_bytes
from tests.app.drive import click, wait_frames
from tests.app.test_main_window import plot, run_to_end


def csv_column(path, name: str) -> np.ndarray:
    with open(path, newline="") as fh:
        return np.array([float(r[name]) if r[name] else np.nan for r in csv.DictReader(fh)])


def csv_phases(path) -> list[str]:
    with open(path, newline="") as fh:
        return [r["phase"] for r in csv.DictReader(fh)]


def test_process_rss_and_heap_lines_hold_memory_csv_columns(qtbot, window):
    run_to_end(qtbot, window, steps=6)
    memory = plot(window, "memory_plot")
    box = window.findChild(QCheckBox, "process_memory_box")
    assert not memory.curves["rss"].isVisible()
    click(qtbot, box)
    assert box.isChecked()
    wait_frames(qtbot, window, 2)
    path = window.session.folder / "memory.csv"
    x_all = window.history.samples.column("x")
    last_read = {}
    for key, column in (("rss", "rss_bytes"), ("heap", "heap_bytes")):
        recorded = csv_column(path, column)
        read = np.isfinite(recorded)
        last_read[key] = recorded[read][-1]
        # the run's start, and forwards at most every HEAP_EVERY_S (as a watch reads them)
        phases = csv_phases(path)
        assert read[0] and {phases[i] for i in np.flatnonzero(read)[1:]} <= {"forward"}
        x, y = memory.curves[key].getData()
        assert memory.curves[key].isVisible()
        np.testing.assert_array_equal(x, x_all[read])
        np.testing.assert_allclose(y * Y_UNIT, recorded[read], rtol=1e-6)
    window.plots.refresh_legends()
    legend = memory.getPlotItem().titleLabel.text.replace("&nbsp;", " ")
    assert "process RSS" in legend and "malloc heap (CPU)" in legend
    # the read-out at the run's last sample: the last read, however many steps back it was
    for key in ("rss", "heap"):
        assert f"<b>{format_bytes(last_read[key])}</b>" in legend
    click(qtbot, box)  # off again: hidden, and out of the y range
    assert not memory.curves["rss"].isVisible() and not memory.curves["heap"].isVisible()


def _lab(colour: str) -> tuple[float, float, float]:
    """CIELAB (D65) of an sRGB #RRGGBB colour."""
    def linear(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(int(colour[i : i + 2], 16) / 255) for i in (1, 3, 5))
    xyz = ((0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047,
           0.2126 * r + 0.7152 * g + 0.0722 * b,
           (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883)
    fx, fy, fz = (v ** (1 / 3) if v > 0.008856 else 7.787 * v + 16 / 116 for v in xyz)
    return 116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)


def _named_swatches(plot) -> dict[str, str]:
    """Each swatch's name (spaces as spaces, whether the legend wrote them as &nbsp; or not)
    and its colour."""
    legend = plot.getPlotItem().titleLabel.text.replace("&nbsp;", " ")
    found = re.findall(r'color:(#[0-9A-Fa-f]{6})">&#9632;</span> (.+?)(?= <b>|  |<br>|$)',
                       legend)
    return {name.strip(): colour.upper() for colour, name in found}


# Two colours a user tells apart at a glance, as CIE76 distance: the old RSS line was the
# second pinned run's colour (0) and the heap line near buffers' brown (15).
MIN_COLOUR_DISTANCE = 20.0


def test_process_lines_take_colours_no_other_series_or_pin_has(qtbot, window):
    window.resize(1280, 800)
    run_to_end(qtbot, window, steps=6)
    click(qtbot, window.findChild(QCheckBox, "process_memory_box"))
    memory = window.plots.memory_plot
    for theme in (LIGHT, DARK):
        window.theme_menu.apply(theme)
        window.plots.set_hover(3.4)
        entries = _named_swatches(memory)
        process = {n: entries[n] for n in ("process RSS", "malloc heap (CPU)")}
        for key, name in (("rss", "process RSS"), ("heap", "malloc heap (CPU)")):
            assert memory.curves[key].opts["pen"].color().name().upper() == process[name]
        # every series the app draws anywhere (as this plot would draw it) and every pin
        others = {f"pin {i}": memory.legend_color(c) for i, c in enumerate(PIN_COLORS)}
        others.update({n: c for n, c in entries.items() if n not in process})
        palette = {**CATEGORY_COLORS, **PHASE_COLORS, "total": TOTAL_COLOR,
                   "peak": PEAK_COLOR, "reserved": RESERVED_COLOR, "loss": LOSS_COLOR,
                   "grad norm": GRAD_NORM_COLOR, "toggle": TOGGLE_COLOR, "error": ERROR_COLOR,
                   "info": INFO_COLOR}
        others.update({f"{n} (palette)": memory.legend_color(c) for n, c in palette.items()})
        for name, colour in process.items():
            for other, theirs in [*others.items(), *((n, c) for n, c in process.items()
                                                      if n != name)]:
                distance = math.dist(_lab(colour), _lab(theirs.upper()))
                assert distance >= MIN_COLOUR_DISTANCE, (theme.name, name, colour, other,
                                                          theirs, round(distance, 1))
    window.theme_menu.apply(LIGHT)
