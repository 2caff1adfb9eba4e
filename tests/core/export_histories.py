"""Histories for the export tests, made by hand or scaled up from a real precise run."""

from __future__ import annotations

import numpy as np

from memlens.core.history import ALLOC_COLUMNS, SAMPLE_COLUMNS, STEP_COLUMNS, RunHistory
from memlens.core.records import (
    MEMORY_CATEGORIES,
    SAMPLE_PHASE_CODE,
    MemorySample,
    RunEvent,
    StepRecord,
)

CAT = {c: i for i, c in enumerate(MEMORY_CATEGORIES)}
META = {"config": {"preset": "mlp", "precise": True},
        "environment": {"device": "cpu", "precise": True, "torch": "test"}}


def step_record(step: int, time_s: float, peak: int, **ms: float) -> StepRecord:
    phases = {"zero_grad_ms": 1.0, "forward_ms": 2.0, "backward_ms": 3.0,
              "optimizer_ms": 1.0, "eval_ms": 0.0, **ms}
    return StepRecord(step=step, time_s=time_s, loss=1.0 / (step + 1), grad_norm=0.5,
                      step_ms=sum(phases.values()), allocated_bytes=peak // 2, peak_bytes=peak,
                      reserved_bytes=None, graph_nodes=7, saved_bytes=100, retained_bytes=0,
                      peak_is_exact=True, **phases)


def sample(step: int, phase: str, time_s: float, **cats: int) -> MemorySample:
    values = {c: cats.get(c, 0) for c in MEMORY_CATEGORIES}
    return MemorySample(step, phase, time_s, **values, heap=1_000_000 + step)


class Allocs:
    """Builds precise-mode rows: alloc(...) and free(...) in time order."""

    def __init__(self) -> None:
        self.rows: list[tuple] = []
        self._ids: dict[str, tuple] = {}
        self.next_id = 0

    def alloc(self, name: str, t_us: int, addr: int, nbytes: int, category: str,
              step: int = 0, phase: str = "forward", frames: str = "") -> None:
        sid = self.next_id
        self.next_id += 1
        self._ids[name] = (sid, addr, nbytes, CAT[category])
        self.rows.append((t_us, 0, sid, addr, nbytes, CAT[category], step, SAMPLE_PHASE_CODE[phase],
                          frames))

    def free(self, name: str, t_us: int, step: int = 0, phase: str = "forward") -> None:
        sid, addr, nbytes, cat = self._ids.pop(name)
        self.rows.append((t_us, 1, sid, addr, nbytes, cat, step, SAMPLE_PHASE_CODE[phase], ""))


def small_history() -> tuple[RunHistory, int]:
    """Two steps by hand: params at start, activations and grads come and go; its peak."""
    h = RunHistory()
    h.on_start(META)
    a = Allocs()
    frames = "/home/u/train.py:12:forward|/home/u/train.py:40:main"
    a.alloc("w", 0, 0x1000, 4000, "params", phase="start")
    a.alloc("b", 0, 0x3000, 400, "params", phase="start")
    h.add_sample(sample(0, "start", 0.001, params=4400))
    t = 10_000
    for step in range(2):
        base = t + step * 10_000
        if step == 1:
            a.free("gw", base + 50, step, "zero_grad")
        a.alloc("x", base + 100, 0x8000, 2000, "activations", step, "forward", frames)
        a.alloc("y", base + 200, 0x9000, 3000, "activations", step, "forward", frames)
        a.alloc("tmp", base + 300, 0xA000, 500, "other", step, "backward")
        a.alloc("gw", base + 400, 0xB000, 4000, "grads", step, "backward")
        a.free("tmp", base + 450, step, "backward")
        a.free("x", base + 500, step, "backward")
        a.free("y", base + 500, step, "backward")  # same microsecond: one timeline row
    h.on_allocations(a.rows)
    # peak: params 4400 + x 2000 + y 3000 + tmp 500 + gw 4000 = 13900 (in step 0 and 1)
    peak = 13_900
    for step in range(2):
        base_s = (t + step * 10_000) / 1e6
        # phases of 1, 2, 3 and 1 ms back to back: samples at their ends
        for phase, end_ms in (("zero_grad", 1), ("forward", 3), ("backward", 6),
                              ("optimizer", 7)):
            h.add_sample(sample(step, phase, base_s + end_ms / 1000, params=4400,
                               grads=4000 if phase != "forward" or step else 0,
                               activations=5000 if phase == "forward" else 0))
        h.add_step(step_record(step, base_s + 0.0075, peak))
    h.on_event(RunEvent(1, (t + 10_000) / 1e6, "toggle", key="zero_grad", old="set_to_none",
                        new="off"))
    h.on_event(RunEvent(1, (t + 15_000) / 1e6, "error", key="NaN loss", phase="forward",
                        message='loss = nan "quoted" ünïcode\nnewline',
                        explanation="the learning rate is too high"))
    h.on_finish({"steps_done": 2, "peak_bytes": peak})
    return h, peak


def tiled_history(real: RunHistory, steps: int, template_step: int | None = None
                  ) -> RunHistory:
    """A long history made by repeating one steady-state step of a real precise run.

    Rows before the template step are kept as they are; the template step's allocation
    rows, samples and step record are repeated with times shifted by the step's length and
    storage ids shifted by the ids one step allocates, so frees of storages from the
    previous step pair with the previous copy. That is the real tracker's event rate.
    """
    n_real = len(real.steps)
    k = template_step if template_step is not None else n_real // 2
    allocs = real.allocs.rows()
    col = {c: i for i, c in enumerate(ALLOC_COLUMNS)}
    in_step = allocs[:, col["step"]] == k
    prefix, template = allocs[allocs[:, col["step"]] < k], allocs[in_step]
    new = template[:, col["action"]] == 0
    ids = template[new, col["storage"]]
    first_id, stride = ids.min(), len(ids)
    period_us = np.ptp(template[:, col["t_us"]]) + 200.0
    copies = steps - k
    out = RunHistory()
    out.meta = dict(real.meta)
    out.frames = list(real.frames)
    tiled = np.tile(template, (copies, 1))
    shift = np.repeat(np.arange(copies, dtype=np.float64), len(template))
    tiled[:, col["t_us"]] += shift * period_us
    tiled[:, col["step"]] += shift
    moves = tiled[:, col["storage"]] >= first_id - stride
    tiled[moves, col["storage"]] += shift[moves] * stride
    out.allocs.extend(np.vstack([prefix, tiled]))
    for table, src, step_col in ((out.steps, real.steps, "step"),
                                 (out.samples, real.samples, "step")):
        rows = src.rows()
        idx = src.index
        head = rows[rows[:, idx[step_col]] < k]
        one = rows[rows[:, idx[step_col]] == k]
        many = np.tile(one, (copies, 1))
        s = np.repeat(np.arange(copies, dtype=np.float64), len(one))
        many[:, idx[step_col]] += s
        many[:, idx["time_s"]] += s * period_us / 1e6
        if "x" in idx:
            many[:, idx["x"]] += s
        table.extend(np.vstack([head, many]))
    out.summary = dict(real.summary or {}, steps_done=steps)
    return out


assert "peak_bytes" in STEP_COLUMNS and "x" in SAMPLE_COLUMNS
