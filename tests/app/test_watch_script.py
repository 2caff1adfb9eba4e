"""File > Watch a script…: a user's script run as a child under `memlens watch`, followed
live, its techniques toggled from the Techniques panel while it runs (AMP and zero_grad
here), paused, resumed and stopped from the run panel; each toggle is a marker on the plots
with its effect, and the run folder says the same."""

from __future__ import annotations

import json
from pathlib import Path

from PySide6.QtWidgets import QDialogButtonBox, QMessageBox

from memlens.core.records import SAMPLE_PHASE_CODE

SCRIPT = Path(__file__).resolve().parents[1] / "core" / "toggle_scripts" / "long_loop.py"
WAIT = 120_000  # a loaded machine: the child imports torch first


def _toggles(window):
    return [e for e in window.history.events() if e.kind == "toggle"] \
        if window.history is not None else []


def _steps(window) -> int:
    return window.series.step_count if window.series is not None else 0


def test_file_watch_a_script_toggles_amp_and_zero_grad_live_and_stops_it(qtbot, window,
                                                                        tmp_path):
    action = next(a for a in window.menuBar().actions()[0].menu().actions()
                  if a.objectName() == "watch_script_action")
    assert action.text() == "&Watch a script…"
    action.trigger()
    dialog = window.script_watch.dialog
    qtbot.waitExposed(dialog)
    # a wrong path first: said in the dialog, nothing starts
    dialog.script.setText(str(tmp_path / "missing.py"))
    dialog.findChild(QDialogButtonBox).button(QDialogButtonBox.Ok).click()
    assert dialog.isVisible() and "does not exist" in dialog.problem.text()
    assert not window.script_watch.alive
    dialog.script.setText(str(SCRIPT))
    dialog.args.setText("3000")
    dialog.cwd.setText(str(tmp_path))
    dialog.findChild(QDialogButtonBox).button(QDialogButtonBox.Ok).click()
    assert window.script_watch.alive
    panel = window.techniques_panel
    assert panel.title().startswith("Techniques (watched script")
    assert not panel.fields["accumulate"].widget.isEnabled()
    qtbot.waitUntil(lambda: _steps(window) >= 5 and window.state == "running", timeout=WAIT)

    # the panel says what the script does and what has nothing to act on
    uses = window.script_watch.view.uses.text()
    assert "the script calls zero_grad(set_to_none=True)" in uses
    assert not panel.fields["detach_state"].widget.isEnabled()
    assert "no carried state seen" in panel.fields["detach_state"].widget.toolTip()
    assert "AMP numerics" in panel.fields["amp"].widget.toolTip()

    panel.fields["amp"].widget.setCurrentText("bf16")  # as a user picks it
    qtbot.waitUntil(lambda: len(_toggles(window)) == 1, timeout=WAIT)
    amp = _toggles(window)[0]
    qtbot.waitUntil(lambda: _steps(window) >= amp.step + 4, timeout=WAIT)
    panel.fields["zero_grad"].widget.setCurrentText("zeros")
    qtbot.waitUntil(lambda: len(_toggles(window)) == 2, timeout=WAIT)
    zeros = _toggles(window)[1]
    assert (amp.key, amp.old, amp.new) == ("amp", "off", "bf16")
    assert (zeros.key, zeros.old, zeros.new) == ("zero_grad", "set_to_none", "zeros")
    assert zeros.step > amp.step

    # markers on every plot at the toggles' steps (drawn at the next frame)
    qtbot.waitUntil(lambda: all([m.value() for m in plot.markers][:2] == [amp.step, zeros.step]
                                for plot in window.plots.plots), timeout=WAIT)
    # pause, then resume: acknowledged by the child at a step boundary
    window.run_panel.pause_button.click()
    qtbot.waitUntil(lambda: window.state == "paused" and
                    (window.history.meta.get("techniques") or {}).get("paused"), timeout=WAIT)
    assert window.run_panel.pause_button.text() == "Resume"
    paused_at = _steps(window)
    window.run_panel.pause_button.click()
    qtbot.waitUntil(lambda: _steps(window) >= max(paused_at, zeros.step) + 11, timeout=WAIT)

    # the effects, as the lab computes them, in the events list and the effect line: each
    # comes with a later write of run.json than the steps' rows it is computed from
    def row(toggle: str) -> str:
        texts = [window.events_panel.list.item(i).text()
                 for i in range(window.events_panel.list.count())]
        return next(t for t in texts if toggle in t)

    qtbot.waitUntil(lambda: "at zero_grad" in row("zero_grad: set_to_none -> zeros"),
                    timeout=WAIT)
    amp_row, zero_row = row("amp: off -> bf16"), row("zero_grad: set_to_none -> zeros")
    assert "AMP numerics" in amp_row and "at zero_grad" in zero_row, zero_row
    assert window.effect_label.text().startswith("What just happened: zero_grad:")

    window.run_panel.stop_button.click()
    qtbot.waitUntil(lambda: not window.script_watch.alive, timeout=WAIT)
    qtbot.waitUntil(lambda: not window.following, timeout=WAIT)
    folder = window.script_watch.child.folder
    doc = json.loads((folder / "run.json").read_text())
    assert doc["finished"] is True and doc["summary"]["stopped_by"] == "stopped"
    events = [e for e in doc["events"] if e["kind"] == "toggle"]
    assert [(e["step"], e["key"], e["new"]) for e in events] == [
        (amp.step, "amp", "bf16"), (zeros.step, "zero_grad", "zeros")]
    # run.json's effect is the events list's, both from core.effects (its step time
    # interval may have narrowed with the steps after)
    memory = events[1]["effect"]["text"].split(", step time")[0].split(": ")[-1]
    assert memory.endswith("at zero_grad") and memory in zero_row
    assert events[1]["message"] in zero_row and events[1]["message"] in events[1]["effect"]["text"]
    # what the toggles moved: AMP's weight copies from its step, gradients kept from zeros'
    samples = window.history.samples.rows()
    idx = window.history.samples.index
    zg = samples[samples[:, idx["phase"]] == SAMPLE_PHASE_CODE["zero_grad"]]
    after = zg[zg[:, idx["step"]] >= zeros.step + 1, idx["grads"]]
    before = zg[(zg[:, idx["step"]] > 0) & (zg[:, idx["step"]] < zeros.step), idx["grads"]]
    params = 4 * (64 * 128 + 128 + 128 * 128 + 128 + 128 * 8 + 8)
    assert set(after) == {params} and set(before) == {0}
    fw = samples[samples[:, idx["phase"]] == SAMPLE_PHASE_CODE["forward"]]
    casts = fw[fw[:, idx["step"]] >= amp.step, idx["amp_casts"]]
    assert set(casts) == {2 * (128 * 128 + 128 * 8)}
    assert not panel.title().startswith("Techniques (watched script")  # given back
    assert panel.fields["accumulate"].widget.isEnabled()


