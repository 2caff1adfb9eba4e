"""The synthetic producer keeps the engine's contract, so the window can be tested on it."""

from __future__ import annotations

import threading

from memlens.core.config import RunConfig
from memlens.core.controls import RunControls
from memlens.core.history import RunHistory
from memlens.core.synthetic import SyntheticProducer, synthetic_training


def test_toggles_apply_at_step_boundaries_and_are_reported_once():
    h = RunHistory()
    cfg = RunConfig(steps=30, eval_every=10).with_sets(["zero_grad=off"])
    summary = synthetic_training(cfg, sink=h)
    assert summary.steps_done == 30 and summary.stopped_by == "completed"
    gn = h.steps.column("grad_norm")
    assert (gn[1:] > gn[:-1]).all()  # off: gradients pile up
    assert h.summary["steps_done"] == 30
    assert h.meta["environment"]["memory_label"]


def test_lstm_without_detach_pauses_on_the_error_and_resumes():
    h = RunHistory()
    cfg = RunConfig(preset="lstm", steps=8).with_sets(["detach_state=false"])
    controls = RunControls(cfg.techniques)
    done = threading.Event()
    out = {}

    def run():
        out["summary"] = synthetic_training(cfg, controls, h, on_error="pause")
        done.set()

    t = threading.Thread(target=run)
    t.start()
    for _ in range(200):
        if controls.paused:
            break
        done.wait(0.01)
    assert controls.paused
    error = h.events()[-1]
    assert error.kind == "error" and "detach" in error.explanation
    controls.set("detach_state", True)
    controls.resume()
    t.join(10)
    assert out["summary"].stopped_by == "completed"
    assert h.steps.column("step")[-1] == 7


def test_producer_thread_runs_at_its_rate_until_stopped():
    h = RunHistory()
    p = SyntheticProducer(h, steps_per_s=2000, first_step=10)
    p.start()
    done = threading.Event()
    done.wait(0.3)
    p.stop()
    p.join(5)
    assert not p.is_alive()
    assert 100 < p.produced < 2000
    assert h.steps.column("step")[0] == 10
