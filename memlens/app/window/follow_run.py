"""Following a run folder another process writes: a timer polls core's RunFollower."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, Signal

from memlens.app.poller import Poller
from memlens.core.runfolder.follow import FINISHED, GONE, RunFollower
from memlens.core.runfolder.format import RunFolderError

POLL_MS = 100  # a row reaches the plots within one poll and one frame


class FollowedRun(Poller):
    """Polls the folder on the GUI thread (a poll reads only the bytes appended since the
    last one); stops polling once the writer finished or is gone."""

    state_changed = Signal(str)  # live / finished / writer gone, or run.json changed
    failed = Signal(str)

    def __init__(self, folder: str | Path, parent: QObject | None = None) -> None:
        super().__init__("follow_timer", POLL_MS, parent)
        self.follower = RunFollower(folder)  # RunFolderError for a folder that is not one
        self.polls = 0

    @property
    def history(self):
        return self.follower.history

    @property
    def state(self) -> str:
        return self.follower.state

    def start(self) -> None:
        self._poll_until(lambda: self.state in (FINISHED, GONE))

    def _on_timeout(self) -> None:
        before = self.follower.state, self.follower.meta_reads
        try:
            self.follower.poll()
        except RunFolderError as exc:
            self._timer.stop()
            self.failed.emit(str(exc))
            return
        self.polls += 1
        if self.state in (FINISHED, GONE):
            self._timer.stop()
        if (self.state, self.follower.meta_reads) != before or self.polls == 1:
            self.state_changed.emit(self.state)  # also for new meta: the status bar shows it


def state_text(state: str, folder: Path) -> str:
    return {
        "live": f"Following {folder}: live",
        "waiting": f"Following {folder}: waiting for the writer to start",
        "finished": f"Followed {folder}: finished",
        "writer gone": f"Followed {folder}: writer gone (its process ended without finishing)",
    }.get(state, state)


class AwaitedFolder(Poller):
    """A folder that does not exist yet (`app --follow DIR` before the run that makes DIR
    starts): polled until it appears, then `appeared` is emitted once."""

    appeared = Signal(object)  # the folder (a Path)

    def __init__(self, folder: Path, parent: QObject | None = None) -> None:
        super().__init__("await_folder_timer", POLL_MS, parent)
        self.folder = Path(folder)

    def _on_timeout(self) -> None:
        if self.folder.is_dir():
            self._timer.stop()
            self.appeared.emit(self.folder)


def waiting_text(folder: Path) -> str:
    return f"Waiting for {folder} to appear…"
