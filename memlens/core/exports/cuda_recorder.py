"""On CUDA, PyTorch's own allocator history for a window of steps, dumped as snapshot.pickle.

The loop calls on_step_begin(step) / on_step_end(step) around every step; recording runs
from `start_step` for `steps` steps with `max_entries` bounding the allocator's ring buffer,
so a long run does not balloon. dump(path) writes the snapshot taken at the window's end
(or now, if the run stopped inside the window). Where torch sees no CUDA device the
recorder refuses to be built, saying what to do instead.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

from memlens.core.exports import DEFAULT_MAX_ENTRIES
from memlens.core.runfolder.atomic import ExportError, atomic_open

PICKLE_PROTOCOL = 4  # pytorch.org/memory_viz's unpickler stops at protocol 4


class CudaUnavailable(ExportError):
    """A CUDA snapshot was asked for where torch sees no CUDA device."""


class CudaSnapshotRecorder:
    """Records torch.cuda.memory history for steps start_step .. start_step + steps - 1."""

    def __init__(self, start_step: int = 0, steps: int = 1,
                 max_entries: int = DEFAULT_MAX_ENTRIES, *, device: Any = None,
                 memory: Any = None) -> None:
        if start_step < 0 or steps < 1 or max_entries < 1:
            raise ValueError(f"CUDA snapshot window: start_step={start_step} (>= 0), "
                             f"steps={steps} (>= 1), max_entries={max_entries} (>= 1)")
        self.start_step, self.steps, self.max_entries = start_step, steps, max_entries
        self.device = device
        self._memory = memory if memory is not None else _cuda_memory()
        self.recording = False
        self.snapshot: dict | None = None
        self.steps_recorded: list[int] = []

    @property
    def last_step(self) -> int:
        return self.start_step + self.steps - 1

    def on_step_begin(self, step: int) -> None:
        if self.snapshot is None and not self.recording and \
                self.start_step <= step <= self.last_step:
            self._start()
        if self.recording:
            self.steps_recorded.append(step)
            setter = getattr(self._memory, "_set_memory_metadata", None)
            if setter is not None:  # tags each allocation with its step in the snapshot
                setter(f"memlens step {step}")

    def on_step_end(self, step: int) -> None:
        if self.recording and step >= self.last_step:
            self._finish()

    def dump(self, path: str | Path) -> Path:
        """Write snapshot.pickle atomically (protocol 4); ExportError if nothing was recorded."""
        if self.recording:  # the run ended inside the window: keep what it recorded
            self._finish()
        if self.snapshot is None:
            raise ExportError(
                f"no CUDA memory snapshot: the window (steps {self.start_step}-"
                f"{self.last_step}) was never reached. Choose a start step the run reaches.")
        path = Path(path)
        with atomic_open(path, "wb") as fh:
            pickle.dump(self.snapshot, fh, protocol=PICKLE_PROTOCOL)
        return path

    def close(self) -> None:
        """Stop recording without keeping a snapshot (an aborted run)."""
        if self.recording:
            self._stop()

    # --- internals --------------------------------------------------------------------------
    def _start(self) -> None:
        record = self._memory._record_memory_history
        kwargs: dict[str, Any] = {"context": "all", "stacks": "python",
                                  "max_entries": self.max_entries, "device": self.device}
        try:  # clear_history drops what an earlier window left in the buffer (torch >= 2.4)
            record("all", clear_history=True, **kwargs)
        except TypeError:
            record("all", **kwargs)
        self.recording = True

    def _finish(self) -> None:
        self.snapshot = self._memory._snapshot(self.device)
        self._stop()

    def _stop(self) -> None:
        self._memory._record_memory_history(None)
        setter = getattr(self._memory, "_set_memory_metadata", None)
        if setter is not None:
            setter("")
        self.recording = False


def _cuda_memory() -> Any:
    import torch

    if not torch.cuda.is_available():
        raise CudaUnavailable(
            "a CUDA memory snapshot needs a CUDA device, and torch sees none here. On CPU, "
            "run with precise mode and export the snapshot from its allocation events: "
            "python main.py export RUN_DIR --format snapshot")
    return torch.cuda.memory
