"""Try the fix and Write the fix, driven as a user drives them: open a watched run, choose its
diagnosis in the events list, try the fix (it runs `main.py fix` in the background), read
the panel, see both runs pinned, write the fix after the confirmation."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox

from memlens.core import findings as dx
from memlens.core.watch.script import run_script
from tests.app.drive import click

SCRIPT = Path(__file__).parents[1] / "core" / "fix_scripts" / "kept_predictions.py"
STEPS = 6


def watched(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of a script with two bugs, watched: (the script, its run folder)."""
    script = tmp_path / "work" / SCRIPT.name
    script.parent.mkdir()
    shutil.copy(SCRIPT, script)
    folder = tmp_path / "runs" / "watched"
    assert run_script(str(script), ["--steps", str(STEPS)], out=folder, quiet=True) == 0
    return script, folder


def choose_diagnosis(qtbot, window, key: str):
    events = window.events_panel
    row = next(i for i, e in enumerate(events.events) if e.kind == "diagnosis" and e.key == key)
    item = events.list.item(row)
    qtbot.mouseClick(events.list.viewport(), Qt.LeftButton,
                     pos=events.list.visualItemRect(item).center())
    qtbot.waitUntil(lambda: events.fix_actions.isVisible())
    return events.events[row]


def test_try_the_fix_pins_both_runs_and_write_the_fix_backs_up_the_script(qtbot, window,
                                                                           tmp_path):
    script, folder = watched(tmp_path)
    original = script.read_text()
    assert window.open_run(folder)
    assert not window.events_panel.fix_actions.isVisible()  # no row chosen yet
    event = choose_diagnosis(qtbot, window, dx.GRAD_NOT_BACKWARDED)
    window.fixing.steps = STEPS
    pins_before = len(window.pins)
    with qtbot.waitSignal(window.fixing.finished, timeout=240_000) as done:
        click(qtbot, window.events_panel.fix_actions.try_button)
    out = Path(done.args[0])
    assert out == folder.with_name("watched-fix")
    panel = window.fixing.panel
    entries = json.loads((out / "fix.json").read_text())
    assert panel.entries == entries and {e["kind"] for e in entries} == {"no_grad", "item"}
    # the chosen diagnosis's fix is the one shown, with its diff and figures
    shown = panel.entries[panel.fixes.currentRow()]
    assert shown["where"] == event.where and shown["kind"] == "no_grad"
    detail = panel.detail.toPlainText()
    assert "+    with torch.no_grad():" in detail and "  held across steps" in detail
    assert "Results: unchanged" in detail
    # the original and the patched copy, the same steps, pinned side by side
    pins = window.pins[pins_before:]
    assert [p.name.split(":")[0] for p in pins] == ["original", "fixed"]
    assert [p.series.step_count for p in pins] == [STEPS, STEPS]
    retained = [p.series.history.steps.column("retained_bytes")[-1] for p in pins]
    assert retained[0] > 0 and retained[1] == 0
    assert script.read_text() == original  # tried, not written
    # Write the fix: a confirmation, then the script patched and its backup beside it
    assert panel.write_button.isEnabled()
    click(qtbot, panel.write_button)
    box = window.findChild(QMessageBox, "fix_write_confirm")
    assert box is not None and str(script) in box.text()
    with qtbot.waitSignal(box.finished):
        click(qtbot, box.button(QMessageBox.Yes))
    qtbot.waitUntil(lambda: window.findChild(QMessageBox, "fix_written") is not None)
    assert script.with_name(script.name + ".orig").read_text() == original
    assert script.read_text() == (out / "fixed" / script.name).read_text() != original


def test_try_the_fix_says_why_not_when_the_script_is_gone(qtbot, window, tmp_path):
    script, folder = watched(tmp_path)
    assert window.open_run(folder)
    choose_diagnosis(qtbot, window, dx.GRAPH_KEPT)
    script.unlink()
    click(qtbot, window.events_panel.fix_actions.try_button)
    box = window.findChild(QMessageBox, "fix_unavailable")
    assert box is not None and "cannot be found" in box.text()
    assert window.fixing.process is None and not folder.with_name("watched-fix").exists()
    # Write the fix before any try: told to try first, nothing written
    click(qtbot, window.events_panel.fix_actions.write_button)
    assert window.findChild(QMessageBox, "fix_write_none") is not None
