"""Config parsing and live controls: bad input is named, changes land at a step boundary."""

from __future__ import annotations

import threading

import pytest

from memlens.core.config import RunConfig, ScheduledChange
from memlens.core.controls import RunControls
from memlens.core.history import RunHistory
from memlens.core.loop import run_training
from memlens.core.options import ConfigError
from memlens.core.sinks import Sink
from tests.core.helpers import tiny_config


def test_set_parses_types_and_techniques():
    cfg = RunConfig().with_sets(["batch_size=64", "lr=0.01", "zero_grad=OFF", "amp=bf16",
                                 "precise=true"])
    assert cfg.batch_size == 64 and cfg.lr == 0.01 and cfg.precise is True
    assert cfg.techniques.zero_grad == "off" and cfg.techniques.amp == "bf16"


@pytest.mark.parametrize(("text", "names"), [
    ("batch_size=lots", ["batch_size", "'lots'", "whole number"]),
    ("zero_grad=sometimes", ["zero_grad", "set_to_none", "zeros", "off"]),
    ("optimiser=adam", ["unknown setting", "optimizer"]),
    ("lr=-1", ["lr", ">= 0"]),
    ("steps", ["KEY=VALUE"]),
])
def test_bad_values_name_the_key_and_the_valid_ones(text, names):
    with pytest.raises(ConfigError) as err:
        RunConfig().with_sets([text])
    for name in names:
        assert name in str(err.value)


def test_at_parses_and_rejects_non_live_keys():
    c = ScheduledChange.parse("50:zero_grad=off")
    assert (c.step, c.key, c.value) == (50, "zero_grad", "off")
    with pytest.raises(ConfigError, match="cannot change during a run"):
        ScheduledChange.parse("5:batch_size=3")
    with pytest.raises(ConfigError, match="STEP:KEY=VALUE"):
        ScheduledChange.parse("zero_grad=off")


def test_toml_file_with_techniques_and_schedule(tmp_path):
    f = tmp_path / "run.toml"
    f.write_text('preset = "cnn"\nsteps = 7\nat = ["3:amp=bf16"]\n'
                 '[techniques]\nno_grad_eval = false\n')
    cfg = RunConfig.from_toml(f)
    assert cfg.preset == "cnn" and cfg.steps == 7 and cfg.techniques.no_grad_eval is False
    assert cfg.schedule == (ScheduledChange(3, "amp", "bf16"),)
    assert RunConfig.from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize(("body", "words"), [
    ("preset = 'vgg'", ["preset", "'vgg'", "mlp"]),
    ("[techniques]\nturbo = true", ["techniques.turbo", "unknown"]),
    ("steps = = 3", ["not valid TOML"]),
])
def test_bad_toml_is_explained(tmp_path, body, words):
    f = tmp_path / "bad.toml"
    f.write_text(body)
    with pytest.raises(ConfigError) as err:
        RunConfig.from_toml(f)
    for w in words:
        assert w in str(err.value)


def test_live_change_applies_at_the_next_step_boundary_and_is_recorded_once():
    cfg = tiny_config("mlp", steps=8)
    controls = RunControls(cfg.techniques)
    history = RunHistory()
    seen: dict[int, str] = {}

    class FlipAtStep3(Sink):
        """Changes zero_grad from 'the GUI' while step 3 is being recorded."""

        def on_steps(self, rows):
            (r, _), = rows
            seen[r.step] = controls.toggles.zero_grad
            if r.step == 3:
                # Set from another thread, twice with the same value: one change.
                t = threading.Thread(target=lambda: (controls.set("zero_grad", "zeros"),
                                                     controls.set("zero_grad", "zeros")))
                t.start()
                t.join()
                assert controls.toggles.zero_grad == "set_to_none"  # not yet applied

    from memlens.core.sinks import FanOut

    run_training(cfg, controls, FanOut(history, FlipAtStep3()))
    toggles = [e for e in history.events() if e.kind == "toggle"]
    assert [(e.step, e.key, e.old, e.new) for e in toggles] == [
        (4, "zero_grad", "set_to_none", "zeros")]
    assert seen[3] == "set_to_none" and seen[4] == "zeros"


def test_bad_live_value_is_refused_at_once():
    controls = RunControls()
    with pytest.raises(ConfigError, match="amp"):
        controls.set("amp", "fp8")
    assert controls.pending() == {}


def test_stop_during_a_paused_run_ends_it():
    cfg = tiny_config("mlp", steps=1000)
    controls = RunControls(cfg.techniques)

    class PauseThenStop(Sink):
        def on_steps(self, rows):
            if any(r.step == 2 for r, _ in rows):
                controls.pause()
                threading.Timer(0.05, controls.stop).start()

    summary = run_training(cfg, controls, PauseThenStop())
    assert summary.stopped_by == "stopped" and summary.steps_done == 3


def test_atomic_files_get_the_usual_permissions(tmp_path):
    import os
    import stat

    from memlens.core.runfolder.atomic import atomic_write_text

    atomic_write_text(tmp_path / "a.txt", "x")
    with open(tmp_path / "b.txt", "w") as fh:
        fh.write("x")
    mode = stat.S_IMODE(os.stat(tmp_path / "a.txt").st_mode)
    assert mode == stat.S_IMODE(os.stat(tmp_path / "b.txt").st_mode)


def test_history_keeps_only_the_newest_graphs():
    from memlens.core.history import MAX_GRAPHS

    history = RunHistory()

    class G:
        def __init__(self, step):
            self.step = step

    for i in range(MAX_GRAPHS + 5):
        history.on_graph(G(i))
    assert len(history.graphs) == MAX_GRAPHS and history.graphs_seen == MAX_GRAPHS + 5
    assert history.graphs[-1].step == MAX_GRAPHS + 4 and history.graphs[0].step == 5


def test_every_setting_is_a_config_field_with_the_table_default():
    from dataclasses import fields

    from memlens.core.config import RunConfig, TechniqueToggles
    from memlens.core.options import RUN_OPTIONS, TECHNIQUE_OPTIONS

    run_fields = {f.name: f for f in fields(RunConfig)}
    tech_fields = {f.name: f for f in fields(TechniqueToggles)}
    for table, declared in ((RUN_OPTIONS, run_fields), (TECHNIQUE_OPTIONS, tech_fields)):
        for opt in table:
            assert opt.key in declared, f"option {opt.key} has no config field"
            assert declared[opt.key].default == opt.default, opt.key
    assert set(tech_fields) == {o.key for o in TECHNIQUE_OPTIONS}
