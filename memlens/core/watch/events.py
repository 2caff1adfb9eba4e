"""A watch's events: diagnoses (once per place) and notes, kept for the caller and written."""

from __future__ import annotations

from collections.abc import Callable

from memlens.core.records import RunEvent
from memlens.core.watch import diagnoses as dx


class Events:
    def __init__(self, step: Callable[[], int], now: Callable[[], float],
                 post: Callable[[RunEvent], None]) -> None:
        self._step, self._now, self._post = step, now, post
        self.items: list[RunEvent] = []
        self._reported: set[tuple[str, str]] = set()

    def report(self, key: str, where: str, message: str, explanation: str, fix: str,
               nbytes: int | None, phase: str = "", once: bool = True) -> None:
        """A diagnosis event (once per place, unless `once` is False)."""
        if once and (key, where) in self._reported:
            return
        self._reported.add((key, where))
        self.add(dx.diagnosis(self._step(), self._now(), key, message, explanation,
                               nbytes=nbytes, where=where, fix=fix, phase=phase))

    def note(self, kind: str, key: str, message: str, explanation: str = "",
             once: bool = False) -> None:
        if once:
            if (kind, key) in self._reported:
                return
            self._reported.add((kind, key))
        self.add(RunEvent(step=self._step(), time_s=self._now(), kind=kind, key=key,
                           message=message, explanation=explanation))

    def add(self, e: RunEvent) -> None:
        """An event made elsewhere (a toggle), kept and written."""
        self.items.append(e)
        self._post(e)