def test_a_script_that_refuses_its_arguments_is_a_message(qtbot, window, tmp_path):
    script = tmp_path / "cli.py"
    script.write_text("import argparse\nargparse.ArgumentParser().parse_args()\n")
    assert window.script_watch.start(str(script), ["--epochs", "2"], str(tmp_path))
    qtbot.waitUntil(lambda: not window.script_watch.alive, timeout=WAIT)
    qtbot.waitUntil(lambda: window.findChild(QMessageBox, "watch_script_failed") is not None,
                    timeout=WAIT)
    box = window.findChild(QMessageBox, "watch_script_failed")
    assert "exit code 2" in box.windowTitle()
    assert "unrecognized arguments: --epochs 2" in box.text()
    assert window.state == "finished"


def test_a_toggle_on_a_script_that_never_trains_is_a_message(qtbot, window, tmp_path):
    script = tmp_path / "infer.py"
    script.write_text(
        "import torch\n"
        "model = torch.nn.Linear(8, 2)\n"
        "with torch.no_grad():\n"
        "    for _ in range(400):\n"
        "        model(torch.randn(4, 8))\n")
    assert window.script_watch.start(str(script), [], str(tmp_path))
    qtbot.waitUntil(lambda: window.history is not None and bool(window.history.meta),
                    timeout=WAIT)
    window.techniques_panel.fields["amp"].widget.setCurrentText("bf16")
    assert window.script_watch.sent == ["amp=bf16"]
    qtbot.waitUntil(lambda: not window.script_watch.alive, timeout=WAIT)
    qtbot.waitUntil(
        lambda: window.findChild(QMessageBox, "watch_script_not_applied") is not None,
        timeout=WAIT)
    box = window.findChild(QMessageBox, "watch_script_not_applied")
    assert box.text().startswith("amp=bf16: infer.py made no training step")
