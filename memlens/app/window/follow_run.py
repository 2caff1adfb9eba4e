"""Following a run folder another process writes: a timer polls core's RunFollower."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal

from memlens.core.runfolder.follow import FINISHED, GONE, RunFollower
from memlens.core.runfolder.format import RunFolderError

POLL_MS = 100  # a row reaches the plots within one poll and one frame


class FollowedRun(QObject):
    """Polls the folder on the GUI thread (a poll reads only the bytes appended since the
    last one); stops polling once the writer finished or is gone."""

    state_changed = Signal(str)  # live / finished / writer gone, or run.json changed
    failed = Signal(str)

    def __init__(self, folder: str | Path, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.follower = RunFollower(folder)  # RunFolderError for a folder that is not one
        self.polls = 0
        self._timer = QTimer(self)
        self._timer.setObjectName("follow_timer")
        self._timer.setInterval(POLL_MS)
        self._timer.timeout.connect(self._on_timeout)

    @property
    def history(self):
        return self.follower.history

    @property
    def state(self) -> str:
        return self.follower.state

    @property
    def active(self) -> bool:
        return self._timer.isActive()

    def start(self) -> None:
        self._on_timeout()
        if self.state not in (FINISHED, GONE):
            self._timer.start()

    def stop(self) -> None:
        self._timer.stop()

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


class AwaitedFolder(QObject):
    """A folder that does not exist yet (`app --follow DIR` before the run that makes DIR
    starts): polled until it appears, then `appeared` is emitted once."""

    appeared = Signal(object)  # the folder (a Path)

    def __init__(self, folder: Path, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.folder = Path(folder)
        self._timer = QTimer(self)
        self._timer.setObjectName("await_folder_timer")
        self._timer.setInterval(POLL_MS)
        self._timer.timeout.connect(self._on_timeout)

    @property
    def active(self) -> bool:
        return self._timer.isActive()

    def start(self) -> None:
        self._timer.start()

    def stop(self) -> None:
        self._timer.stop()

    def _on_timeout(self) -> None:
        if self.folder.is_dir():
            self._timer.stop()
            self.appeared.emit(self.folder)


def waiting_text(folder: Path) -> str:
    return f"Waiting for {folder} to appear…"
