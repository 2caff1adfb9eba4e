"""The ranks of one job folder, read once (opened) or as they grow (followed)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, Signal

from memlens.app.poller import Poller
from memlens.core.history import RunHistory
from memlens.core.runfolder.follow import FINISHED, GONE, RunFollower
from memlens.core.runfolder.format import RunFolderError
from memlens.core.runfolder.ranks import JobFigures, job_figures
from memlens.core.runfolder.reader import load_run, rank_folders

# Every rank's folder is read at each poll (and the job's folder listed for new ranks):
# slower than one followed run's, still well under a glance.
POLL_MS = 250


class RankJob(Poller):
    """Each rank's history. Opened: every rank folder read once. Followed: a timer polls
    each rank's RunFollower, and looks for rank folders that appear later (a rank that
    starts late, another node's), until every rank the job has is done."""

    changed = Signal()  # new rows or new ranks: figures() and histories are current

    def __init__(self, folder: str | Path, follow: bool, parent: QObject | None = None) -> None:
        super().__init__("ranks_follow_timer", POLL_MS, parent)
        self.folder = Path(folder)
        self.follow = follow
        self.histories: dict[Path, RunHistory] = {}
        self.problems: dict[Path, str] = {}  # a rank that cannot be read: why
        self._followers: dict[Path, RunFollower] = {}

    def start(self) -> None:
        if not self.follow:
            for f in rank_folders(self.folder):
                try:
                    self.histories[f] = load_run(f)
                except RunFolderError as exc:
                    self.problems[f] = str(exc)
            self.changed.emit()
            return
        self._poll_until(self._done)

    def figures(self) -> JobFigures:
        return job_figures(self.folder, self.histories.items())

    def _on_timeout(self) -> None:
        new = False
        for f in rank_folders(self.folder):
            if f not in self._followers and f not in self.problems:
                self._followers[f] = RunFollower(f)
                self.histories[f] = self._followers[f].history
                new = True
        for f, follower in self._followers.items():
            if f in self.problems or follower.state in (FINISHED, GONE):
                continue
            try:
                steps, samples = follower.poll()
            except RunFolderError as exc:
                self.problems[f] = str(exc)
                new = True
                continue
            new = new or bool(steps or samples) or follower.state in (FINISHED, GONE)
        if new:
            self.changed.emit()
        if self._done():
            self._timer.stop()

    def _done(self) -> bool:
        """Every rank the job said it has is here, and each has finished or is gone."""
        worlds = [h.meta.get("world_size") for h in self.histories.values() if h.meta]
        # A job whose run.json names no world size: the ranks seen so far are all of it.
        world = max((w for w in worlds if isinstance(w, int)), default=len(self._followers))
        return (len(self._followers) >= world > 0 and all(
            f in self.problems or r.state in (FINISHED, GONE)
            for f, r in self._followers.items()))
