"""A watched run's steps without detail (core.watch.detail) on the memory plot: hatched,
step by step as memory.csv marks them, and the legend says what the hatch means, so their
activations are never read as measured; on the loss plot the grad norm, taken with the
detail, is a line through the steps that have one."""

from __future__ import annotations

import csv
import re

import numpy as np
import pyqtgraph as pg

from memlens.core.units import format_number
from memlens.core.watch.script import run_script
from tests.app.drive import wait_frames
from tests.core.test_watch_detail import LOOP


def _carried_steps(folder) -> set[int]:
    """The steps memory.csv marks carried, read from the file."""
    with open(folder / "memory.csv", newline="") as fh:
        return {int(r["step"]) for r in csv.DictReader(fh) if r["carried"] == "1"}


def _hatched_steps(spans: tuple[np.ndarray, np.ndarray]) -> set[int]:
    out: set[int] = set()
    for a, b in zip(*spans, strict=True):
        assert a == int(a) and b == int(b)  # whole steps, at full resolution
        out.update(range(int(a), int(b)))
    return out


def test_steps_without_detail_are_hatched_on_the_memory_plot(qtbot, window, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(LOOP)
    folder = tmp_path / "run"
    assert run_script(str(script), ["24", "1000"], out=folder, quiet=True, detail=4) == 0
    carried = _carried_steps(folder)
    assert carried and 0 not in carried  # the first steps take the detail

    assert window.open_run(folder)
    memory = window.findChild(pg.PlotWidget, "memory_plot")
    qtbot.waitUntil(lambda: window.series is not None
                    and window.series.step_count == 24, timeout=10_000)
    wait_frames(qtbot, window, 3)
    hatch = memory.carried
    assert hatch.isVisible()
    assert _hatched_steps((hatch.starts, hatch.ends)) == carried
    window.plots.refresh_legends()
    legend = memory.getPlotItem().titleLabel.text.replace("&nbsp;", " ")
    assert "&#9636;</span> hatched: steps without detail" in legend

    # the hover over a carried step says its activations are carried; over a detailed one not
    step = min(carried)
    text = memory.legend_at(window.series, step + 0.99, []).replace("&nbsp;", " ")
    assert "carried, not measured at this step" in text
    text = memory.legend_at(window.series, 0.99, []).replace("&nbsp;", " ")
    assert "not measured at this step" not in text


def test_a_run_with_every_step_detailed_has_no_hatch(qtbot, window, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(LOOP)
    folder = tmp_path / "run"
    assert run_script(str(script), ["8", "1000"], out=folder, quiet=True,
                      detail="every") == 0
    assert not _carried_steps(folder)
    assert window.open_run(folder)
    qtbot.waitUntil(lambda: window.series is not None
                    and window.series.step_count == 8, timeout=10_000)
    wait_frames(qtbot, window, 3)
    memory = window.findChild(pg.PlotWidget, "memory_plot")
    assert not len(memory.carried.starts)
    window.plots.refresh_legends()
    assert "hatched" not in memory.getPlotItem().titleLabel.text


def test_the_grad_norm_is_a_line_through_the_steps_that_took_it(qtbot, window, tmp_path):
    """detail=4: steps.csv has a grad norm on the detailed steps only; the loss plot's grad
    norm line goes through exactly those (the loss line's x at those rows, the file's
    values), and the hover over a step without one says it was not taken there."""
    script = tmp_path / "train.py"
    script.write_text(LOOP)
    folder = tmp_path / "run"
    assert run_script(str(script), ["24", "1000"], out=folder, quiet=True, detail=4) == 0
    with open(folder / "steps.csv", newline="") as fh:
        norms = {int(r["step"]): float(r["grad_norm"]) for r in csv.DictReader(fh)
                 if r["grad_norm"] != ""}
    assert 2 <= len(norms) < 24
    assert window.open_run(folder)
    qtbot.waitUntil(lambda: window.series is not None
                    and window.series.step_count == 24, timeout=10_000)
    wait_frames(qtbot, window, 3)
    loss = window.findChild(pg.PlotWidget, "loss_plot")
    loss_x, _ = loss.curves["loss"].getData()
    x, y = loss.curves["grad_norm"].getData()
    steps = sorted(norms)
    assert np.array_equal(x, loss_x[steps])
    assert np.allclose(y, [norms[s] for s in steps], rtol=1e-6)

    def shown(step: int) -> str:  # the grad norm's entry of the hover legend
        text = loss.legend_at(window.series, step + 0.5, []).replace("&nbsp;", " ")
        return re.sub(r"<[^>]+>", "", text.split("grad norm", 1)[1]).strip()

    assert shown(steps[-1]).split()[0] == format_number(norms[steps[-1]])
    assert shown(min(set(range(24)) - set(norms))).startswith("not taken at this step")
