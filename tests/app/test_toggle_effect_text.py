""""What just happened" says one text, core's (#49 item 6): the same words on screen as in
run.json, and where the machine's load swamps the step times, that it was too busy to
measure time instead of a noise band of thousands of percent."""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np

from memlens.app.app_settings import AppSettings
from memlens.app.window.main_window import MainWindow
from memlens.core.config import RunConfig, ScheduledChange
from memlens.core.effects import TOO_BUSY
from memlens.core.synthetic import synthetic_training


def loaded_machine(spread: float, burst: float, seed: int, burst_from: int = 0):
    """synthetic_training on a machine whose load multiplies each step's time: by a
    log-normal factor of `spread`, and from step `burst_from` on, in bursts, by `burst`."""

    def train(config, controls, sink, on_error="pause"):
        rng = np.random.default_rng(seed)

        class Loaded:
            def __getattr__(self, name):
                return getattr(sink, name)

            def on_steps(self, rows):
                for record, items in rows:
                    factor = float(np.exp(spread * rng.standard_normal()))
                    if rng.random() < 0.25 and record.step >= burst_from:
                        factor *= burst
                    sink.on_steps([(dataclasses.replace(record, step_ms=record.step_ms * factor),
                                    items)])

        return synthetic_training(config, controls, Loaded(), on_error=on_error,
                                  steps_per_s=300)

    return train


def run_with_toggle(qtbot, tmp_path, train, steps: int) -> MainWindow:
    window = MainWindow(runs_dir=tmp_path / "runs", train_fn=train,
                        settings=AppSettings.at(tmp_path / "s.ini"))
    qtbot.addWidget(window)
    window.show()
    config = RunConfig(preset="mlp", steps=steps).with_schedule(
        [ScheduledChange(20, "zero_grad", "off")])
    window.start_config(config)
    qtbot.waitUntil(lambda: window.state == "finished", timeout=60_000)
    window.refresh_now()
    return window


def saved_effect(window) -> str:
    doc = json.loads((window.session.folder / "run.json").read_text())
    (toggle,) = [e for e in doc["events"] if e["kind"] == "toggle"]
    return toggle["effect"]["text"]


def test_the_live_effect_text_is_the_one_run_json_saves(qtbot, tmp_path):
    # The load bursts start once the toggle's window is full: the noise splits measured
    # around it at the run's end are not those of its first measure.
    window = run_with_toggle(qtbot, tmp_path, loaded_machine(0.2, 1.8, seed=5, burst_from=60),
                             steps=400)
    shown = window.effect_label.text().removeprefix("What just happened: ")
    saved = saved_effect(window)
    assert shown == saved
    row, event = next((i, e) for i, e in enumerate(window.events_panel.events)
                      if e.kind == "toggle")
    assert window.events_panel.list.item(row).text().endswith(
        saved.removeprefix(event.label()).lstrip(": "))  # and on its row of the events
    assert re.search(r"step time (within noise \(±\d+%\)|[+-]\d+%)", saved), saved
    assert TOO_BUSY not in saved


def test_a_machine_too_busy_to_time_steps_is_said_in_words(qtbot, tmp_path):
    window = run_with_toggle(qtbot, tmp_path, loaded_machine(0.6, 40.0, seed=2), steps=120)
    saved = saved_effect(window)
    shown = window.effect_label.text()
    assert TOO_BUSY in saved and TOO_BUSY in shown
    assert not re.search(r"±\d{3,}%", shown + saved)  # no band of hundreds of percent
    assert "zero_grad" in shown and "at zero_grad" in shown  # the memory figure stays
    assert re.search(r"±\d+%", window.effect_label.toolTip())  # the band, in the details
