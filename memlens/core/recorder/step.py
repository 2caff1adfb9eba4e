"""The step, measured: one phase clock, the phases a step is in, a memory sample at the end
of each, the step's peak, its record, and when all of it reaches the sink.

Every producer drives one `StepRecorder`: the lab's loop (core.training: its phases one after
the other), a watched script (core.watch: phases nested as the program calls them, a
forward inside an optimizer's closure, a user's own phase) and the framework callbacks
through the watch. A driver says where phases begin and end and what ends a step; the rules
of measuring them are here, once:

- Time: the recorder's clock (Recorder.tick). `enter` charges the time since the last edge
  to the phase it leaves and starts the new one; `leave` charges the phase it ends. A
  sample's own cost is charged to no phase. The time outside any phase ("other") is part of
  a step where the driver says so (`other_is_step`: a script's own code between calls is
  its step; the lab's loop has none, only memlens's bookkeeping).
- Samples: at the end of each of PHASES (and where the driver asks, `sample`). Where steps
  are short (SHORT_STEP_MS, with hysteresis up to LONG_STEP_MS) a sample stays with its step
  until the step's row is handed on, on the native edge where one is built (kept in C,
  made a MemorySample on the writer's thread); once steps are long each is handed on at
  once, so a live view sees a forward's rise before the backward runs.
- The heap (mallinfo2, with the resident size): after a step's first forward, at most every
  `heap_every_s`.
- A step without detail (`detailed` False: a watch's schedule, core.watch.detail) takes one
  sample, at its end, named after the last sampled phase it left: its parameters,
  gradients and optimizer state are measured; what is saved for backward is what the
  detailed steps' tracking still sees, marked `carried`; so are a detailed step's while
  a graph a step without detail made is alive unreleased (`incomplete`: what it saved is
  in no figure).
- Peak: a step's peak is the largest sample of the step, and at least where the last step
  ended (memory at the step's start is the step's too).
- Hand-off: an ended step's row goes to the sink at once where the last hand-off is
  `flush_s` old (0: every step), else with the next; a step without detail's samples (at
  most a few, carried: no live view waits for them) go with its row however long the step,
  not each at once (on a 50 ms dcgan step each of four or five posts a step woke the
  writer's thread: py-spy put 0.47% of the step in RunWriter._post); precise mode's
  allocation rows go at a step's end once ALLOC_FLUSH_ROWS are waiting or the last went
  ALLOC_FLUSH_S ago (a few hundred rows a short step: handed on each step, their blocks
  cost more than the rows).
  `flush()` hands on everything.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from memlens.core.recorder.probe import (
    GRADS_CHANGE,
    OPT_CHANGES,
    RESCAN_GRADS,
    RESCAN_OPTIMIZER,
)
from memlens.core.recorder.recorder import Recorder
from memlens.core.records import (
    PHASES,
    SAMPLE_PHASE_CODE,
    SAMPLE_PHASES,
    MemorySample,
    SampleItem,
    StepRecord,
    StepRow,
)
from memlens.core.sinks import RunSink

SHORT_STEP_MS = 30.0  # steps shorter than this are short until one takes LONG_STEP_MS
LONG_STEP_MS = 60.0
ALLOC_FLUSH_ROWS = 2048  # precise mode: alloc/free rows waiting before they are handed on
ALLOC_FLUSH_S = 0.1  # or once they are this old at a step's end (a live view draws at 30 Hz)
# The process heap (mallinfo2, memory.csv's heap_bytes) and RSS after a step's first forward,
# at most this often: mallinfo2 walks malloc's free chunks, scattered over the arena and cold
# after the forward's kernels (~70 us a gan step in a real step, 1 us called in a loop).
HEAP_EVERY_S = 0.2
_SAMPLED = {p: SAMPLE_PHASE_CODE[p] for p in PHASES}  # phases whose end is a sample
_FORWARD = SAMPLE_PHASE_CODE["forward"]
# A step without detail samples at these too: an evaluation (they are few) and zero_grad
# (once a step), so a run that ends with them (a framework's last evaluation, zero_grad
# after the last update) ends with its figures measured while its objects were alive.
_ALSO_SAMPLED = frozenset({_SAMPLED["eval"], _SAMPLED["zero_grad"]})
# what each phase can change, read anew by the next sample of a step without detail
_CHANGES = {SAMPLE_PHASE_CODE[p]: (RESCAN_GRADS if p in GRADS_CHANGE else 0)
            | (RESCAN_OPTIMIZER if p in OPT_CHANGES else 0) for p in PHASES}
OTHER = "other"  # the bottom of the phase stack: time in no named phase


class RunTally:
    """A run's running figures for its summary: numbers, not lists (a run's memory must not
    grow with its length)."""

    def __init__(self) -> None:
        self.done, self.final_loss, self.step_ms_sum, self.peak = 0, math.nan, 0.0, 0

    def add(self, record: StepRecord) -> None:
        self.done += 1
        if record.loss == record.loss:  # a step with no loss (no backward) keeps the last
            self.final_loss = record.loss
        self.step_ms_sum += record.step_ms
        self.peak = max(self.peak, record.peak_bytes)

    @property
    def mean_step_ms(self) -> float:
        return self.step_ms_sum / self.done if self.done else math.nan


class StepRecorder:
    """One run's steps as they are measured (see the module doc). Made and driven on the
    training thread."""

    def __init__(self, rec: Recorder, sink: RunSink, native_carried: Callable[[], list], *,
                 other_is_step: bool, heap_every_s: float, flush_s: float,
                 idle: bool = False) -> None:
        """`native_carried`: what the native edge counts as `other` (a preset's carried
        tensors, a watch's weak references to its model inputs; MemoryProbe.sample asks its
        source). `idle`: the first step starts at the first phase entered (a watch: not at
        the script's imports), not now."""
        self.rec, self.sink, self._carried = rec, sink, native_carried
        self.clock = rec.tick  # the one phase clock
        self.t0 = rec.t0
        self.other_is_step = other_is_step
        self.heap_every_s, self.flush_s = heap_every_s, flush_s
        self.step = 0
        self.probe = None
        self._native = None  # the probe's native edge, while samples are taken there
        self._edge_carried = False  # the native edge's rows are a carried sample
        self.python_only = False  # AMP: samples by MemoryProbe.sample (see use_native)
        self.short_steps = False  # until a step shows it is short (SHORT_STEP_MS)
        self.detailed = True  # a sample at each phase's end (else one at the step's end)
        # What a step without detail saved is alive and in no figure: samples marked carried
        self.incomplete = False
        self._sampled = False  # this step has a sample
        self._changed = 0  # RESCAN_* of the phases left without a sample since the last
        self._end_code = _SAMPLED["optimizer"]  # the last sampled phase this step left
        self._precise = rec.precise
        self._stack: list[str] = [OTHER]
        self._idle = idle
        self.since = self._step_t0 = self.clock()
        self.ms = dict.fromkeys(PHASES, 0.0)
        self.other_ms = 0.0
        self.custom_ms: dict[str, float] = {}  # a run's own phases, over the whole run
        self.custom_step_ms = 0.0  # and in this step
        self.activity = False  # a phase entered since the step began
        self._samples: list[SampleItem] = []  # this step's, not handed on yet
        self.step_peak = self.last_total = 0
        # The last sample's (total, activations, other): what a leak check reads at a step's
        # end (allocated aside, as the categories count it).
        self.last_figures = (0, 0, 0)
        self.run_peak = 0  # the largest sample total of the run (measured_peak)
        self._heap_read, self._heap_at = False, -math.inf
        self._rows: list[StepRow] = []
        self._flushed_at = self._allocs_at = self.since
        self.tally = RunTally()

    def now(self) -> float:
        """Seconds since the run's start, on the phase clock."""
        return self.clock() - self.t0

    # --- how samples are taken --------------------------------------------------------------
    def use_probe(self, probe) -> None:
        """A new probe (a watch found more models or optimizers): the old one's figures
        first."""
        self._flush_native()
        self.probe = probe
        self._choose_edges()

    def use_python_samples(self, on: bool) -> None:
        """AMP's weight copies are told apart from activations by MemoryProbe.sample only
        (the native edges do not): `on` while autocast runs."""
        if on != self.python_only:
            self.python_only = on
            self._choose_edges()

    def _choose_edges(self) -> None:
        edge = self.probe.edge if self.probe is not None else None
        native = edge if (self.short_steps and not self.python_only) else None
        if native is not self._native:
            self._flush_native()
            self._native = native
            if native is not None:  # its scans may be older than the last sample's (precise
                # mode's are in Python): the first edge reads gradients and state anew
                self._changed |= RESCAN_GRADS | RESCAN_OPTIMIZER

    @property
    def native_edges(self) -> bool:
        return self._native is not None

    # --- phases -----------------------------------------------------------------------------
    def _charge(self, now: float) -> None:
        """The time since the last edge, to the phase the program is in."""
        name, spent = self._stack[-1], (now - self.since) * 1e3
        ms = self.ms
        if name in ms:
            ms[name] += spent
        elif name == OTHER:
            self.other_ms += spent
        else:
            self.custom_ms[name] = self.custom_ms.get(name, 0.0) + spent
            self.custom_step_ms += spent

    def enter(self, name: str) -> None:
        """A phase begins (inside the one running, if any)."""
        self.activity = True
        now = self.clock()
        if self._idle:
            self._idle = False
            self._step_t0 = self.since = now
        self._charge(now)
        self._stack.append(name)
        self.since = now
        if self._precise is not None:
            self.rec.begin_phase(self.step, name)  # new storages filed under the phase

    def leave(self, sample: bool = True) -> str:
        """The innermost phase ends; its sample is taken (where it is one of PHASES and
        `sample`: else the driver takes it later with `sample`). Returns its name."""
        now = self.clock()
        self._charge(now)
        stack = self._stack
        name = stack[-1]
        if len(stack) > 1:
            stack.pop()
        self.since = now
        code = _SAMPLED.get(name) if sample else None
        if code is not None:
            if self.detailed:
                self._take(code)
            else:
                self._end_code = code
                self._changed |= _CHANGES[code]  # read by the next sample
                if code not in _ALSO_SAMPLED:
                    self._sampled = False  # the step's end takes its own sample
                    return name
                self._take(code, carried=True)
            self.since = self.clock()  # a sample's own cost is no phase's time
        return name

    def sample(self, phase: str) -> None:
        """A sample now, named `phase` (one of SAMPLE_PHASES), charged to no phase."""
        self._charge(self.clock())
        self._take(SAMPLE_PHASE_CODE[phase])
        self.since = self.clock()

    def _take(self, code: int, carried: bool = False) -> None:
        if self.probe is None:
            return
        self._sampled = True
        heap = (code == _FORWARD or carried) and not self._heap_read
        rescan, self._changed = self._changed, 0
        carried = carried or self.incomplete
        if heap:  # the heap once a step, after its first forward, at most every heap_every_s
            self._heap_read = True
            now = self.clock()
            heap = now - self._heap_at >= self.heap_every_s
            if heap:
                self._heap_at = now
        if self._native is not None:  # (a carried one is its step's only row: _flush_native)
            self._native(code, self._carried(), heap, rescan)
            self._edge_carried = carried
            return
        s = self.probe.sample(self.step, SAMPLE_PHASES[code], self.now(), heap=heap,
                              rescan=rescan)
        s.carried = carried
        self._account(s)
        if self.short_steps or not self.detailed:  # (see the module doc's hand-off)
            self._samples.append(s)
        else:
            if any(items for _, items in self._rows):  # short steps' samples before it
                self.flush()
            held, self._samples = self._samples, []  # this step's before its detail came
            self.sink.on_samples([*held, s])

    def sample_inside(self) -> None:
        """A sample inside the phase under way, named as it (a sharded model's memory at its
        height: FSDP about to free a block's gathered parameters); its cost is no phase's."""
        code = _SAMPLED.get(self._stack[-1])
        if code is None or self.probe is None or not self.detailed:
            return
        self._charge(self.clock())
        if self._native is not None:
            self.probe.sample_inside(code, self._carried())
            self._edge_carried = self.incomplete
        else:
            s = self.probe.sample(self.step, SAMPLE_PHASES[code], self.now(), heap=False)
            s.carried = self.incomplete
            self._account(s)
            if self.short_steps:
                self._samples.append(s)
            else:
                self.sink.on_samples([s])
        self.since = self.clock()

    def first_sample(self) -> MemorySample | None:
        """The run's `start` sample (before its first step), handed on at once."""
        if self.probe is None:
            return None
        s = self.probe.sample(self.step, "start", self.now(), heap=True)
        self._heap_at = self.clock()
        self._account(s)
        self.sink.on_samples([s])
        return s

    def _account(self, s: MemorySample) -> None:
        total = s.allocated if s.allocated is not None else s.total
        self.last_total = total
        self.last_figures = (s.total, s.activations, s.other)
        if total > self.step_peak:
            self.step_peak = total
        if s.total > self.run_peak:
            self.run_peak = s.total

    def _flush_native(self) -> None:
        """The native edges' figures since the last take, as one block of this step's
        samples (made MemorySamples where they are read: records.samples_of)."""
        if self._native is None:
            return
        taken = self.probe.take_block(self.step, self._edge_carried)
        if taken is None:
            return
        block, totals = taken
        total, peak = totals[-1], max(self.step_peak, max(totals))
        last = block[3][-1]  # its last row: code, time_s, grads, optimizer, activations, other, ...
        self.last_total, self.step_peak = total, peak
        self.last_figures = (total, last[4], last[5])
        if peak > self.run_peak:
            self.run_peak = peak
        self._samples.append(block)
        self._edge_carried = False

    # --- steps ------------------------------------------------------------------------------
    def begin_step(self, step: int) -> None:
        """Step `step` begins now (or, idle, at its first phase)."""
        self.step = step
        self.rec.begin_step()
        self.ms = dict.fromkeys(PHASES, 0.0)
        self.other_ms = self.custom_step_ms = 0.0
        self.step_peak = self.last_total
        self._heap_read = self._sampled = False
        self._end_code = _SAMPLED["optimizer"]
        self.activity = False
        now = self.clock()
        if not self._idle:
            self._step_t0 = now
        self.since = now

    def move_time(self, src: str, dst: str, ms: float) -> None:
        """Charge `ms` of phase `src`'s time to `dst` instead (a watch learns only at a
        step's end that a forward was an evaluation)."""
        ms = min(ms, self.ms[src])
        self.ms[src] -= ms
        self.ms[dst] += ms

    def end_step(self, *, loss: float, grad_norm: float, nodes: int,
                 saved_bytes: int | None = None, eval_loss: float = math.nan,
                 stepped: bool = True) -> StepRecord:
        """The step ends now: its record (also queued for the sink with its samples)."""
        now = self.clock()
        self._charge(now)
        if not self.detailed and not self._sampled:  # a step without detail: its one sample
            self._take(self._end_code, carried=True)
            now = self.clock()  # (the sample's cost is no phase's)
        self.since = now
        self._flush_native()
        ms = self.ms
        step_ms = sum(ms.values())
        if self.other_is_step:
            step_ms += self.other_ms + self.custom_step_ms
        record = self.rec.step_record(
            step=self.step, loss=loss, grad_norm=grad_norm, phase_ms=ms, nodes=nodes,
            peak_seen=self.step_peak, end_total=self.last_total, saved_bytes=saved_bytes,
            eval_loss=eval_loss, stepped=stepped, step_ms=step_ms)
        self._rows.append((record, self._samples))
        self.tally.add(record)  # (next to the row: a summary counts the rows there are)
        self._samples = []
        if (step_ms > LONG_STEP_MS) if self.short_steps else (step_ms < SHORT_STEP_MS):
            self.tune_for_step_length(step_ms)
        allocs = self._precise is not None and self._allocs_due(now)
        if allocs or self.flush_s <= 0 or now - self._flushed_at >= self.flush_s:
            self.flush(now, allocations=allocs)
        return record

    def _allocs_due(self, now: float) -> bool:
        pending = self._precise.pending if self._precise is not None else 0  # (a C call)
        return pending > 0 and (
            pending >= ALLOC_FLUSH_ROWS or now - self._allocs_at >= ALLOC_FLUSH_S)

    def tune_for_step_length(self, step_ms: float) -> None:
        """Short steps keep their samples to the step's end (on the native edge where there
        is one); long ones hand each on at once (end_step asks where a step's length may
        change it)."""
        if step_ms < SHORT_STEP_MS and not self.short_steps:
            self.short_steps = True
            self._choose_edges()
        elif step_ms > LONG_STEP_MS and self.short_steps:
            self.short_steps = False
            self._choose_edges()

    def abandon_step(self) -> list[SampleItem]:
        """A step that will have no row (an error or a stop cut it short): what it measured
        is handed on as samples; returns them."""
        self._flush_native()
        items, self._samples = self._samples, []
        self.flush()
        if items:
            self.sink.on_samples(items)
        return items

    def flush(self, now: float | None = None, allocations: bool = True) -> None:
        """Hand on the ended steps' rows, and precise mode's allocation rows (`allocations`)."""
        self._flushed_at = self.clock() if now is None else now
        precise = self._precise
        if allocations and precise is not None and precise.pending:
            self._allocs_at = self._flushed_at
            self.sink.on_allocations(precise.drain())
        if self._rows:
            rows, self._rows = self._rows, []
            self.sink.on_steps(rows)

    def finish(self) -> None:
        """The run ends: the rows and samples still held are handed on."""
        self._flush_native()
        self.flush()
        if self._samples:
            items, self._samples = self._samples, []
            self.sink.on_samples(items)

    @property
    def phase(self) -> str:
        """The innermost phase the program is in."""
        return self._stack[-1]
