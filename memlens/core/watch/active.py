"""The watch recording in this process: at most one at a time, since the hooks it installs
on torch are process-wide. A forked child (a DataLoader worker) inherits it and must leave
it alone."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memlens.core.watch.session import WatchSession

ACTIVE: list[WatchSession] = []  # a session appends itself; its close() removes it


def active_watch() -> WatchSession | None:
    """The watch recording in this process, if one is."""
    return ACTIVE[-1] if ACTIVE else None


def _forget_in_child() -> None:
    """A forked child inherits the hooks: they must do nothing there, and nothing of the
    parent's run is written from it."""
    for w in ACTIVE:
        w.broken = w.closed = True


if hasattr(os, "register_at_fork"):  # POSIX; where there is no fork there is no child
    os.register_at_fork(after_in_child=_forget_in_child)
