"""The StepRecorder's rules, the same for the lab's loop and a watch: a fake clock and a
fake probe stand in for the machine, so each rule is checked exactly."""

from __future__ import annotations

import pytest
import torch

from memlens.core.recorder.probe import RESCAN_GRADS, RESCAN_OPTIMIZER
from memlens.core.recorder.recorder import Recorder
from memlens.core.recorder.step import LONG_STEP_MS, SHORT_STEP_MS, StepRecorder
from memlens.core.records import MemorySample
from memlens.core.sinks import Sink


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class Probe:
    """Samples whose totals the test sets; counts heap reads."""

    edge = None

    def __init__(self) -> None:
        self.total = 1000
        self.heap_reads = 0
        self.rescans: list[tuple[str, int]] = []  # (phase, rescan) of each sample

    def sample(self, step, phase, time_s, carried=None, heap=None, rescan=0):
        if heap:
            self.heap_reads += 1
        self.rescans.append((phase, rescan))
        return MemorySample(step, phase, time_s, self.total, 0, 0, 0, 0,
                            heap=1 if heap else None)


class Collect(Sink):
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def on_samples(self, items):
        self.calls.append(("samples", [s.phase for s in items]))

    def on_steps(self, rows):
        self.calls.append(("steps", [(r.step, [s.phase for s in items]) for r, items in rows]))


def recorder(other_is_step=True, heap_every_s=0.0, flush_s=0.0, idle=False):
    clock, sink, probe = Clock(), Collect(), Probe()
    rec = Recorder(torch.device("cpu"), clock.t)
    rec.tick = clock
    sr = StepRecorder(rec, sink, list, other_is_step=other_is_step,
                      heap_every_s=heap_every_s, flush_s=flush_s, idle=idle)
    sr.use_probe(probe)
    return sr, clock, sink, probe


def end(sr):
    return sr.end_step(loss=1.0, grad_norm=0.0, nodes=0)


def test_time_is_charged_to_the_innermost_phase_and_samples_cost_nothing():
    sr, clock, _, _ = recorder(other_is_step=True)
    sr.begin_step(0)
    clock.t += 0.001  # 1 ms of the script's own code
    sr.enter("optimizer")
    clock.t += 0.002
    sr.enter("forward")  # a closure's forward inside the optimizer step
    clock.t += 0.004
    sr.leave()
    clock.t += 0.003
    sr.enter("my_phase")  # a phase of the user's own
    clock.t += 0.005
    sr.leave()
    sr.leave()
    record = end(sr)
    assert record.forward_ms == pytest.approx(4.0) and record.optimizer_ms == pytest.approx(5.0)
    assert sr.custom_ms == {"my_phase": pytest.approx(5.0)}
    assert record.step_ms == pytest.approx(1 + 5 + 4 + 5)  # the script's code is the step's


def test_the_labs_step_is_its_phases_only():
    sr, clock, _, _ = recorder(other_is_step=False)
    sr.begin_step(0)
    clock.t += 0.010  # memlens's own bookkeeping between phases
    sr.enter("backward")
    clock.t += 0.002
    sr.leave()
    assert end(sr).step_ms == pytest.approx(2.0)


def test_long_steps_hand_each_sample_on_short_ones_with_their_row():
    sr, clock, sink, _ = recorder()
    sr.begin_step(0)
    for phase in ("zero_grad", "forward"):
        sr.enter(phase)
        clock.t += (LONG_STEP_MS + 1) / 2e3
        sr.leave()
    end(sr)  # a long step: each sample went on as its phase ended
    assert sink.calls == [("samples", ["zero_grad"]), ("samples", ["forward"]),
                          ("steps", [(0, [])])]
    sink.calls.clear()
    sr.tune_for_step_length(SHORT_STEP_MS - 1)
    sr.begin_step(1)
    sr.enter("forward")
    sr.leave()
    sr.enter("my_phase")  # not one of PHASES: no sample
    sr.leave()
    end(sr)
    assert sink.calls == [("steps", [(1, ["forward"])])]


def test_a_long_step_without_detail_hands_its_samples_on_with_its_row_and_in_order():
    """A long step without detail (a watch's schedule) keeps its few carried samples to its
    row (each handed on at once woke the writer's thread, several times a step); where
    the detail comes mid-step (a model
    called from a new site), what it held goes on first, before the detailed samples."""
    sr, clock, sink, _ = recorder()
    sr.detailed = False
    sr.begin_step(0)
    for phase in ("zero_grad", "forward", "eval"):
        sr.enter(phase)
        clock.t += LONG_STEP_MS / 1e3
        sr.leave()
    end(sr)
    assert sink.calls == [("steps", [(0, ["zero_grad", "eval"])])]  # (eval: its end's too)
    sink.calls.clear()
    sr.begin_step(1)
    sr.enter("zero_grad")
    clock.t += LONG_STEP_MS / 1e3
    sr.leave()
    sr.detailed = True  # the detail from here on
    for phase in ("forward", "backward"):
        sr.enter(phase)
        clock.t += LONG_STEP_MS / 1e3
        sr.leave()
    end(sr)
    assert sink.calls == [("samples", ["zero_grad", "forward"]), ("samples", ["backward"]),
                          ("steps", [(1, [])])]


