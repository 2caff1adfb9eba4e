"""The window's run states, one definition: what each is called, says and allows."""

from __future__ import annotations

from enum import StrEnum


class WindowState(StrEnum):
    """A StrEnum, so a state compares equal to its name (`state == "running"`)."""

    IDLE = "idle"
    STARTING = "starting"
    RUNNING = "running"
    PAUSED = "paused"
    ERROR = "error"  # paused on a training error
    STOPPING = "stopping"
    FINISHED = "finished"

    @property
    def text(self) -> str:
        """What the run panel and the title say in this state, unless told otherwise."""
        return _TEXT.get(self, self.value)

    @property
    def active(self) -> bool:
        """A run exists and has not ended."""
        return self in _ACTIVE

    @property
    def controllable(self) -> bool:
        """Pause/Resume and Stop apply."""
        return self in _CONTROLLABLE


_TEXT = {
    WindowState.IDLE: "Ready: choose a preset and press Start",
    WindowState.STARTING: "Starting (loading torch and the model)…",
    WindowState.RUNNING: "Running",
    WindowState.PAUSED: "Paused",
    WindowState.ERROR: "Paused on an error",
    WindowState.STOPPING: "Stopping after this step…",
}
_CONTROLLABLE = frozenset({WindowState.STARTING, WindowState.RUNNING, WindowState.PAUSED,
                           WindowState.ERROR})
_ACTIVE = _CONTROLLABLE | {WindowState.STOPPING}
