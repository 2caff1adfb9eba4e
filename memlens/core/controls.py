"""Thread-safe live control of a run: technique changes, pause, stop, graph capture requests."""

from __future__ import annotations

import threading
from typing import Any

from memlens.core.config import ScheduledChange, TechniqueToggles


class StopRequested(Exception):
    """Raised inside a long phase when the user asked to stop; the loop ends cleanly."""


class RunControls:
    """Written by any thread (GUI, CLI schedule); read by the training loop at step boundaries.

    A change made while a step runs is held as pending and applied, once, at the next step
    boundary; the loop reports each applied change as a toggle event.
    """

    def __init__(
        self,
        toggles: TechniqueToggles | None = None,
        schedule: tuple[ScheduledChange, ...] = (),
    ) -> None:
        self._lock = threading.Lock()
        self._toggles = toggles or TechniqueToggles()
        self._pending: dict[str, Any] = {}
        self._schedule = sorted(schedule, key=lambda c: c.step)
        self._run = threading.Event()
        self._run.set()
        self._stop = threading.Event()
        # The same as _stop.is_set(), read as a plain attribute: the loop checks it at every
        # phase edge and module call, where Event.is_set() costs a Python frame. A bool
        # written once, under the GIL, is safe to read from any thread.
        self.stopping = False
        self._capture = threading.Event()

    # --- writers (any thread) -------------------------------------------------------------
    def set(self, key: str, value: Any) -> None:
        """Ask for a technique change; validated now, applied at the next step boundary."""
        with self._lock:
            self._toggles.with_change(key, value)  # raises ConfigError on a bad value
            self._pending[key] = value

    def pause(self) -> None:
        self._run.clear()

    def resume(self) -> None:
        self._run.set()

    def stop(self) -> None:
        self.stopping = True
        self._stop.set()
        self._run.set()  # a paused loop must wake up to see the stop

    def request_capture(self) -> None:
        self._capture.set()

    # --- readers --------------------------------------------------------------------------
    @property
    def toggles(self) -> TechniqueToggles:
        with self._lock:
            return self._toggles

    def pending(self) -> dict[str, Any]:
        with self._lock:
            return dict(self._pending)

    @property
    def paused(self) -> bool:
        return not self._run.is_set()

    @property
    def stop_requested(self) -> bool:
        return self._stop.is_set()

    def check_stop(self) -> None:
        """Called inside long phases (module hooks): abort the step if a stop was asked."""
        if self.stopping:
            raise StopRequested

    # --- the loop's side ------------------------------------------------------------------
    def wait_while_paused(self, timeout: float | None = None) -> bool:
        """Block while paused. True to go on, False when a stop was requested."""
        while not self._run.wait(timeout=0.05 if timeout is None else timeout):
            if timeout is not None:
                break
        return not self._stop.is_set()

    def take_capture_request(self) -> bool:
        if self._capture.is_set():
            self._capture.clear()
            return True
        return False

    def refuse(self, key: str, value: Any) -> TechniqueToggles:
        """Put a technique back to `value` now (the loop refused a change it cannot run here,
        such as bf16 on a CPU without it); returns the toggles in force."""
        with self._lock:
            self._toggles = self._toggles.with_change(key, value)
            self._pending.pop(key, None)
            return self._toggles

    def begin_step(self, step: int) -> tuple[TechniqueToggles, list[tuple[str, Any, Any]]]:
        """Apply scheduled and pending changes for `step`; return the toggles and the changes.

        A key set to the value it already has is no change and is not reported.
        """
        with self._lock:
            wanted: dict[str, Any] = {}
            while self._schedule and self._schedule[0].step <= step:
                c = self._schedule.pop(0)
                wanted[c.key] = c.value
            wanted.update(self._pending)
            self._pending.clear()
            changes = []
            for key, value in wanted.items():
                old = getattr(self._toggles, key)
                new_toggles = self._toggles.with_change(key, value)
                new = getattr(new_toggles, key)
                if new != old:
                    changes.append((key, old, new))
                    self._toggles = new_toggles
            return self._toggles, changes
