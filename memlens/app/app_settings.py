"""What the app remembers between launches: the run settings, window geometry and docks,
splitter sizes, the last folder, recent runs, the runs folder, the bytes display and the theme
(QSettings).

`AppSettings.user()` is the user's own store (launch() uses it); `AppSettings.at(path)` an
INI file (the tests give a temporary one); `AppSettings()` remembers nothing past the
process (the shot command, so its pictures never depend on what a user did).
"""

from __future__ import annotations

import json
from pathlib import Path

from PySide6.QtCore import QByteArray, QSettings
from PySide6.QtWidgets import QMainWindow, QSplitter

RECENT_MAX = 8
# Storage keys, one definition each.
GEOMETRY, WINDOW_STATE, SPLITTERS = "window/geometry", "window/state", "window/splitters"
LAST_FOLDER, RECENT, RUN_CONFIG = "files/last_folder", "files/recent", "run/config"
EXACT_BYTES, THEME, RUNS_FOLDER = "view/exact_bytes", "view/theme", "files/runs_folder"
THEME_CHOICES = ("system", "light", "dark")  # View > Theme; "system" follows its scheme
X_AXIS = "view/x_axis"
X_AXIS_CHOICES = ("steps", "wall_time")  # View > X axis; the x data stay in steps either way


def default_runs_folder() -> Path:
    """Where in-app runs go until the user picks a folder: one place whatever folder the app
    was started from (a desktop launcher starts it in the home folder)."""
    return Path.home() / "memlens-runs"


def user_store() -> QSettings:
    """The user's own settings file: memlens/memlens.ini in the user's config folder (tests
    point QSettings.setPath, or XDG_CONFIG_HOME, at a temporary folder)."""
    return QSettings(QSettings.IniFormat, QSettings.UserScope, "memlens", "memlens")


class AppSettings:
    def __init__(self, store: QSettings | None = None) -> None:
        self._store = store
        self._memory: dict[str, object] = {}

    @classmethod
    def user(cls) -> AppSettings:
        return cls(user_store())

    @classmethod
    def at(cls, path: str | Path) -> AppSettings:
        return cls(QSettings(str(path), QSettings.IniFormat))

    @property
    def persistent(self) -> bool:
        return self._store is not None

    def get(self, key: str, default=None):
        if self._store is None:
            return self._memory.get(key, default)
        return self._store.value(key, default)

    def put(self, key: str, value) -> None:
        if self._store is None:
            self._memory[key] = value
        else:
            self._store.setValue(key, value)

    def sync(self) -> None:
        if self._store is not None:
            self._store.sync()

    # --- typed values ------------------------------------------------------------------------
    def _text_list(self, key: str) -> list[str]:
        raw = self.get(key, "[]")
        try:
            items = json.loads(raw) if isinstance(raw, str) else []
        except json.JSONDecodeError:
            return []
        return [str(i) for i in items if isinstance(i, str)] if isinstance(items, list) else []

    def recent(self) -> list[str]:
        """Recent runs and snapshots, newest first."""
        return self._text_list(RECENT)

    def add_recent(self, path: str | Path) -> list[str]:
        text = str(Path(path).resolve())
        items = [text, *[p for p in self.recent() if p != text]][:RECENT_MAX]
        self.put(RECENT, json.dumps(items))
        return items

    def remove_recent(self, path: str) -> None:
        self.put(RECENT, json.dumps([p for p in self.recent() if p != path]))

    def last_folder(self) -> str | None:
        folder = self.get(LAST_FOLDER)
        return str(folder) if folder and Path(str(folder)).is_dir() else None

    def set_last_folder(self, folder: str | Path) -> None:
        self.put(LAST_FOLDER, str(folder))

    def exact_bytes(self) -> bool:
        return str(self.get(EXACT_BYTES, "false")).lower() == "true"

    def set_exact_bytes(self, on: bool) -> None:
        self.put(EXACT_BYTES, "true" if on else "false")

    def runs_folder(self) -> Path:
        folder = self.get(RUNS_FOLDER)
        return Path(str(folder)) if folder else default_runs_folder()

    def set_runs_folder(self, folder: str | Path) -> None:
        self.put(RUNS_FOLDER, str(Path(folder).expanduser().resolve()))

    def theme(self) -> str:
        """"system", "light" or "dark" (View > Theme)."""
        choice = str(self.get(THEME, "system"))
        return choice if choice in THEME_CHOICES else "system"

    def set_theme(self, choice: str) -> None:
        self.put(THEME, choice)

    def x_axis(self) -> str:
        """"steps" or "wall_time" (View > X axis)."""
        choice = str(self.get(X_AXIS, "steps"))
        return choice if choice in X_AXIS_CHOICES else "steps"

    def set_x_axis(self, choice: str) -> None:
        self.put(X_AXIS, choice)

    def run_config(self) -> dict | None:
        raw = self.get(RUN_CONFIG)
        try:
            data = json.loads(raw) if isinstance(raw, str) else None
        except json.JSONDecodeError:
            return None
        return data if isinstance(data, dict) else None

    def saved_run_config(self):
        """The run settings of the last session as a RunConfig, or None (nothing saved, or
        no longer valid)."""
        from memlens.core.config import RunConfig
        from memlens.core.options import ConfigError

        data = self.run_config()
        if data is None:
            return None
        try:
            return RunConfig.from_dict(data)
        except (ConfigError, TypeError, ValueError, KeyError):
            return None

    def set_run_config(self, data: dict) -> None:
        self.put(RUN_CONFIG, json.dumps(data, default=str))

    # --- the window ------------------------------------------------------------------------
    def save_window(self, window: QMainWindow) -> None:
        self.put(GEOMETRY, window.saveGeometry())
        self.put(WINDOW_STATE, window.saveState())
        sizes = {s.objectName(): s.sizes() for s in window.findChildren(QSplitter)
                 if s.objectName()}
        self.put(SPLITTERS, json.dumps(sizes))

    def save_session(self, window: QMainWindow, run_config: dict | None) -> None:
        """What a closing window leaves for the next launch: its layout and, where its
        fields held a valid one, its run settings."""
        self.save_window(window)
        if run_config is not None:
            self.set_run_config(run_config)
        self.sync()

    def restore_window(self, window: QMainWindow) -> bool:
        """Geometry, docks and splitters as last saved; False when nothing was saved."""
        geometry, state = self.get(GEOMETRY), self.get(WINDOW_STATE)
        if not isinstance(geometry, QByteArray | bytes):
            return False
        window.restoreGeometry(QByteArray(geometry))
        if isinstance(state, QByteArray | bytes):
            window.restoreState(QByteArray(state))
        raw = self.get(SPLITTERS, "{}")
        try:
            sizes = json.loads(raw) if isinstance(raw, str) else {}
        except json.JSONDecodeError:
            sizes = {}
        for splitter in window.findChildren(QSplitter):
            wanted = sizes.get(splitter.objectName()) if isinstance(sizes, dict) else None
            if (isinstance(wanted, list) and len(wanted) == splitter.count()
                    and all(isinstance(v, int) and v >= 0 for v in wanted)):
                splitter.setSizes(wanted)
        return True
