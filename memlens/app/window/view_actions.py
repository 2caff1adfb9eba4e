"""The View menu's own entries: Zoom to steps, the rows tables, log scale per plot and exact
bytes (the x axis, theme and Runs entries are theirs: x_axis_menu, theme_menu, runs_dock)."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QWidget

from memlens.app.app_settings import AppSettings
from memlens.app.timeline.plot_zoom import BoxZoom, ZoomToStepsDialog
from memlens.app.window.menus import add_action
from memlens.app.window.shown_run import RunOnScreen
from memlens.core import units

LOG_MENU_TEXTS = ("&Memory", "Step &time", "&Loss and grad norm")


class ViewActions(QObject):
    """Owns the box zoom, the rows dialog and the bytes display; `texts_changed()` asks the
    window to write its texts again when the bytes display changes."""

    def __init__(self, parent: QWidget, plots, settings: AppSettings, shown: RunOnScreen,
                 texts_changed: Callable[[], None]) -> None:
        super().__init__(parent)
        self._parent, self._plots, self._settings = parent, plots, settings
        self._shown, self._texts_changed = shown, texts_changed
        self.box_zoom = BoxZoom(plots)
        self.rows_dialog = None
        units.set_exact_bytes(settings.exact_bytes())
        self.exact_action = None

    def add_to(self, view_menu) -> None:
        add_action(self._parent, view_menu, "&Zoom to steps…", "Ctrl+Shift+Z",
                   self.zoom_dialog, "zoom_action")
        add_action(self._parent, view_menu, "&Rows table (steps.csv, memory.csv)", "Ctrl+T",
                   self.show_rows, "rows_action")
        log_menu = view_menu.addMenu("&Log scale")
        log_menu.setObjectName("log_menu")
        for plot, text in zip(self._plots.plots, LOG_MENU_TEXTS, strict=True):
            add_action(self._parent, log_menu, text, None,
                       lambda on, p=plot: self.set_log_scale(p, on),
                       f"log_{plot.objectName()}_action", checkable=True)
        self.exact_action = add_action(self._parent, view_menu, "&Exact bytes", None,
                                       self._on_exact_bytes_toggled, "exact_bytes_action",
                                       checkable=True)
        self.exact_action.setChecked(units.exact_bytes())

    def zoom_dialog(self) -> ZoomToStepsDialog:
        dialog = ZoomToStepsDialog(self._plots, self._parent)
        dialog.open()
        return dialog

    def set_log_scale(self, plot, on: bool) -> None:
        plot.set_log_y(on)
        self._plots.mark_dirty()
        self._plots.refresh(True)

    def show_rows(self):
        from memlens.app.panels.rows_table import RowsDialog

        if self.rows_dialog is None:
            self.rows_dialog = RowsDialog(self._parent, self._shown)
        self.rows_dialog.reload()
        self.rows_dialog.show()
        self.rows_dialog.raise_()
        return self.rows_dialog

    def _on_exact_bytes_toggled(self, on: bool) -> None:
        units.set_exact_bytes(on)
        self._settings.set_exact_bytes(on)
        self._texts_changed()
        if self.rows_dialog is not None:
            for view in self.rows_dialog.views.values():
                view.viewport().update()
