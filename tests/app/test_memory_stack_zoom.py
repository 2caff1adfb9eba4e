"""The stacked memory chart tells one story at every zoom (#49 item 4): a pixel that holds
several moments draws the stack of its lowest moment in the bands' colours and that of its
highest moment pale around it, each the layers of one real sample, so a category that comes
and goes within a step (activations between forward and backward) looks transient whether
one pixel holds a phase or a hundred steps; the legend never says "0 B" for a band it shows."""

from __future__ import annotations

import numpy as np
import pytest

from memlens.app.timeline.memory_plot import Y_UNIT
from memlens.app.timeline.plot_zoom import zoom_to_steps
from memlens.core.history import RunHistory
from memlens.core.records import MEMORY_CATEGORIES
from memlens.core.synthetic import _sizes, fill_history
from memlens.core.units import format_bytes
from tests.app.drive import wait_frames

STEPS = 3000
ACT = MEMORY_CATEGORIES.index("activations")


@pytest.fixture
def shown(qtbot, window):
    window.resize(1280, 800)
    history = RunHistory()
    fill_history(history, STEPS)  # activations held from forward to backward only
    window.show_history(history)
    wait_frames(qtbot, window, 2)
    return window, history


def drawn(window) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x, the solid stack (lowest moment) and the pale stack (highest), in bytes."""
    plot = window.plots.memory_plot
    x = np.asarray(plot.curves[MEMORY_CATEGORIES[0]].getData()[0])
    solid = np.array([plot.curves[c].getData()[1] for c in MEMORY_CATEGORIES]) * Y_UNIT
    pale = np.array([plot.peak_area.layer_data(i)[1]
                     for i in range(len(MEMORY_CATEGORIES))]) * Y_UNIT
    return x, solid, pale


def expected(history, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Straight from the history's columns: for each drawn point's bin (its samples from
    its x to the next point's), the stacked categories of the sample with the lowest and of
    the one with the highest total."""
    table = history.samples
    xs = table.column("x")
    cats = np.stack([table.column(c) for c in MEMORY_CATEGORIES])
    stacked = np.cumsum(cats, axis=0)
    total = table.column("total")
    low, high = [], []
    for j, start in enumerate(x):
        end = x[j + 1] if j + 1 < len(x) else np.inf
        rows = np.flatnonzero((xs >= start) & (xs < end))
        low.append(stacked[:, rows[np.argmin(total[rows])]])
        high.append(stacked[:, rows[np.argmax(total[rows])]])
    return np.array(low).T, np.array(high).T


@pytest.mark.parametrize("span", [None, 600, 200, 60, 10])
def test_every_drawn_stack_is_one_moment_and_activations_stay_transient(qtbot, shown, span):
    window, history = shown
    if span is not None:
        zoom_to_steps(window.plots, 1500, 1500 + span - 1)
    window.refresh_now()
    x, solid, pale = drawn(window)
    assert len(x) > 10
    low, high = expected(history, x)
    # each point but the last (its bin ends where the view's rows end, past the view)
    np.testing.assert_allclose(solid[:, :-1], low[:, :-1], rtol=1e-6)
    np.testing.assert_allclose(pale[:, :-1], high[:, :-1], rtol=1e-6)
    _, act = _sizes(history_config(history))
    thickness = lambda stack: stack[ACT] - stack[ACT - 1]  # noqa: E731
    if span is None:  # a pixel holds whole steps: its low moment has none, its high all
        assert np.all(thickness(solid) == 0)
        assert np.all(thickness(pale)[:-1] == act)  # the last bin may hold one sample
    elif span <= 60:  # a point a sample: forward's show them, the others not
        assert set(np.unique(thickness(solid))) == {0, act}
        np.testing.assert_array_equal(solid, pale)


def history_config(history):
    from memlens.core.config import RunConfig

    return RunConfig.from_dict(history.meta["config"])


def test_the_legend_reads_the_moment_the_chart_shows(qtbot, shown):
    window, history = shown
    window.refresh_now()
    legend = window.plots.memory_plot.getPlotItem().titleLabel.text
    _, act = _sizes(history_config(history))
    assert f"step {STEPS - 1} at its peak, after forward" in legend
    assert f"activations&nbsp;<b>{format_bytes(act).replace(' ', '&nbsp;')}</b>" in legend
    assert "activations&nbsp;<b>0&nbsp;B</b>" not in legend
    # hovering a step at full zoom reads that step's peak, as drawn
    window.plots.set_hover(1234.2)
    legend = window.plots.memory_plot.getPlotItem().titleLabel.text
    assert "step 1234 at its peak, after forward" in legend
    # zoomed in to a few steps, the hover reads the phase under the pointer
    zoom_to_steps(window.plots, 1230, 1236)
    window.refresh_now()
    window.plots.set_hover(1234.6)  # after backward: the activations are freed
    legend = window.plots.memory_plot.getPlotItem().titleLabel.text
    assert "step 1234 after backward" in legend and "at its peak" not in legend
