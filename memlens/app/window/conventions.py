"""What users expect of a desktop app, added to the main window in one place: Open (runs and
snapshots), Recent runs, drag and drop, remembered settings and layout, box zoom and Zoom to
steps, the rows tables, exact bytes, the Help menu, the runs folder, View > X axis (steps or
wall time) and View > Theme (the system's scheme, light or dark)."""

from __future__ import annotations

from PySide6.QtCore import QObject
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QApplication

from memlens.app.app_settings import AppSettings
from memlens.app.resources import app_icon
from memlens.app.theme import apply_theme, current_theme, theme_for
from memlens.app.timeline.plot_zoom import BoxZoom, ZoomToStepsDialog
from memlens.app.window.open_paths import Opener
from memlens.app.window.runs_folder import RunsFolderChoice
from memlens.app.window.theme_menu import ThemeMenu, chosen_theme
from memlens.app.window.x_axis_menu import XAxisMenu
from memlens.core import units
from memlens.core.config import RunConfig
from memlens.core.options import ConfigError


def remembered_config(settings: AppSettings) -> RunConfig | None:
    """The run settings of the last session, or None (nothing saved, or no longer valid)."""
    data = settings.run_config()
    if data is None:
        return None
    try:
        return RunConfig.from_dict(data)
    except (ConfigError, TypeError, ValueError, KeyError):
        return None


class WindowConventions(QObject):
    def __init__(self, window, settings: AppSettings) -> None:
        super().__init__(window)
        self.main_window = window
        self.settings = settings
        self.opener = Opener(window, settings)
        self.box_zoom = BoxZoom(window.plots)
        self.rows_dialog = None
        self.help_dialog = None
        self.theme_menu = ThemeMenu(window, settings, self.apply_theme)
        self.x_axis_menu = XAxisMenu(window, settings)
        self.runs_folder = RunsFolderChoice(window, settings)
        units.set_exact_bytes(settings.exact_bytes())
        window.setWindowIcon(app_icon())
        hints = QApplication.styleHints()
        hints.colorSchemeChanged.connect(self._on_color_scheme_changed)
        self.apply_theme(chosen_theme(settings.theme()))
        settings.restore_window(window)

    def _action(self, menu, text: str, shortcut, slot, name: str,
                checkable: bool = False) -> QAction:
        action = QAction(text, self.main_window)
        action.setObjectName(name)
        if shortcut is not None:
            action.setShortcut(QKeySequence(shortcut))
        action.setCheckable(checkable)
        action.triggered.connect(slot)
        menu.addAction(action)
        return action

    def add_menus(self, file_menu, view_menu, open_action: QAction) -> None:
        file_menu.insertMenu(open_action, self.opener.recent_menu)
        file_menu.insertAction(self.opener.recent_menu.menuAction(), open_action)
        file_menu.insertAction(self.main_window.export_action, self.runs_folder.action)
        view_menu.addSeparator()
        self._action(view_menu, "&Zoom to steps…", "Ctrl+Shift+Z", self.zoom_dialog,
                     "zoom_action")
        self._action(view_menu, "&Rows table (steps.csv, memory.csv)", "Ctrl+T",
                     self.show_rows, "rows_action")
        log_menu = view_menu.addMenu("&Log scale")
        log_menu.setObjectName("log_menu")
        for plot, text in zip(self.main_window.plots.plots,
                              ("&Memory", "Step &time", "&Loss and grad norm"), strict=True):
            self._action(log_menu, text, None,
                         lambda on, p=plot: self.set_log_scale(p, on),
                         f"log_{plot.objectName()}_action", checkable=True)
        self.exact_action = self._action(view_menu, "&Exact bytes", None,
                                         self._on_exact_bytes_toggled, "exact_bytes_action",
                                         checkable=True)
        self.exact_action.setChecked(units.exact_bytes())
        self._action(view_menu, "&Allocations of this run (Snapshot tab)", None,
                     self.opener.show_run_allocations, "run_allocations_action")
        self.x_axis_menu.add_to(view_menu)
        self.theme_menu.add_to(view_menu)
        help_menu = self.main_window.menuBar().addMenu("&Help")
        self._action(help_menu, "What the &techniques do", QKeySequence.HelpContents,
                     lambda: self.show_help("techniques"), "help_techniques_action")
        self._action(help_menu, "Memory &categories", None,
                     lambda: self.show_help("categories"), "help_categories_action")
        self._action(help_menu, "&Keyboard shortcuts", "Ctrl+/",
                     lambda: self.show_help("shortcuts"), "help_shortcuts_action")
        self._action(help_menu, "&Documentation", None, self.open_docs, "help_docs_action")

    # --- view ----------------------------------------------------------------------------------
    def zoom_dialog(self) -> ZoomToStepsDialog:
        dialog = ZoomToStepsDialog(self.main_window.plots, self.main_window)
        dialog.open()
        return dialog

    def set_log_scale(self, plot, on: bool) -> None:
        plot.set_log_y(on)
        stack = self.main_window.plots
        stack.mark_dirty()
        stack.refresh(True)

    def show_rows(self):
        from memlens.app.panels.rows_table import RowsDialog

        if self.rows_dialog is None:
            self.rows_dialog = RowsDialog(self.main_window)
        self.rows_dialog.reload()
        self.rows_dialog.show()
        self.rows_dialog.raise_()
        return self.rows_dialog

    def _on_exact_bytes_toggled(self, on: bool) -> None:
        units.set_exact_bytes(on)
        self.settings.set_exact_bytes(on)
        self.main_window.refresh_texts()
        if self.rows_dialog is not None:
            for view in self.rows_dialog.views.values():
                view.viewport().update()

    # --- help ----------------------------------------------------------------------------------
    def show_help(self, page: str):
        from memlens.app.panels.help_dialog import HelpDialog

        if self.help_dialog is None:
            self.help_dialog = HelpDialog(self.main_window, page)
        self.help_dialog.show_page(page)
        self.help_dialog.show()
        self.help_dialog.raise_()
        return self.help_dialog

    def open_docs(self) -> bool:
        from PySide6.QtGui import QDesktopServices

        from memlens.app.panels.help_dialog import docs_url

        return QDesktopServices.openUrl(docs_url())

    # --- theme ---------------------------------------------------------------------------------
    def _on_color_scheme_changed(self, scheme) -> None:
        if self.theme_menu.follows_system:
            self.apply_theme(theme_for(scheme))

    def apply_theme(self, theme) -> None:
        apply_theme(theme, self.main_window.plots.plots)
        if self.opener.snapshot_view is not None:
            self.opener.snapshot_view.set_theme(theme)

    @property
    def theme(self):
        return current_theme()

    # --- closing -------------------------------------------------------------------------------
    def save(self) -> None:
        self.settings.save_window(self.main_window)
        try:
            config = self.main_window.run_panel.config(self.main_window.techniques_panel.toggles())
        except ConfigError:
            config = None  # a field left invalid: keep what was saved before
        if config is not None:
            self.settings.set_run_config(config.to_dict())
        self.settings.sync()
