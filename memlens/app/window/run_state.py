"""What the window says and allows in each run state: its title, the state of a run that
goes, what a starting run waits for, the text of a run that ended, and what the techniques
panel's edits act on."""

from __future__ import annotations

import time
from pathlib import Path

from memlens.app.panels.techniques_panel import TechniquesTarget
from memlens.app.panels.window_state import WindowState
from memlens.core.records import NATIVE_BUILD_EVENT


def techniques_target(running: bool, following: bool, meta: dict | None,
                      script: bool = False) -> TechniquesTarget:
    """What the techniques panel's edits act on: the run going here, or the next run (a
    watched script followed here, `meta` its run.json header, is out of the panel's reach:
    it says so; one File > Watch a script… runs, `script`, is in reach)."""
    if script:
        return TechniquesTarget.SCRIPT
    if running:
        return TechniquesTarget.LIVE
    if following and isinstance(meta, dict) and meta.get("source") == "watch":
        return TechniquesTarget.WATCHED
    return TechniquesTarget.NEXT_RUN


def live_state(controls, on_error: bool, started: bool) -> WindowState:
    """The state of a run that goes: its controls' flags, whether an error paused it and
    whether it has started (its first record came)."""
    if controls.stop_requested:
        return WindowState.STOPPING
    if controls.paused:
        return WindowState.ERROR if on_error else WindowState.PAUSED
    return WindowState.RUNNING if started else WindowState.STARTING


def window_title(name: str | None, text: str, loaded_from: Path | None) -> str:
    if not name:
        return "memlens"
    if loaded_from is not None:
        return f"memlens: {name} (opened {loaded_from.name}, read-only)"
    return f"memlens: {name} ({text.split(';')[0].split(' (')[0].lower()})"


def finished_text(summary: dict | None, folder: Path | None) -> str:
    if not summary:
        return "Run ended (see the events list)"
    done = summary.get("steps_done", 0)
    how = summary.get("stopped_by", "completed")
    where = f"; saved in {folder}" if folder else ""
    return {"completed": f"Finished: {done} steps{where}",
            "stopped": f"Stopped after {done} steps{where}",
            "error": f"Stopped on an error after {done} steps{where}"}.get(how, how)


class StartingText:
    """What a run says while it starts: torch and the model loading, or (a precise run's
    first event, core.loop) the native recorder being built, with the time it has taken so
    far, so a start of minutes never reads as a hang. `clock`: seconds (tests give one)."""

    def __init__(self, clock=time.monotonic) -> None:
        self._clock = clock
        self._since: float | None = None

    def reset(self) -> None:
        self._since = None

    def text(self, history) -> str:
        build = next((e for e in history.events(0)
                      if e.kind == "setup" and e.key == NATIVE_BUILD_EVENT), None)
        if build is None:
            return WindowState.STARTING.text
        if self._since is None:
            self._since = self._clock()
        taken = int(self._clock() - self._since)
        return (f"Starting: {build.message}… {taken // 60}:{taken % 60:02d} so far "
                "(the run starts when it is built)")
