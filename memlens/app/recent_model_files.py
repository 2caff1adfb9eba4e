"""The model files a user opened lately, kept in the app's QSettings across sessions."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSettings

from memlens.app.app_settings import user_store

SETTINGS_KEY = "model_files/recent"
MAX_RECENT = 8


class RecentModelFiles:
    """Newest first, each path once, at most MAX_RECENT; files that are gone are dropped."""

    def __init__(self, settings: QSettings | None = None) -> None:
        self.settings = settings if settings is not None else user_store()

    def paths(self) -> list[str]:
        value = self.settings.value(SETTINGS_KEY, [])
        if isinstance(value, str):  # QSettings gives one item back as a plain string
            value = [value]
        return [p for p in value or [] if isinstance(p, str) and Path(p).is_file()]

    def add(self, path: str) -> list[str]:
        paths = [path] + [p for p in self.paths() if p != path]
        paths = paths[:MAX_RECENT]
        self.settings.setValue(SETTINGS_KEY, paths)
        self.settings.sync()
        return paths
