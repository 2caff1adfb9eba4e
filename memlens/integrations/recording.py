"""What both framework callbacks do with a watch: start one (or join the one `main.py watch`
runs), mark its steps and phases where the framework says they are, and end it."""

from __future__ import annotations

import contextlib
import importlib
import math
import sys
from pathlib import Path

from memlens.core.runfolder import format as fmt
from memlens.core.watch.active import active_watch
from memlens.core.watch.session import WatchSession


def import_framework(*names: str, install: str):
    """The first of the modules `names` that imports; an ImportError saying what to install
    where none does."""
    for name in names:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError(f"this memlens callback needs {names[0]}, which is not installed: "
                      f"pip install {install}") from None


def fresh_folder(parent: str | Path, name: str = "memlens") -> Path:
    """`parent/name`, or `name-2`, `name-3`... where one already holds a run (a second fit
    in the same log folder)."""
    parent = Path(parent)
    folder, k = parent / name, 2
    while (folder / fmt.RUN_JSON).exists():
        folder, k = parent / f"{name}-{k}", k + 1
    return folder


# What a callback logs to its framework's own loggers, from the last step recorded.
LOGGED = ("peak_bytes", "step_ms", "saved_bytes", "retained_bytes")


class Recording:
    """A watch driven by a framework's events. `begin` starts it (a run already recording in
    this process, `main.py watch`'s, is joined instead, and told the framework's rank),
    `boundary` ends a step where the framework's step counter moved, `phase_begin`/
    `phase_end` label a stretch of the run (validation, the sanity check), `end` closes it.

    A framework with no exception event of its own (Hugging Face's Trainer) still ends the
    run at an exception: one that nothing catches ends it through `sys.excepthook` (then
    Python's own report), and a run its script caught and trained on from is ended, as cut
    short, by the next `begin`."""

    def __init__(self) -> None:
        self.watch: WatchSession | None = None
        self._owner = False
        self._counted = 0  # the framework's step counter at the last step boundary
        self._phases: list[contextlib.ExitStack] = []
        self._logged = -1  # the last step logged to the framework's loggers
        self._excepthook = None  # Python's, while this recording has one of its own

    def begin(self, *, out, script: str | None, rank: tuple[int, int], precise: bool,
              capture_every: int, at=()) -> WatchSession:
        if self.watch is not None:  # the last one never ended: an exception it did not see
            self.end(error=RuntimeError("the training before ended by an exception memlens "
                                        "did not see (its end event never came)"))
        current = active_watch()
        if current is not None:
            self.watch, self._owner = current.join(), False
            current.take_rank(*rank)  # `main.py watch` started before the framework said
            current.add_changes(at)
        else:
            self.watch = WatchSession(out=out, precise=precise, capture_every=capture_every,
                                      script=script, rank=rank, announce=True, at=at)
            self._owner = True
            self._excepthook, sys.excepthook = sys.excepthook, self._uncaught
        self.watch.steps_by_hand()  # the framework's counter ends steps, nothing else
        self._counted = 0
        return self.watch

    def _uncaught(self, kind, exc, tb) -> None:
        hook = self._excepthook or sys.__excepthook__
        with contextlib.suppress(Exception):
            self.end(error=exc)
        hook(kind, exc, tb)

    def figures(self) -> dict[str, float]:
        """memlens's figures of the last step recorded, once each (`memlens/<column>`), for
        the framework's own loggers; {} where no new step was recorded."""
        record = self.watch.last_record if self.watch is not None else None
        if record is None or record.step == self._logged:
            return {}
        self._logged = record.step
        return {f"memlens/{name}": float(getattr(record, name)) for name in LOGGED}

    def boundary(self, counter: int) -> None:
        """The framework's step counter now: a step ends where it has moved on."""
        if self.watch is not None and counter > self._counted:
            self._counted = counter
            self.watch.step()

    def phase_begin(self, name: str) -> None:
        if self.watch is not None:
            stack = contextlib.ExitStack()
            stack.enter_context(self.watch.phase(name))
            self._phases.append(stack)

    def phase_end(self) -> None:
        if self._phases:
            self._phases.pop().close()

    def eval_loss(self, value) -> None:
        if self.watch is not None and value is not None:
            with contextlib.suppress(TypeError, ValueError, RuntimeError):
                value = float(value)  # a 0-d tensor (Lightning's metrics) too
                if not math.isnan(value):
                    self.watch.note_eval_loss(value)

    def end(self, error: BaseException | None = None) -> None:
        if self._excepthook is not None and sys.excepthook == self._uncaught:
            sys.excepthook = self._excepthook
        self._excepthook = None
        while self._phases:
            self.phase_end()
        watch, self.watch = self.watch, None
        if watch is not None:
            watch.close(error=error)  # a joined watch: only this use of it ends
