"""The two example scripts under watch: steps found as the script makes them, no false alarm."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from memlens.core.runfolder.reader import load_run
from memlens.core.watch.script import run_script

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def watched(tmp_path, name: str, *args: str):
    out = tmp_path / name
    code = run_script(str(EXAMPLES / name), list(args), out=out, quiet=True)
    return code, json.loads((out / "run.json").read_text()), load_run(out)


def test_rnn_lm_hand_written_update_one_backward_a_step(tmp_path):
    code, doc, history = watched(tmp_path, "rnn_lm.py", "--steps", "4")
    assert code == 0
    assert len(history.steps) == 4  # no optimizer: each backward ends a step
    assert [m["class"] for m in doc["summary"]["extra"]["models"]] == ["CharLM"]
    assert [e for e in doc["events"] if e["kind"] == "diagnosis"] == []
    assert (history.steps.column("optimizer_ms") == 0).all()
    assert (history.steps.column("graph_nodes") > 0).all()


def test_dcgan_two_models_two_optimizers_one_step_each_iteration(tmp_path):
    code, doc, history = watched(tmp_path, "dcgan.py", "--steps", "4", "--sample-every", "2")
    assert code == 0
    assert len(history.steps) == 4  # D's and G's optimizer steps make one step
    assert doc["summary"]["extra"]["optimizers"] == ["Adam", "Adam"]
    assert len(doc["summary"]["extra"]["models"]) == 2
    source = (EXAMPLES / "dcgan.py").read_text().splitlines()
    line = next(i for i, s in enumerate(source, 1) if "sample = netG(fixed_noise)" in s)
    found = {(e["key"], e["where"].rsplit(":", 1)[1]) for e in doc["events"]
             if e["kind"] == "diagnosis"}
    # the sample under grad, in train mode (BatchNorm): exactly what the script does
    assert found == {("forward under grad never backwarded", str(line)),
                     ("validation in train mode", str(line))}


def test_dcgan_samples_of_one_step_each_have_their_own_x(tmp_path):
    """D runs three times and zero_grad twice a step: each sample a place of its own on the
    memory plot, in the order taken, as loaded and as followed."""
    from memlens.core.records import SAMPLE_PHASE_CODE
    from memlens.core.runfolder.follow import RunFollower
    from memlens.core.watch.session import HEAP_EVERY_S

    code, _doc, history = watched(tmp_path, "dcgan.py", "--steps", "3", "--sample-every", "100")
    assert code == 0
    follower = RunFollower(tmp_path / "dcgan.py")
    follower.poll()
    for table in (history.samples, follower.history.samples):
        step, x = table.column("step"), table.column("x")
        assert (np.diff(x) > 0).all()  # never folds back, never two samples at one place
        assert ((x >= step) & (x < step + 1)).all()
        phases = list(table.column("phase")[step == 1])
        # G once, D three times, and the sample from fixed noise after step 0's update
        assert phases.count(SAMPLE_PHASE_CODE["forward"]) == 5
        assert phases.count(SAMPLE_PHASE_CODE["zero_grad"]) == 2
        # the process heap: after a step's first forward, at most every HEAP_EVERY_S
        read = ~np.isnan(table.column("heap"))
        assert read.any() and (table.column("phase")[read] == SAMPLE_PHASE_CODE["forward"]).all()
        assert all((read & (step == s)).sum() <= 1 for s in np.unique(step))
        assert (np.diff(table.column("time_s")[read]) >= HEAP_EVERY_S).all()


def test_preset_like_steps_keep_their_phase_positions():
    from memlens.core.history import PHASES_PER_STEP, spread_x
    from memlens.core.records import SAMPLE_PHASE_CODE

    phases = ["start", "zero_grad", "forward", "backward", "optimizer",
              "zero_grad", "forward", "backward", "optimizer", "eval"]
    steps = np.array([0, 0, 0, 0, 0, 1, 1, 1, 1, 1])
    codes = np.array([SAMPLE_PHASE_CODE[p] for p in phases])
    assert np.array_equal(spread_x(steps, codes), steps + codes / PHASES_PER_STEP)
    folded = spread_x(np.array([2, 2, 2, 2]), np.array([SAMPLE_PHASE_CODE[p] for p in
                                                        ["forward", "forward", "backward",
                                                         "zero_grad"]]))
    assert list(folded) == [2 + k / PHASES_PER_STEP for k in range(4)]
