"""File > Watch a script…: a user's training script run as a child process under
`python -m memlens watch`, followed live as File > Follow run follows a folder, and driven
from the window: the Techniques panel's changes, Pause/Resume and Stop go to the child
through its control channel (core.watch.control_channel), applied at its next step
boundary; a change comes back as the run's toggle event, drawn as a marker with its effect.

The child is the CLI's `watch` (its exit code, its one-line refusals, complete files at a
stop), so what the app shows is what `main.py watch --at` writes. A Stop that the script
does not reach (no step boundary comes: it is loading data, say) is followed by SIGTERM
after STOP_GRACE_MS, which the watch also ends cleanly; SIGKILL only after as long again.
"""

from __future__ import annotations

import collections
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Protocol

from PySide6.QtCore import QObject, QProcess, QProcessEnvironment, QTimer, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMessageBox

import memlens
from memlens.app.panels.script_techniques import ScriptTechniquesView
from memlens.app.panels.window_state import WindowState
from memlens.app.window.shown_run import RunOnScreen
from memlens.app.window.watch_script_dialog import WatchScriptDialog
from memlens.core.options import ConfigError, format_value
from memlens.core.recorder.output import choose_folder
from memlens.core.runfolder.format import RUN_JSON
from memlens.core.watch.control_channel import write_command
from memlens.core.watch.toggles import parse_value

STOP_GRACE_MS = 5000
SYNC_MS = 150  # the window's state and the panel follow the child this often
OUTPUT_LINES = 200  # of the child's output kept, for the message when it fails
PACKAGE_ROOT = str(Path(memlens.__file__).resolve().parents[1])


