"""Try the fix / Write the fix for the watched run shown: `python -m memlens fix` in a
QProcess (the GUI never waits on it), its progress in a FixPanel, the two runs it made
pinned (the original and the patched copy, the same steps), and --write's core function
after a confirmation.

It is given what it needs, nothing more: the events panel whose buttons ask for it, a
function that says which run is shown (its history and folder) and one that pins a run.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, QProcess, QProcessEnvironment, Qt, QTimer, Signal
from PySide6.QtWidgets import QMessageBox, QWidget

from memlens.app.panels.events_panel import EventsPanel
from memlens.app.panels.fix_panel import FixPanel
from memlens.core.fix.engine import DEFAULT_STEPS
from memlens.core.fix.report import FIX_JSON
from memlens.core.fix.runs import child_env
from memlens.core.fix.write import FixWriteError, read_patch, write_fix
from memlens.core.records import RunEvent
from memlens.core.runfolder.format import STEPS_CSV, RunFolderError
from memlens.core.runfolder.reader import load_run

POLL_MS = 250  # how often the steps of the run going are counted (steps.csv's rows)
_STAGE = re.compile(r"memlens fix: \[(\d+)/(\d+)\] (.*)")

ShownRun = Callable[[], tuple[object, Path | None]]  # (RunHistory or None, its folder)


def fix_folder_for(run_folder: Path) -> Path:
    """`<run>-fix` beside the run's folder, `-fix-2`... where one is there already."""
    folder, k = run_folder.with_name(f"{run_folder.name}-fix"), 2
    while folder.exists():
        folder, k = run_folder.with_name(f"{run_folder.name}-fix-{k}"), k + 1
    return folder