def test_rows_go_on_at_most_flush_s_apart_and_all_at_flush():
    sr, clock, sink, _ = recorder(flush_s=0.125)
    for step in range(4):  # steps of 1/32 s: the 4th ends 0.125 s after the last hand-off
        assert [c for c in sink.calls if c[0] == "steps"] == []
        sr.begin_step(step)
        sr.enter("backward")
        clock.t += 1 / 32
        sr.leave()
        end(sr)
    assert [c for c in sink.calls if c[0] == "steps"] == [
        ("steps", [(0, []), (1, []), (2, []), (3, [])])]
    sr.begin_step(4)
    end(sr)  # held: the last hand-off is new
    sr.flush()
    assert [r[0] for c in sink.calls if c[0] == "steps" for r in c[1]] == [0, 1, 2, 3, 4]


def test_the_heap_is_read_after_a_steps_first_forward_at_most_every_heap_every_s():
    sr, clock, _, probe = recorder(heap_every_s=0.25)
    for step in range(5):
        sr.begin_step(step)
        for _ in range(2):  # two forwards a step (a GAN): the first may read the heap
            sr.enter("forward")
            clock.t += 1 / 16
            sr.leave()
        end(sr)
    # first forwards end at 1/16, 3/16, 5/16, 7/16, 9/16 s: read at 1/16, 5/16 and 9/16
    assert probe.heap_reads == 3


def test_a_steps_peak_is_at_least_where_the_last_step_ended():
    sr, _, _, probe = recorder()
    sr.begin_step(0)
    probe.total = 5000
    sr.enter("optimizer")
    sr.leave()
    assert end(sr).peak_bytes == 5000
    sr.begin_step(1)
    probe.total = 2000  # zero_grad freed the gradients: lower than the last step's end
    sr.enter("zero_grad")
    sr.leave()
    assert end(sr).peak_bytes == 5000


def test_a_step_cut_short_hands_its_samples_on_without_a_row():
    sr, _, sink, _ = recorder()
    sr.tune_for_step_length(SHORT_STEP_MS - 1)
    sr.begin_step(0)
    sr.enter("forward")
    sr.leave()
    assert sink.calls == []
    sr.abandon_step()
    assert sink.calls == [("samples", ["forward"])]
    assert sr.tally.done == 0


def test_samples_reach_the_sink_in_step_order_when_a_long_step_follows_short_ones():
    # Short steps keep their samples with their row until the hand-off (flush_s); once a
    # step is long each sample goes on at once: the short steps' rows (and their samples)
    # go first, or a reader (the effects' search by step) finds step 3 before step 1.
    sr, clock, sink, _ = recorder(flush_s=10.0)
    steps: list[int] = []
    sink.on_samples = lambda items: steps.extend(s.step for s in items)
    sink.on_steps = lambda rows: steps.extend(s.step for _, items in rows for s in items)
    for step, seconds in enumerate((0.001, 0.001, 1.0, 0.001)):
        sr.begin_step(step)
        sr.enter("forward")
        clock.t += seconds
        sr.leave()
        if step < 3:
            end(sr)
    sr.flush()
    assert steps == [0, 1, 2, 3]


def test_a_step_without_detail_samples_at_zero_grad_evaluations_and_its_end_reading_what_changed():
    """A step without detail (a watch's schedule) samples as zero_grad and an evaluation end,
    and at its end: each sample reads anew the gradients (RESCAN_GRADS) and optimizer state
    (RESCAN_OPTIMIZER) that the phases left since the last sample can have changed, whatever
    its own phase; all of them are marked carried."""
    sr, clock, _, probe = recorder()
    sr.detailed = False
    sr.begin_step(0)
    for phase in ("zero_grad", "forward", "backward", "optimizer", "eval", "forward"):
        sr.enter(phase)
        clock.t += 0.001
        sr.leave()
    end(sr)
    assert probe.rescans == [("zero_grad", RESCAN_GRADS),
                             ("eval", RESCAN_GRADS | RESCAN_OPTIMIZER),
                             ("forward", 0)]  # the end: named after the last phase left
    sr.begin_step(1)
    sr.enter("backward")
    sr.leave()
    end(sr)  # nothing sampled since: the end's own sample reads the gradients
    assert probe.rescans[-1] == ("backward", RESCAN_GRADS)
