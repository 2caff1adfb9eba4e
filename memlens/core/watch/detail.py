"""Which steps of a watch take the saved-tensor detail: every step where it is cheap, else the
first steps, every Nth, and at once whenever something changes.

Every step records its phases, times, loss and node count, and at its end the parameters,
gradients and optimizer state: cheap, exact. The detail (activations and AMP casts saved for
backward, counted by torch's saved-tensor hooks, a memory sample at every phase's end, each
forward followed to its backward, and the grad norm, which reads every gradient: see
core.watch.norms) costs a fixed time a step that a short
step feels (torch's own hook machinery alone is about 0.1 ms a step of a small model). A
step without it carries the last figures of what the detailed steps saved, marked so in
memory.csv (`carried`), and is drawn so.

`auto` (the default) measures the detail's cost in the first steps and keeps it on every
step where it costs under AUTO_EVERY_BELOW of a step (long steps: the usual case on a GPU),
else takes it every Nth step, N chosen so that its share stays near SCHEDULE_SHARE. It
measures in cycles of three neighbouring steps: one with the detail, the one after it, and
one clear of both. The step after a detailed one is slower too (mlp, timed step by step
under detail=8: the detailed step +185 us, the one after it +25 us, against a step clear of
both), and a detailed step's start (the detail turned on) is timed as its own
(WatchSession._end_step); steps alternating without and with the detail charged both to the
steps without it, and 8 watches of mlp measured 2.2-13.7% where it cost about 11% (every 5
steps chosen where 12 keep 1%, and every step in 1 watch of 24). A cycle's cost is (with -
clear) + (after - clear); the cost is the median of the cycles' (held at zero: the detail
costs no less than nothing), with the median's interval from their order
(calibrated_share). Where the interval straddles AUTO_EVERY_BELOW (a cost near it, measured
on a noisy machine) more cycles are measured, up to MAX_CALIBRATION_CYCLES; if it still
straddles, the schedule is chosen, its N sized by the interval's top: every step might cost
that much of each step for the whole run (the costly mistake), where too few detailed steps
cost only detail, and every change brings it at once. The first WARM_UP_CYCLES cycles count
for nothing: a watch's first steps run its code for the first time and are slow by
milliseconds, at random (a 3 ms mlp step took 4-8 ms up to about its 12th step), which made
the median of six pairs negative in some runs, and every step then took a detail that cost
5% of each. `every` forces the detail on every step (the figures of a watch before this
schedule existed); an integer N forces every Nth.
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Sequence

FIRST_DETAILED = 3  # the first steps: the models, their inputs and their graphs are found
CYCLE = 3  # a calibration cycle's steps: with the detail, the one after it, one clear of both
WARM_UP_CYCLES = 3  # then cycles that count for nothing
CALIBRATION_CYCLES = 8  # then the cycles that measure it
MAX_CALIBRATION_CYCLES = 32  # more while the cost's interval straddles AUTO_EVERY_BELOW
INTERVAL_Z = 2.0  # the median's interval: this many of a binomial's standard deviations
AUTO_EVERY_BELOW = 0.02  # detail's share of a step under which every step takes it
SCHEDULE_SHARE = 0.01  # the share of the step time a schedule aims to spend on detail
MAX_EVERY = 50  # a schedule takes detail at least every MAX_EVERY steps
MAX_SHAPES = 1000  # input shapes remembered (beyond: a new one no longer takes the detail)


def parse_detail(value: str | int) -> str | int:
    """`every`, `auto` or a whole number N >= 1 (every Nth step); ValueError otherwise."""
    if isinstance(value, int) and not isinstance(value, bool):
        n = value
    else:
        text = str(value).strip().lower()
        if text in ("every", "auto"):
            return text
        try:
            n = int(text)
        except ValueError:
            raise ValueError(f"detail must be every, auto or a whole number N >= 1 (every "
                             f"Nth step), not {value!r}") from None
    if n < 1:
        raise ValueError(f"detail must be every, auto or a whole number N >= 1, not {n}")
    return "every" if n == 1 else n


class DetailPolicy:
    """Decides, at each step's start, whether the step takes the detail (see the module doc);
    `trigger(reason)` makes the next decision yes (something changed)."""

    def __init__(self, mode: str | int | None = None) -> None:
        """`mode`: every, auto or N; None: $MEMLENS_WATCH_DETAIL where set, else auto."""
        self.mode = parse_detail(mode if mode is not None
                                 else os.environ.get("MEMLENS_WATCH_DETAIL", "auto"))
        self.every = 1 if self.mode == "every" else (
            self.mode if isinstance(self.mode, int) else None)  # None: auto, not chosen yet
        self.why = ("asked for (detail=every)" if self.mode == "every" else
                    f"asked for (detail={self.mode})" if isinstance(self.mode, int) else
                    "measuring the detail's cost")
        # calibration: each cycle's (clear step, with + after - clear) ms; a step the detail
        # came to early (a change: `at_call`) starts a cycle of its own (the one under way
        # is lost)
        self._cycles: list[tuple[float, float]] = []
        self._warming = WARM_UP_CYCLES  # cycles still to come that count for nothing
        self._cycle: list[float] | None = None  # the cycle under way: its steps' ms
        self._pending: str | None = None  # a change seen: the next step takes the detail
        self._since = 0  # steps since the last detailed one
        self.triggered: dict[str, int] = {}  # reason -> times it took the detail early

    @property
    def chosen(self) -> str:
        """What the policy does, in a few words (run.json's `detail`)."""
        if self.every is None:
            return "measuring"
        return "every step" if self.every == 1 else f"every {self.every} steps"

    def describe(self) -> dict:
        why = self.why
        if self.every is None:  # (a run may end before it has chosen: said as it stands)
            why = (f"measuring the detail's cost: {len(self._cycles)} cycles of three steps "
                   f"so far (at least {CALIBRATION_CYCLES}, after {WARM_UP_CYCLES} to warm "
                   "up): one with it, the one after it, one clear of both")
        return {"mode": self.mode if isinstance(self.mode, str) else int(self.mode),
                "chosen": self.chosen, "why": why, "triggered": dict(self.triggered)}

    def trigger(self, reason: str) -> None:
        """Something changed (a new input shape, a toggle, a model called from a new site,
        growth the cheap figures show): the next step takes the detail."""
        if self.every != 1 and self._pending is None:
            self._pending = reason

    def keep_every(self, reason: str) -> None:
        """Auto: every step takes the detail from now on (a loop that keeps what it saved past
        its step: a step without the detail would leave it out of every later figure)."""
        if self.mode == "auto" and self.every != 1:
            self.every = 1
            self.why = f"{reason}: every step from then on"
            self.triggered[reason] = self.triggered.get(reason, 0) + 1

    def want(self, step: int) -> bool:
        """Whether step `step` (about to start) takes the detail."""
        if self.every == 1 or step < FIRST_DETAILED:
            self._since = 0
            return True
        if self.every is None:  # auto, calibrating: with, after, clear, with...
            return (step - FIRST_DETAILED) % CYCLE == 0
        if self._pending is not None:
            reason, self._pending = self._pending, None
            self.triggered[reason] = self.triggered.get(reason, 0) + 1
            self._since = 0
            return True
        self._since += 1
        if self._since >= self.every:
            self._since = 0
            return True
        return False

    def note_step(self, step: int, step_ms: float, detailed: bool) -> None:
        """A step ended, taking `step_ms` with memlens's own work for it: during auto's
        calibration its time is kept; once enough cycles are (see the module doc), the
        schedule is chosen."""
        if self.every is not None or step < FIRST_DETAILED:
            return
        if detailed:  # a cycle starts (where one was under way, a change cut it short)
            self._cycle = [step_ms]
            return
        cycle = self._cycle
        if cycle is None:
            return
        cycle.append(step_ms)
        if len(cycle) < CYCLE:
            return
        self._cycle = None
        if self._warming:
            self._warming -= 1
            return
        with_ms, after_ms, clear_ms = cycle
        self._cycles.append((clear_ms, with_ms + after_ms - clear_ms))
        n = len(self._cycles)
        if n < CALIBRATION_CYCLES:
            return
        share, low, high, off = calibrated_share(*zip(*self._cycles, strict=True))
        undecided = low < AUTO_EVERY_BELOW <= high
        if undecided and n < MAX_CALIBRATION_CYCLES:
            return  # too close to call at this noise: another cycle
        measured = (f"the detail costs {share:.1%} (about {max(0.0, low):.1%}-{high:.1%}) "
                    f"of a {off:.2f} ms step, measured over {n} cycles of three steps (the "
                    "detailed step and the one after it, against one clear of both)")
        if undecided:  # still: every step might cost up to `high` of each, for the whole
            # run; a schedule sized by that keeps the detail's share near SCHEDULE_SHARE
            self.every = _every_for(high)
            self.why = (f"{measured}: too close to {AUTO_EVERY_BELOW:.0%} to call, so every "
                        f"{self.every} steps (sized by the top of the interval) and at every "
                        f"change keeps it near {SCHEDULE_SHARE:.0%} or under")
        elif share < AUTO_EVERY_BELOW:
            self.every = 1
            self.why = f"{measured}: under {AUTO_EVERY_BELOW:.0%}, so every step"
        else:
            self.every = _every_for(share)
            self.why = (f"{measured}: every {self.every} steps and at every change keeps "
                        f"it near {SCHEDULE_SHARE:.0%}")
        self._since = 0


def _every_for(share: float) -> int:
    """Every how many steps a detail costing `share` of a step is taken to cost about
    SCHEDULE_SHARE (2 to MAX_EVERY; a share that is a whole multiple of it, summed from
    step times, is not one step more for the float's last digit)."""
    return max(2, min(MAX_EVERY, math.ceil(round(share / SCHEDULE_SHARE, 9))))


def calibrated_share(off: Sequence[float],
                     on: Sequence[float]) -> tuple[float, float, float, float]:
    """(share, low, high, step ms): the detail's cost as a share of a step without it, from
    measurements (off[i], on[i]): a step clear of the detail and what the detail's steps
    took in its place (a cycle's with + after - clear): the median of their differences
    over the median step, held at zero (the detail costs no less than nothing: a negative
    median is noise), and the median's distribution-free interval: the differences k-th from either
    end, k where a binomial's INTERVAL_Z standard deviations fall (about 95%). Robust to a
    step a page fault or another process stretched, and never collapsed to a point where
    many differences are alike (a MAD's interval was: zero wide, with half of them equal)."""
    diffs = sorted(b - a for a, b in zip(off, on, strict=True))
    base = statistics.median(off)
    if base <= 0:
        return 0.0, 0.0, 0.0, base
    n = len(diffs)
    k = max(0, math.floor((n - INTERVAL_Z * math.sqrt(n)) / 2))
    mid = max(0.0, statistics.median(diffs))
    return mid / base, diffs[k] / base, max(0.0, diffs[n - 1 - k]) / base, base


class WatchDetail:
    """A watch's detail, step by step: the policy's decision applied (torch's saved-tensor
    hooks on or off, a sample at every phase's end or one at the step's end) and what makes
    it come early (a model called from a new site or with a new input shape, a graph that
    grows, an old graph still alive).

    The saved-tensor hooks are taken off only where they are the top of torch's stack: a
    context of the script's own pushed over them (`save_on_cpu`) is never popped; the detail
    then stays on (said in run.json's `detail`)."""

    def __init__(self, policy: DetailPolicy, hooks, steps, book, norms=None) -> None:
        """`book`: the watch's CallBook (core.watch.calls): sites whose grad forwards were
        not backwarded, and the graphs of steps without detail followed to their end.
        `norms`: the watch's GradNorms (core.watch.norms), which take the norm with the
        detail."""
        import torch

        self.policy, self._ctx, self._steps, self._book = policy, hooks, steps, book
        self._norms = norms
        self._pack = getattr(hooks, "pack_hook", None)
        self._top = torch._C._autograd._top_saved_tensors_default_hooks
        self.on = False  # the hooks are pushed, samples at every phase's end
        self._entered = False
        self._sites: set[str] = set()  # call sites of grad forwards seen
        self._shapes: set[tuple] = set()  # (model, its first input's shape) seen
        self._nodes = 0  # the last step's graph nodes
        self.stuck = False  # the script's own saved-tensor hooks are over ours
        if book.track is None:  # (the Python build): steps without detail go unfollowed
            policy.keep_every("no native call tracker to follow steps without detail")

    def start(self) -> None:
        """Recording starts: step 0 with the detail."""
        self._ctx.__enter__()
        self._entered = True
        self._set(True)

    def stop(self) -> None:
        if self._entered:
            self._entered = False
            self._ctx.__exit__(None, None, None)

    def _ours_on_top(self) -> bool:
        top = self._top(False)
        return top is not None and top[0] is self._pack

    def _set(self, on: bool) -> None:
        if on == self.on:
            return
        if self._pack is not None and self._entered != on:
            if not on and not self._ours_on_top():
                self.stuck = True  # another context over ours: leave them as they are
                return
            if on:
                self._ctx.__enter__()
            else:
                self._ctx.__exit__(None, None, None)
            self._entered = on
        self.on = on
        self._steps.detailed = on
        if self._norms is not None:
            self._norms.take(on)

    def begin_step(self, step: int) -> None:
        self._set(self.stuck or self.policy.want(step))

    def at_call(self, site: str, model: str, args: tuple) -> bool:
        """A model's forward under grad: whether it is recorded with detail. A site or an
        input shape not seen before turns the detail on at once (from this call on: its
        graph is followed, its saved tensors counted)."""
        first = ()
        for a in args:  # (a loop, not a generator: this runs at every model call)
            if hasattr(a, "shape"):
                first = tuple(a.shape)
                break
        shape = (model, first)
        reason = ("new call site" if site not in self._sites else
                  "new input shape" if shape not in self._shapes else
                  # (its graph may be kept: what it saves must be counted)
                  "a site whose forwards were not backwarded"
                  if site in self._book.unbackwarded_sites else None)
        if reason is not None:
            self._sites.add(site)
            if len(self._shapes) < MAX_SHAPES:  # (a sequence model's many lengths: bounded)
                self._shapes.add(shape)
            if not self.on:
                self.policy.triggered[reason] = self.policy.triggered.get(reason, 0) + 1
                self._set(True)
        return self.on

    def end_step(self, nodes: int, retained: int) -> None:
        """The step ended: what makes the detail come early (more graph nodes behind
        backward than the step before) or stay: tensors saved for backward that outlive
        their step (`retained` bytes of a detailed step's; a graph of a step without detail
        alive unreleased), which only every step's detail counts. While such a graph is
        alive the figures leave it out: its samples are marked carried."""
        left = self._book.carried_graphs_alive()
        if retained:
            self.policy.keep_every("saved tensors outlived their step")
        elif left:
            self.policy.keep_every("a step without the detail left its graph alive")
        elif nodes > self._nodes > 0:
            self.policy.trigger("graph grows")
        self._steps.incomplete = left
        self._nodes = nodes

    def timed(self, step: int, period_ms: float, detailed: bool) -> bool:
        """Step `step` and all memlens did for it took `period_ms` (from the end of the
        bookkeeping of the step before to the end of its own: the detail's samples and
        hooks, which no phase's time holds, included): auto's calibration. True where the
        policy has just chosen."""
        measuring = self.policy.every is None
        self.policy.note_step(step, period_ms, detailed)
        return measuring and self.policy.every is not None

    def describe(self) -> dict:
        out = self.policy.describe()
        if self.stuck:
            out["why"] = ("the script's own saved-tensor hooks are over memlens's: the "
                          "detail stays on every step")
        return out
