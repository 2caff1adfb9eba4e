"""A watched program's phases: the stack of phases it is in (a forward inside an optimizer's
closure, a user's own phase), each phase's time, and a memory sample at the end of each
sampled phase, through the recorder's probe."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from memlens.core.records import PHASE_CODE, PHASES, MemorySample

# The process heap (mallinfo2, memory.csv's heap_bytes) after a step's first forward, at
# most this often: mallinfo2 walks malloc's free lists, tens of microseconds in a training
# process.
HEAP_EVERY_S = 0.2
_FORWARD = PHASE_CODE["forward"]
_SAMPLED = {p: PHASE_CODE[p] for p in PHASES}  # phases whose end is a memory sample


class Phases:
    def __init__(self, t0: float, carried_refs: Callable[[], list],
                 begin_phase: Callable[[int, str], None] | None) -> None:
        self.t0 = t0
        self.clock = time.perf_counter
        self._carried_refs = carried_refs  # the inputs a sample counts as `other`
        self._begin_phase = begin_phase  # precise mode files new storages under the phase
        self._idle = True
        self._stack: list[str] = ["other"]
        self.since = self._step_t0 = t0
        self.ms = dict.fromkeys(PHASES, 0.0)
        self.custom_ms: dict[str, float] = {}
        self.activity = False  # a phase entered since the last step ended
        self.probe = None
        self._edge = None  # CPU light mode: the native LightProbe's edge
        self.samples: list = []  # this step's: MemorySamples, or native row blocks
        self.step_peak = self.last_total = 0
        self._heap_read, self._heap_at = False, -math.inf

    def now(self) -> float:
        return self.clock() - self.t0

    # --- the probe ----------------------------------------------------------------------------
    def use_probe(self, probe, step: int) -> None:
        """A new probe (more models or optimizers found): the old one's figures first."""
        self.flush_edges(step)
        self.probe, self._edge = probe, probe.edge

    def python_samples(self, step: int) -> None:
        """From now on each sample is MemoryProbe.sample's (the native edges do not take
        AMP's weight copies apart from activations)."""
        if self._edge is not None:
            self.flush_edges(step)
            self._edge = None

    @property
    def native_edges(self) -> bool:
        return self._edge is not None

    def flush_edges(self, step: int) -> None:
        """The native edges' figures since the last flush, as this step's samples (made
        MemorySamples on the writer's thread: runfolder.writer.samples_of)."""
        if self._edge is None:
            return
        rows = self.probe.take_rows()
        if not rows:
            return
        peak, total = self.step_peak, 0
        for total in self.probe.row_totals(rows):
            if total > peak:
                peak = total
        self.last_total, self.step_peak = total, peak
        self.samples.append(self.probe.edge_block(step, rows))

    def _account(self, s: MemorySample) -> None:
        total = s.allocated if s.allocated is not None else s.total
        self.last_total = total
        self.step_peak = max(self.step_peak, total)
        self.samples.append(s)

    # --- phases ----------------------------------------------------------------------------------
    def _charge(self, now: float) -> None:
        name = self._stack[-1]
        ms = self.ms
        if name in ms:
            ms[name] += (now - self.since) * 1e3
        elif name != "other":
            self.custom_ms[name] = self.custom_ms.get(name, 0.0) + (now - self.since) * 1e3

    def enter(self, name: str, step: int) -> None:
        self.activity = True
        now = self.clock()
        if self._idle:  # the first step starts at the program's first phase, not at import
            self._idle = False
            self._step_t0 = self.since = now
        self._charge(now)
        self._stack.append(name)
        self.since = now
        if self._begin_phase is not None:
            self._begin_phase(step, name)

    def leave(self, step: int) -> str:
        self._charge(self.clock())
        stack = self._stack
        name = stack.pop() if len(stack) > 1 else "other"
        code = _SAMPLED.get(name)
        if code is not None and self.probe is not None:
            # The heap once a step, after its first forward (mallinfo2 walks malloc's lists).
            heap = code == _FORWARD and not self._heap_read
            if heap:
                self._heap_read = True
                now = self.clock()  # and at most HEAP_EVERY_S apart (see there)
                heap = now - self._heap_at >= HEAP_EVERY_S
                if heap:
                    self._heap_at = now
            if self._edge is not None:
                self._edge(code, self._carried_refs(), heap)
            else:
                self._account(self.probe.sample(step, name, self.now(), heap=heap))
        self.since = self.clock()  # a sample's own cost is no phase's time
        return name

    def sample_inside(self, step: int) -> None:
        """A sample inside the phase under way, named as it (a sharded model's memory at its
        height: FSDP about to free a block's gathered parameters); its cost is no phase's."""
        name = self._stack[-1]
        code = _SAMPLED.get(name)
        if code is None or self.probe is None:
            return
        self._charge(self.clock())
        if self._edge is not None:
            self.probe.sample_inside(code, self._carried_refs())
        else:
            self._account(self.probe.sample(step, name, self.now(), heap=False))
        self.since = self.clock()

    # --- a step's end ----------------------------------------------------------------------------
    def end_step(self, step: int) -> tuple[dict[str, float], float]:
        """The ending step's phase times and its wall time (ms); its samples are flushed."""
        now = self.clock()
        self._charge(now)
        self.since = now
        step_ms = (now - self._step_t0) * 1e3
        self._step_t0 = now
        self.flush_edges(step)
        return dict(self.ms), step_ms

    def take_samples(self) -> list:
        out, self.samples = self.samples, []
        return out

    def next_step(self) -> None:
        self.ms = dict.fromkeys(PHASES, 0.0)
        self.step_peak = self.last_total
        self._heap_read = False
        self.activity = False
        self.since = self.clock()
