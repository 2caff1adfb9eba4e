"""A stand-in for memlens.core.loop.run_training that makes believable records without torch.

It keeps the engine's contract (same sink calls, same RunControls handling, toggle and error
events, pause on error), so the window, its tests and the GUI-under-load benchmark can drive
the app at any step rate. Memory follows the techniques roughly as the real loop's does:
`zeros` keeps gradient bytes at zero_grad, `off` makes the grad norm grow, lstm without
detach fails in backward unless retain_graph, where activations then grow every step.
No Qt and no torch here.
"""

from __future__ import annotations

import math
import threading
import time

import numpy as np

from memlens.core.config import RunConfig
from memlens.core.controls import RunControls
from memlens.core.history import RunHistory, step_values
from memlens.core.records import MemorySample, RunEvent, RunSummary, StepRecord, samples_of
from memlens.core.runfolder.header import run_header

ENVIRONMENT = {
    "torch": "synthetic",
    "device": "cpu",
    "memory_source": "synthetic",
    "memory_label": "synthetic records (no torch)",
    "timing": "synthetic",
}
BACKWARD_TWICE = (
    "Trying to backward through the graph a second time (or directly access saved tensors "
    "after they have already been freed)."
)
BACKWARD_TWICE_EXPLAINED = (
    "The hidden state carried from the previous batch still belongs to that batch's graph, "
    "whose saved tensors were freed by its backward. Detach the carried state each batch "
    "(detach_state=true), or keep the old graphs alive with retain_graph=true, which makes "
    "every step slower and larger."
)


def _sizes(config: RunConfig) -> tuple[int, int]:
    """(parameter bytes, forward activation bytes) for the preset at its size."""
    width = config.width or 256
    batch = config.batch_size or 64
    params = 4 * (3 * width * width + 10 * width)
    activations = 4 * batch * width * (12 if config.preset in ("lstm", "transformer") else 6)
    return params, activations


class _Model:
    """The synthetic training state: bytes per category and the gradient history."""

    def __init__(self, config: RunConfig) -> None:
        self.params, self.act_per_step = _sizes(config)
        self.grads = 0
        self.optimizer = 0
        self.activations = 0
        self.other = 4096
        self.carried = 0  # lstm without detach: activations kept alive across steps
        self.unclear = 0  # micro-batches of gradient summed since the last clear
        self.graph_freed = False  # the carried state points into a graph already freed
        self.rng = np.random.default_rng(config.seed)


def synthetic_training(
    config: RunConfig,
    controls: RunControls | None = None,
    sink=None,
    *,
    on_error: str = "stop",
    steps_per_s: float | None = None,
) -> RunSummary:
    """Run `config.steps` synthetic steps into `sink`, paced at `steps_per_s` if given."""
    controls = controls or RunControls(config.techniques, config.schedule)
    sink = sink or RunHistory()
    t0 = time.perf_counter()
    m = _Model(config)
    sink.on_start({**run_header("lab", config=config.to_dict()),
                   "environment": dict(ENVIRONMENT)})

    def now() -> float:
        return time.perf_counter() - t0

    def sample(step: int, phase: str) -> None:
        sink.on_samples([MemorySample(step, phase, now(), m.params, m.grads, m.optimizer,
                                      m.activations, m.other)])

    sample(0, "start")
    # Running figures, as the real loop keeps them: nothing a step grows but the history.
    steps_done, stopped_by, error, peak, last_loss, ms_sum = 0, "completed", None, 0, math.nan, 0.0
    for step in range(config.steps):
        if controls.paused and not controls.wait_while_paused():
            stopped_by = "stopped"
            break
        if controls.stop_requested:
            stopped_by = "stopped"
            break
        t, changes = controls.begin_step(step)
        for key, old, new in changes:
            sink.on_event(RunEvent(step, now(), "toggle", key, old, new))
        if steps_per_s:
            ahead = step / steps_per_s - now()
            if ahead > 0.0005:
                time.sleep(ahead)
        record, failed = _one_step(config, t, m, step, sample, now)
        if failed is not None:
            sink.on_event(failed)
            error = failed
            if on_error != "pause":
                stopped_by = "error"
                break
            controls.pause()
            continue
        sink.on_steps([(record, ())])
        steps_done += 1
        peak = max(peak, record.peak_bytes)
        last_loss = record.loss
        ms_sum += record.step_ms
    summary = RunSummary(
        steps_done=steps_done, stopped_by=stopped_by, wall_s=now(),
        final_loss=last_loss, peak_bytes=peak,
        mean_step_ms=ms_sum / steps_done if steps_done else math.nan, error=error,
    )
    sink.on_finish(summary.to_dict())
    return summary


