"""`memlens.watch(...)` and `memlens.Watch`: record this process's own training, in a few
words of code. The user's API only; what torch's hooks and the framework callbacks call is
the session's (core.watch.session.WatchSession)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from torch import nn
from torch.optim import Optimizer

from memlens.core.records import RunEvent
from memlens.core.watch.active import active_watch
from memlens.core.watch.found import as_list
from memlens.core.watch.session import WatchSession

__all__ = ["Watch", "watch"]


class Watch:
    """A recording of this process's training into a run folder, live.

    Use as a context manager or call `close()`. `phase(name)` labels code as a phase of its
    own, `step()` marks step boundaries by hand (from then on only it ends steps).
    `step_index` counts the steps so far, `events` holds what was reported (diagnoses among
    them), `folder` is where it writes, `write_error` the error that stopped its writes.
    """

    def __init__(self, models: nn.Module | Iterable[nn.Module] | None = None,
                 optimizers: Optimizer | Iterable[Optimizer] | None = None, *,
                 out: str | Path | None = None, precise: bool = False,
                 capture_every: int = 0, force: bool = False, script: str | None = None,
                 announce: bool = False, at: Iterable[str] | str = (),
                 detail: str | int | None = None) -> None:
        """See `memlens.watch`; `script` names the run folder (default: this program's);
        `announce`: say at close what was recorded."""
        self._session = WatchSession(
            as_list(models) or None, as_list(optimizers) or None, out=out, precise=precise,
            capture_every=capture_every, force=force,
            script=script if script is not None else (sys.argv[0] if sys.argv else None),
            announce=announce, at=at, detail=detail)

    @classmethod
    def _joining(cls, session: WatchSession) -> Watch:
        """The recording `session` already makes (`main.py watch` runs this script): its
        close() leaves the recording to its owner."""
        w = cls.__new__(cls)
        w._session = session.join()
        return w

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, _type, exc, _tb) -> None:
        self.close(error=exc)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Label the code inside as phase `name` (a hand-written update: "optimizer")."""
        with self._session.phase(name):
            yield

    def step(self) -> None:
        """Mark a step boundary here; from now on only these calls end steps. (A step with
        nothing in it is not one: the first call right after an automatic step end, say.)"""
        self._session.step()

    def close(self, error: BaseException | None = None) -> None:
        """Stop recording: remove every hook, write the last step and the summary (a watch
        joined to another's recording only ends this use of it)."""
        self._session.close(error=error)

    @property
    def folder(self) -> Path:
        return self._session.folder

    @property
    def step_index(self) -> int:
        return self._session.step_index

    @property
    def events(self) -> list[RunEvent]:
        return self._session.events

    @property
    def write_error(self) -> BaseException | None:
        return self._session.write_error

    @property
    def detail(self) -> dict:
        """Which steps take the saved-tensor detail, as run.json's `detail` says it: mode,
        chosen ("measuring" while auto calibrates), why."""
        return self._session.detail.describe()


def watch(models: nn.Module | Iterable[nn.Module] | None = None,
          optimizers: Optimizer | Iterable[Optimizer] | None = None, *,
          out: str | Path | None = None, precise: bool = False, capture_every: int = 0,
          force: bool = False, quiet: bool = False, at: Iterable[str] | str = (),
          detail: str | int | None = None) -> Watch:
    """Record this process's training into a run folder, live.

    models, optimizers: what to record (default: every root module called, every
        optimizer made or stepped).
    out: the run folder (default: a new runs/<time>-watch-<script>); one that holds a run
        is refused unless `force` (which deletes that run's files first).
    precise: track every storage (exact in-step peak, allocations.npy); slower.
    capture_every: capture the autograd graph every N steps (run.json `graphs`); 0 = never.
    quiet: say nothing at close (by default the folder and the diagnoses go to stderr, as
        `main.py watch` says them).
    at: technique changes, "STEP:KEY=VALUE" each ("5:amp=bf16", "3:zero_grad=set_to_none";
        keys zero_grad, detach_state, no_grad_eval, eval_mode, amp), each applied at the
        first step boundary at or after STEP (docs/watch.md); a bad one raises ConfigError
        (a ValueError). Inside a script run by `main.py watch`, give them to its --at.
    detail: which steps measure what is saved for backward (activations, AMP casts; every
        step measures the rest): "auto" (the default, or $MEMLENS_WATCH_DETAIL): every
        step where that costs under 2% of a step, else the first steps, every Nth, at
        every change and every step once the loop keeps what it saved, the others carrying
        the last figures (memory.csv `carried`); "every"; or N, every Nth.
        docs/watch.md#detail-on-a-schedule.

    Use as `with memlens.watch(): train()`, or keep the Watch and call `.close()` at the
    end. Inside a script run by `main.py watch`, it returns that recording (the same type):
    its `phase()`, `step()`, `step_index` and `events` work, and its close() leaves the
    recording to its owner.
    """
    current = active_watch()
    if current is not None:
        current.add_changes(at)
        return Watch._joining(current)
    return Watch(models, optimizers, out=out, precise=precise, capture_every=capture_every,
                 force=force, announce=not quiet, at=at, detail=detail)
