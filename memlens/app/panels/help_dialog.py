"""Help > the techniques, the memory categories, the keyboard shortcuts and the docs."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QTextBrowser,
    QVBoxLayout,
)

from memlens.app.resources import resource_text

PAGES = (("techniques", "Techniques", "help/techniques.html"),
         ("categories", "Memory categories", "help/categories.html"))
DOCS_FILE = Path(__file__).resolve().parent.parent / "README.md"


CATEGORIES_MARK = "<!--CATEGORIES:"


def page_html(name: str) -> str:
    """A help page's HTML; the categories' list comes from the one table that the legend
    tooltips and the docs use, so it names every category the app draws."""
    text = resource_text(name)
    start = text.find(CATEGORIES_MARK)
    if start < 0:
        return text
    import html

    from memlens.core.records import CATEGORY_HELP, MEMORY_CATEGORIES

    items = "".join(f"<dt><b>{c}</b></dt><dd>{html.escape(CATEGORY_HELP[c])}.</dd>"
                    for c in MEMORY_CATEGORIES)
    end = text.index("-->", start) + 3
    return f"{text[:start]}<dl>{items}</dl>{text[end:]}"


def docs_url() -> QUrl:
    """The README next to the app in a source tree (docs/ sits beside it)."""
    return QUrl.fromLocalFile(str(DOCS_FILE))


def shortcut_rows(window) -> list[tuple[str, str]]:
    """(what, keys) for each of the window's actions that has a shortcut, in menu order."""
    rows = []
    for action in window.findChildren(QAction):
        keys = action.shortcut().toString(QKeySequence.PortableText)
        if keys and action.text():
            rows.append((action.text().replace("&", "").rstrip("…").strip(), keys))
    return rows


class HelpDialog(QDialog):
    def __init__(self, window, page: str = "techniques") -> None:
        super().__init__(window)
        self.setObjectName("help_dialog")
        self.setWindowTitle("memlens help")
        self.tabs = QTabWidget()
        self.pages: dict[str, int] = {}
        for key, title, name in PAGES:
            browser = QTextBrowser()
            browser.setObjectName(f"help_{key}")
            browser.setOpenExternalLinks(True)
            browser.setHtml(page_html(name))
            self.pages[key] = self.tabs.addTab(browser, title)
        rows = shortcut_rows(window)
        self.shortcuts = QTableWidget(len(rows), 2)
        self.shortcuts.setObjectName("help_shortcuts")
        self.shortcuts.setHorizontalHeaderLabels(["Action", "Shortcut"])
        self.shortcuts.verticalHeader().hide()
        self.shortcuts.setEditTriggers(QTableWidget.NoEditTriggers)
        for r, (what, keys) in enumerate(rows):
            self.shortcuts.setItem(r, 0, QTableWidgetItem(what))
            self.shortcuts.setItem(r, 1, QTableWidgetItem(keys))
        self.shortcuts.horizontalHeader().setSectionResizeMode(0, QHeaderView.Stretch)
        self.pages["shortcuts"] = self.tabs.addTab(self.shortcuts, "Keyboard shortcuts")
        link = QLabel(f'Documentation: <a href="{docs_url().toString()}">the README and '
                      "docs/</a> of memlens")
        link.setObjectName("help_docs_link")
        link.setOpenExternalLinks(True)
        link.setTextInteractionFlags(Qt.TextBrowserInteraction)
        buttons = QDialogButtonBox(QDialogButtonBox.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.tabs, 1)
        layout.addWidget(link)
        layout.addWidget(buttons)
        self.resize(720, 560)
        self.show_page(page)

    def show_page(self, page: str) -> None:
        self.tabs.setCurrentIndex(self.pages.get(page, 0))