class WatchedScript(QObject):
    """One child process `python -m memlens watch --control FILE --out DIR SCRIPT -- ARGS`
    and its control channel."""

    ended = Signal(int, str)  # exit code, the last lines of its output

    def __init__(self, script: str, args: list[str], cwd: str, folder: Path,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.script, self.folder = Path(script), Path(folder)
        self._control_dir = Path(tempfile.mkdtemp(prefix="memlens-control-"))
        self.control = self._control_dir / "control.jsonl"
        self.control.touch()
        self.paused = self.stopping = False
        self.output: collections.deque[str] = collections.deque(maxlen=OUTPUT_LINES)
        self.process = QProcess(self)
        self.process.setObjectName("watched_script_process")
        self.process.setWorkingDirectory(cwd)
        self.process.setProcessChannelMode(QProcess.MergedChannels)
        env = QProcessEnvironment.systemEnvironment()
        path = env.value("PYTHONPATH", "")
        env.insert("PYTHONPATH", PACKAGE_ROOT + (f":{path}" if path else ""))
        env.insert("PYTHONUNBUFFERED", "1")
        self.process.setProcessEnvironment(env)
        self.process.readyRead.connect(self._on_output)
        self.process.finished.connect(self._on_finished)
        self.process.errorOccurred.connect(self._on_error)
        self.process.start(sys.executable, [
            "-m", "memlens", "watch", "--out", str(self.folder), "--control",
            str(self.control), str(self.script), "--", *args])

    @property
    def alive(self) -> bool:
        return self.process.state() != QProcess.NotRunning

    def send(self, command: dict) -> None:
        if self.alive:
            write_command(self.control, command)

    def set(self, key: str, value) -> None:
        self.send({"set": key, "value": value})

    def pause(self) -> None:
        self.paused = True
        self.send({"pause": True})

    def resume(self) -> None:
        self.paused = False
        self.send({"resume": True})

    def stop(self) -> None:
        """Stop at the next step boundary (files complete); SIGTERM if none comes."""
        if not self.alive or self.stopping:
            return
        self.stopping = True
        self.send({"stop": True})
        QTimer.singleShot(STOP_GRACE_MS, self._terminate)

    def _terminate(self) -> None:
        if self.alive:
            self.process.terminate()
            QTimer.singleShot(STOP_GRACE_MS, self._kill)

    def _kill(self) -> None:
        if self.alive:
            self.process.kill()

    def shutdown(self, wait_ms: int) -> None:
        """The window closes: stop, wait a little, then end it (its files complete)."""
        if not self.alive:
            return
        self.stop()
        if not self.process.waitForFinished(wait_ms):
            self.process.terminate()
            if not self.process.waitForFinished(wait_ms):
                self.process.kill()
                self.process.waitForFinished(wait_ms)

    def _on_output(self) -> None:
        text = bytes(self.process.readAll().data()).decode(errors="replace")
        self.output.extend(text.splitlines())

    def _on_error(self, error) -> None:
        if error == QProcess.FailedToStart:
            self.output.append(f"memlens watch: {sys.executable} could not be started")
            self._on_finished(2, QProcess.CrashExit)

    def _on_finished(self, code: int, _status=None) -> None:
        self._on_output()
        shutil.rmtree(self._control_dir, ignore_errors=True)
        self.ended.emit(int(code), "\n".join(self.output))


class ScriptHost(RunOnScreen, Protocol):
    """What a watched script asks of the window beyond the run on screen: its state (the
    window's, and the text the run panel shows) and a redraw now."""

    @property
    def state(self) -> WindowState: ...

    def set_state(self, state: WindowState, message: str = "") -> None: ...

    def refresh_now(self) -> None: ...


class ScriptWatching(QObject):
    """The window's side (see the module doc): the menu action, the child, the window's
    state while it runs, the Techniques panel's watch mode. It follows the child's folder
    through `opening` (the window's RunOpening), says things in `techniques` (the panel)
    and reads the run panel's state line from `run_panel`."""

    def __init__(self, host: ScriptHost, opening, techniques, run_panel, settings,
                 runs_dir) -> None:
        super().__init__(host)
        self._host, self._opening, self._techniques = host, opening, techniques
        self._run_panel, self._settings, self._runs_dir = run_panel, settings, runs_dir
        self.child: WatchedScript | None = None
        self.dialog: WatchScriptDialog | None = None
        self.view = ScriptTechniquesView(techniques)
        self._followed = None
        self.sent: list[str] = []
        self.action = QAction("&Watch a script…", host)
        self.action.setObjectName("watch_script_action")
        self.action.triggered.connect(self.open_dialog)
        follow = host.findChild(QAction, "follow_run_action")
        menu = follow.associatedObjects()[0] if follow is not None else None
        if menu is not None:  # right after File > Follow run
            actions = menu.actions()
            after = actions[actions.index(follow) + 1] if follow in actions[:-1] else None
            menu.insertAction(after, self.action)
        self._timer = QTimer(self)
        self._timer.setInterval(SYNC_MS)
        self._timer.timeout.connect(self._sync)

    @property
    def alive(self) -> bool:
        return self.child is not None and self.child.alive

    def open_dialog(self) -> WatchScriptDialog:
        self.dialog = WatchScriptDialog(self._settings, self._host)
        self.dialog.chosen.connect(self.start)
        self.dialog.open()
        return self.dialog

    def start(self, script: str, args: list[str], cwd: str) -> bool:
        host = self._host
        if host.running or self.alive:
            host.message("A run is going", "Stop the run going now before watching a script.",
                      QMessageBox.Information, "watch_script_busy")
            return False
        runs = (Path(self._runs_dir) if self._runs_dir
                else Path(tempfile.mkdtemp(prefix="memlens-")))
        # named and claimed as every run's folder (the watch's writer makes it)
        folder = choose_folder(None, f"watch-{Path(script).stem}", runs_dir=runs)
        runs.mkdir(parents=True, exist_ok=True)
        self.child = WatchedScript(script, args, cwd, folder, self)
        self.sent: list[str] = []  # technique changes sent to it
        self.child.ended.connect(self._on_ended)
        self._followed = None
        self._opening.follow_run(folder)  # waits for the folder to appear
        self.view.enter()
        self._techniques.show_note(f"Watching {Path(script).name}: a change applies at its "
                                     "next step boundary")
        host.set_state(WindowState.STARTING, f"Starting {Path(script).name}…")
        self._timer.start()
        return True

    # --- what the window's controls do while a script is watched -------------------------
    def set_technique(self, key: str, value) -> None:
        try:
            value = parse_value(key, value)
        except ConfigError as exc:
            self._techniques.show_note(str(exc))
            return
        self.child.set(key, value)
        self.sent.append(f"{key}={format_value(value)}")
        self._techniques.show_note(f"{key} -> {format_value(value)}: applies at the "
                                     "script's next step boundary")

    def toggle_pause(self) -> None:
        if self.child.paused:
            self.child.resume()
        else:
            self.child.pause()
        self._sync()

    def stop(self) -> None:
        self.child.stop()
        self._sync()

    def shutdown(self) -> None:
        if self.child is not None:
            self.child.shutdown(STOP_GRACE_MS // 2)

    # --- following the child ---------------------------------------------------------------
    def _sync(self) -> None:
        """The window's state and the panel from the child and its run.json."""
        host, child = self._host, self.child
        if child is None or not child.alive:
            return
        followed = self._opening.followed
        if followed is not None and followed is not self._followed:
            # after the follower's own state slot, which calls every state finished
            self._followed = followed
            followed.state_changed.connect(lambda _state: self._sync())
        meta = host.history.meta if host.history is not None else {}
        techniques = meta.get("techniques") if isinstance(meta, dict) else None
        self.view.show(techniques)
        name = child.script.name
        if child.stopping:
            state, text = WindowState.STOPPING, f"Stopping {name} at its next step boundary…"
        elif child.paused:
            acked = isinstance(techniques, dict) and techniques.get("paused")
            state = WindowState.PAUSED
            text = f"{name} paused" + ("" if acked else " at its next step boundary…")
        elif not meta:
            state, text = WindowState.STARTING, f"Starting {name}…"
        else:
            state, text = WindowState.RUNNING, f"Watching {name} (pid {child.process.processId()})"
        if (state, text) != (host.state, self._run_panel.state_label.text()):
            host.set_state(state, text)

    def _on_ended(self, code: int, output: str) -> None:
        host, child = self._host, self.child
        self._timer.stop()
        self.view.leave()
        self._techniques.show_note("")
        folder_made = (child.folder / RUN_JSON).exists()
        if not folder_made:
            self._opening.stop_following()
        host.refresh_now()
        lines = [ln for ln in output.splitlines() if ln.strip()]
        said = [ln for ln in lines if ln.startswith("memlens watch:")]
        name = child.script.name
        if self.sent and code in (0, 2) and _steps_done(child.folder) == 0:
            host.set_state(WindowState.FINISHED, f"{name} ended; it never trained")
            host.message("Nothing to toggle",
                      f"{', '.join(self.sent)}: {name} made no training step (no optimizer "
                      "step, no backward), so there was nothing to toggle.",
                      QMessageBox.Information, "watch_script_not_applied")
            return
        if code == 0:
            host.set_state(WindowState.FINISHED, f"{name} ended; its run is in {child.folder}")
            if said and not folder_made:  # it ended before it trained
                host.message("Nothing was recorded", said[-1].removeprefix("memlens watch: "),
                          QMessageBox.Information, "watch_script_ended")
            return
        last = said[-1] if code == 2 and said else (lines[-1] if lines else "")
        host.set_state(WindowState.FINISHED, f"{name} ended with exit code {code}")
        host.message(f"{name} ended with exit code {code}",
                  f"{last}\n\nIts output ends:\n" + "\n".join(lines[-12:]),
                  QMessageBox.Warning, "watch_script_failed")


def _steps_done(folder: Path) -> int:
    """The steps a finished watch recorded (its run.json's summary), 0 where it kept none."""
    try:
        summary = json.loads((folder / RUN_JSON).read_text(encoding="utf-8"))["summary"]
        return int(summary["steps_done"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0
