"""The Help menu: what the techniques do, the memory categories, the shortcuts, the docs."""

from __future__ import annotations

from PySide6.QtCore import QObject
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QWidget

from memlens.app.window.menus import add_action


class HelpMenu(QObject):
    """Owns the help dialog (made on first use, over `parent`)."""

    def __init__(self, parent: QWidget) -> None:
        super().__init__(parent)
        self._parent = parent
        self.help_dialog = None

    def add_to(self, menu_bar) -> None:
        menu = menu_bar.addMenu("&Help")
        for text, key, page, name in (
                ("What the &techniques do", QKeySequence.HelpContents, "techniques",
                 "help_techniques_action"),
                ("Memory &categories", None, "categories", "help_categories_action"),
                ("&Keyboard shortcuts", "Ctrl+/", "shortcuts", "help_shortcuts_action")):
            add_action(self._parent, menu, text, key, lambda _=False, p=page: self.show_help(p),
                       name)
        add_action(self._parent, menu, "&Documentation", None, self.open_docs,
                   "help_docs_action")

    def show_help(self, page: str):
        from memlens.app.panels.help_dialog import HelpDialog

        if self.help_dialog is None:
            self.help_dialog = HelpDialog(self._parent, page)
        self.help_dialog.show_page(page)
        self.help_dialog.show()
        self.help_dialog.raise_()
        return self.help_dialog

    def open_docs(self) -> bool:
        from PySide6.QtGui import QDesktopServices

        from memlens.app.panels.help_dialog import docs_url

        return QDesktopServices.openUrl(docs_url())
