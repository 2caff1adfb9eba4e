"""Small runs for tests: tiny sizes so a whole run takes well under a second."""

from __future__ import annotations

import numpy as np

from memlens.core.config import RunConfig, ScheduledChange
from memlens.core.controls import RunControls
from memlens.core.history import RunHistory
from memlens.core.loop import run_training
from memlens.core.records import SAMPLE_PHASE_CODE

TINY = {
    "mlp": {"batch_size": 32, "width": 64},
    "cnn": {"batch_size": 8, "width": 8},
    "lstm": {"batch_size": 4, "width": 32, "seq_len": 8},
    "gan": {"batch_size": 32, "width": 32},
    "transformer": {"batch_size": 4, "width": 32, "seq_len": 8},
}


def tiny_config(preset: str = "mlp", steps: int = 6, at: tuple[str, ...] = (), **values
                ) -> RunConfig:
    cfg = RunConfig().with_values({"preset": preset, "steps": steps, "eval_every": 0,
                                   **TINY[preset], **values})
    return cfg.with_schedule([ScheduledChange.parse(a) for a in at]) if at else cfg


def run(preset: str = "mlp", steps: int = 6, at: tuple[str, ...] = (), sink=None,
        heap_every_s: float | None = None, **values):
    """Run a tiny config; returns (history, summary). `heap_every_s`: run_training's (its
    default where None)."""
    cfg = tiny_config(preset, steps, at, **values)
    history = RunHistory()
    sinks = history if sink is None else _Both(history, sink)
    more = {} if heap_every_s is None else {"heap_every_s": heap_every_s}
    summary = run_training(cfg, RunControls(cfg.techniques, cfg.schedule), sinks, **more)
    return history, summary


def samples_at(history: RunHistory, phase: str, column: str) -> np.ndarray:
    """One column of the samples taken at the end of `phase`, in step order."""
    rows = history.samples.rows()
    idx = history.samples.index
    return rows[rows[:, idx["phase"]] == SAMPLE_PHASE_CODE[phase], idx[column]]


def steps_col(history: RunHistory, column: str) -> np.ndarray:
    return history.steps.column(column)


class _Both:
    def __init__(self, *sinks) -> None:
        self.sinks = sinks

    def __getattr__(self, name):
        def call(*args):
            for s in self.sinks:
                if hasattr(s, name):
                    getattr(s, name)(*args)

        return call