class FixSession(QObject):
    finished = Signal(str)  # the fix folder, once its results are shown
    failed = Signal(str)

    def __init__(self, parent: QWidget, events: EventsPanel, shown: ShownRun,
                 pin: Callable[[object, str], object], steps: int = DEFAULT_STEPS) -> None:
        super().__init__(parent)
        self.setObjectName("fix_session")
        self._parent, self._shown, self._pin, self.steps = parent, shown, pin, steps
        self.panel: FixPanel | None = None
        self.process: QProcess | None = None
        self.out: Path | None = None  # the fix folder of the last try
        self._script: Path | None = None
        self._event: RunEvent | None = None
        self._stage = (0, 3, "")
        self._errors: list[str] = []  # fix's own lines on stderr: the last says why it ended
        self._timer = QTimer(self)
        self._timer.setInterval(POLL_MS)
        self._timer.timeout.connect(self._on_poll)
        events.fix_requested.connect(self.try_fix)
        events.write_fix_requested.connect(self.ask_to_write)

    # --- Try the fix ---------------------------------------------------------------------------
    def try_fix(self, event: RunEvent) -> bool:
        if self.process is not None:
            self._say("A fix is already running", "Wait for it to finish (its window shows "
                      "how far it is).", "fix_busy")
            return False
        history, folder = self._shown()
        meta = getattr(history, "meta", None) or {}
        script = Path(meta.get("script_path") or "")
        if meta.get("source") != "watch" or folder is None:
            return self._say("Nothing to fix here", "Try the fix works on a run recorded by "
                             "`main.py watch` (a script of yours), opened or followed.",
                             "fix_unavailable")
        if not meta.get("script_path") or not script.is_file():
            return self._say("The script is not there", f"{script or 'The script'} cannot be "
                             "found: fix runs it again.", "fix_unavailable")
        self.out, self._script, self._event = fix_folder_for(folder), script, event
        cwd = Path(meta.get("cwd") or script.parent)
        args = ["-m", "memlens", "fix", str(script), "--out", str(self.out), "--steps",
                str(self.steps), "--", *[str(a) for a in (meta.get("argv") or [])[1:]]]
        self.panel = FixPanel(script.name, self._parent)
        self.panel.write_clicked.connect(self.ask_to_write)
        self.panel.rejected.connect(self.cancel)  # closed while it runs: the fix stops
        self.panel.show()
        self.process = p = QProcess(self)
        p.setProgram(sys.executable)
        p.setArguments(args)
        p.setWorkingDirectory(str(cwd if cwd.is_dir() else script.parent))
        env = QProcessEnvironment()
        for key, value in child_env(script.parent).items():
            env.insert(key, value)
        p.setProcessEnvironment(env)
        p.readyReadStandardError.connect(self._on_stderr)
        p.finished.connect(self._on_finished)
        p.errorOccurred.connect(self._on_error)
        self._errors, self._stage = [], (0, 3, "")
        p.start()
        self._timer.start()
        return True

    def _on_stderr(self) -> None:
        text = bytes(self.process.readAllStandardError()).decode("utf-8", "replace")
        for line in text.splitlines():
            m = _STAGE.match(line.strip())
            if m:
                self._stage = (int(m.group(1)), int(m.group(2)), m.group(3))
                self._on_poll()
            elif line.startswith("memlens fix:"):
                self._errors.append(line.removeprefix("memlens fix:").strip())

    def _on_poll(self) -> None:
        """The stage, and the steps the run going has recorded (its steps.csv's rows)."""
        stage, stages, text = self._stage
        if self.panel is None or not stage:
            return
        run = {1: "before", 3: "after"}.get(stage)
        steps = _rows(self.out / run / STEPS_CSV) if run and self.out else 0
        self.panel.set_progress(stage, stages, text, steps, self.steps if run else 0)

    def _on_error(self, error) -> None:
        if error == QProcess.FailedToStart:
            self._end_failed(f"{sys.executable} could not start ({error.name})")

    def _on_finished(self, code: int, _status) -> None:
        self._on_stderr()
        self._timer.stop()
        self.process = None
        entries = _read_entries(self.out)
        if entries is None:  # refused (exit 2) or broke: its one line says why
            self._end_failed(self._errors[-1] if self._errors else f"exit code {code}")
            return
        patch = _read_patch(self.out)
        can_write = bool(patch.get("patched_ok")) and bool(patch.get("files"))
        self.panel.show_result(entries, can_write, patch.get("why_not"),
                               self._event.where if self._event else None)
        for run, name in (("before", "original"), ("after", "fixed")):
            try:
                history = load_run(self.out / run)
            except (RunFolderError, OSError):
                continue  # a run that never started (nothing was fixed: no after)
            self._pin(history, f"{name}: {self._script.name} ({len(history.steps)} steps)")
        self.finished.emit(str(self.out))

    def cancel(self) -> None:
        """Stop a fix that runs (SIGTERM: fix kills the watched run it waits for)."""
        p = self.process
        if p is None:
            return
        p.finished.disconnect(self._on_finished)
        p.terminate()
        if not p.waitForFinished(5000):
            p.kill()
        self._end_failed("stopped: its window was closed")

    def _end_failed(self, message: str) -> None:
        self._timer.stop()
        self.process = None
        if self.panel is not None:
            self.panel.show_failure(message)
        self.failed.emit(message)

    # --- Write the fix ---------------------------------------------------------------------
    def ask_to_write(self, _event: RunEvent | None = None) -> QMessageBox | None:
        """A confirmation naming the files and their backups; Yes writes."""
        if self.out is None or not (self.out / FIX_JSON).is_file():
            self._say("Try the fix first", "Write the fix writes a fix tried here: choose "
                      "Try the fix, look at what it changes, then write it.", "fix_write_none")
            return None
        files = [f["path"] for f in _read_patch(self.out).get("files", [])]
        listing = "\n".join(f"  {f}  (backup: {Path(f).name}.orig)" for f in files)
        box = QMessageBox(QMessageBox.Question, "Write the fix",
                          f"Apply the fix to your files?\n\n{listing}\n\nEach is backed up "
                          "beside it first; a file changed since the fix ran is not written.",
                          QMessageBox.Yes | QMessageBox.Cancel, self._parent)
        box.setObjectName("fix_write_confirm")
        box.setAttribute(Qt.WA_DeleteOnClose)
        box.button(QMessageBox.Yes).clicked.connect(self.write)
        box.open()
        return box

    def write(self) -> list[Path]:
        try:
            written = write_fix(self.out)
        except FixWriteError as exc:
            self._say("The fix was not written", str(exc), "fix_write_refused")
            return []
        self._say("The fix was written", "\n".join(f"{p} (backup: {p.name}.orig)"
                                                   for p in written), "fix_written",
                  QMessageBox.Information)
        return written

    def _say(self, title: str, text: str, name: str, icon=QMessageBox.Warning) -> bool:
        box = QMessageBox(icon, title, text, QMessageBox.Ok, self._parent)
        box.setObjectName(name)
        box.setAttribute(Qt.WA_DeleteOnClose)
        box.open()
        return False


def _rows(path: Path) -> int:
    try:
        return max(0, path.read_bytes().count(b"\n") - 1)  # less the header
    except OSError:
        return 0


def _read_entries(out: Path | None) -> list[dict] | None:
    try:
        entries = json.loads((out / FIX_JSON).read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError):
        return None
    return entries if isinstance(entries, list) else None


def _read_patch(out: Path) -> dict:
    try:
        return read_patch(out)
    except FixWriteError:
        return {}