def _one_step(config, t, m: _Model, step, sample, now) -> tuple[StepRecord | None, RunEvent | None]:
    jitter = 1.0 + 0.05 * m.rng.standard_normal()
    amp_scale = 0.55 if t.amp != "off" else 1.0
    clear = step % t.accumulate == 0
    if clear and t.zero_grad == "set_to_none":
        m.grads = 0
    elif clear and t.zero_grad == "zeros" and m.grads:
        m.grads = m.params
    if clear and t.zero_grad != "off":
        m.unclear = 0
    sample(step, "zero_grad")

    act = int(m.act_per_step * amp_scale)
    carried = config.preset == "lstm" and not t.detach_state
    if not carried:
        m.carried = 0
        m.graph_freed = False
    m.activations = act + m.carried
    if t.leak_cache:
        m.other += act // 4
    sample(step, "forward")

    if carried and m.graph_freed:
        return None, RunEvent(step, now(), "error", "backward_twice", phase="backward",
                              message=BACKWARD_TWICE, explanation=BACKWARD_TWICE_EXPLAINED)
    m.grads = m.params
    m.unclear += 1
    # Without detach the carried state chains every step's graph; retain_graph keeps them.
    m.carried = m.carried + act if carried and t.retain_graph else 0
    m.graph_freed = carried and not t.retain_graph
    m.activations = m.carried
    sample(step, "backward")

    stepped = (step + 1) % t.accumulate == 0
    if stepped:
        m.optimizer = 2 * m.params + 8 * 6
    sample(step, "optimizer")

    eval_ms = 0.0
    if config.eval_every and (step + 1) % config.eval_every == 0:
        m.activations = m.carried + (act // 4 if t.no_grad_eval else act)
        if t.leak_loss_sum and not t.no_grad_eval:
            m.other += act // 2
        eval_ms = 0.8 * jitter * (0.8 if t.no_grad_eval else 1.0)
        sample(step, "eval")
        m.activations = m.carried
    if t.leak_loss_sum:
        m.other += 4

    grow = 1.0 + 0.02 * (m.carried / max(m.act_per_step, 1))
    ms = [0.05 * jitter, 1.0 * jitter * amp_scale * grow, 2.0 * jitter * amp_scale * grow,
          0.5 * jitter, eval_ms]
    loss = 2.3 * math.exp(-step / 150) + 0.05 * abs(m.rng.standard_normal())
    total = m.params + m.grads + m.optimizer + m.activations + m.other
    peak = total + act
    record = StepRecord(
        step=step, time_s=now(), loss=loss, grad_norm=(0.8 + 0.1 * jitter) * m.unclear,
        step_ms=sum(ms), zero_grad_ms=ms[0], forward_ms=ms[1], backward_ms=ms[2],
        optimizer_ms=ms[3], eval_ms=ms[4], allocated_bytes=total, peak_bytes=peak,
        reserved_bytes=None, graph_nodes=12 + (step if carried else 0), saved_bytes=act,
        retained_bytes=m.carried, optimizer_stepped=stepped,
    )
    return record, None


def fill_history(history: RunHistory, steps: int, config: RunConfig | None = None) -> None:
    """Put `steps` finished synthetic steps (5 phase samples each) into `history` at once.

    Built with numpy, so a million samples take well under a second: the benchmark's
    "history already holds 1,000,000 samples" set-up.
    """
    config = config or RunConfig(steps=steps)
    params, act = _sizes(config)
    s = np.arange(steps, dtype=np.float64)
    history.on_start({"config": config.to_dict(), "environment": dict(ENVIRONMENT)})
    first = MemorySample(0, "start", 0.0, params, 0, 0, 0, 4096)
    history.add_sample(first)
    phases = 4
    rows = np.zeros((steps, phases, len(history.samples.columns)))
    idx = history.samples.index
    rows[:, :, idx["step"]] = s[:, None]
    rows[:, :, idx["phase"]] = np.arange(1, phases + 1)
    rows[:, :, idx["x"]] = s[:, None] + np.arange(1, phases + 1) / 6
    rows[:, :, idx["time_s"]] = (s[:, None] + np.arange(1, phases + 1) / 6) * 1e-3
    rows[:, :, idx["params"]] = params
    rows[:, 1:, idx["grads"]] = params
    rows[:, :, idx["optimizer"]] = 2 * params
    rows[:, 0, idx["optimizer"]] = np.where(s > 0, 2 * params, 0)
    rows[:, 1, idx["activations"]] = act
    rows[:, :, idx["other"]] = 4096
    cats = [idx[c] for c in ("params", "grads", "optimizer", "activations", "other")]
    rows[:, :, idx["total"]] = rows[:, :, cats].sum(axis=2)
    rows[:, :, idx["allocated"]] = np.nan
    rows[:, :, idx["reserved"]] = np.nan
    rows[:, :, idx["heap"]] = np.nan
    rows[:, :, idx["rss"]] = np.nan
    history.samples.extend(rows.reshape(-1, rows.shape[2]))
    template = StepRecord(0, 0.0, 1.0, 1.0, 3.55, 0.05, 1.0, 2.0, 0.5, 0.0,
                          params * 3 + 4096, params * 3 + act + 4096, None, 12, act, 0)
    st = np.tile(np.asarray(step_values(template)), (steps, 1))
    sidx = history.steps.index
    st[:, sidx["step"]] = s
    st[:, sidx["time_s"]] = s * 1e-3
    st[:, sidx["loss"]] = 2.3 * np.exp(-s / 150) + 0.05
    history.steps.extend(st)


class SyntheticProducer(threading.Thread):
    """A producer thread: synthetic steps into a history at a fixed rate until stopped."""

    def __init__(self, history: RunHistory, steps_per_s: float, steps: int = 10**9,
                 config: RunConfig | None = None, first_step: int = 0) -> None:
        super().__init__(name="synthetic-producer", daemon=True)
        self.history = history
        self.steps_per_s = steps_per_s
        self.config = config or RunConfig(steps=steps, eval_every=0)
        self.controls = RunControls(self.config.techniques)
        self.first_step = first_step
        self.produced = 0
        self.summary: RunSummary | None = None

    def run(self) -> None:
        sink = _Offset(self.history, self.first_step, self)
        self.summary = synthetic_training(self.config, self.controls, sink,
                                          steps_per_s=self.steps_per_s)

    def stop(self) -> None:
        self.controls.stop()


class _Offset:
    """Shifts step numbers so a producer can continue a prefilled history."""

    def __init__(self, history: RunHistory, offset: int, producer: SyntheticProducer) -> None:
        self.history, self.offset, self.producer = history, offset, producer

    def on_start(self, meta: dict) -> None:
        if not self.history.meta:
            self.history.on_start(meta)

    def on_samples(self, items) -> None:
        for s in samples_of(items):
            if s.phase == "start" and self.offset:
                continue
            self.history.add_sample(
                MemorySample(s.step + self.offset, s.phase, s.time_s, s.params, s.grads,
                             s.optimizer, s.activations, s.other))

    def on_steps(self, rows) -> None:
        for r, items in rows:
            self.on_samples(items)
            r.step += self.offset
            self.history.add_step(r)
            self.producer.produced += 1

    def on_event(self, e: RunEvent) -> None:
        e.step += self.offset
        self.history.on_event(e)

    def on_graph(self, snapshot) -> None:
        self.history.on_graph(snapshot)

    def on_finish(self, summary: dict) -> None:
        self.history.on_finish(summary)
