"""An editor for any core.options.Option, chosen by its kind: so panels are generated, not written.

choices -> combo box, bool -> check box, int -> spin box (a 0 that means "default" or
"never" shows that word), float -> a line edit checked by Option.parse.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject, QSignalBlocker, Qt, Signal
from PySide6.QtWidgets import QCheckBox, QComboBox, QLabel, QLineEdit, QSpinBox, QWidget

from memlens.core.options import ConfigError, Option

# objectNames scripts and tests rely on, where the short name differs from the key.
SHORT_NAMES: dict[str, str] = {"detach_state": "detach", "no_grad_eval": "no_grad"}
INT_MAX = 2**31 - 1


def object_name(opt: Option) -> str:
    base = SHORT_NAMES.get(opt.key, opt.key)
    if opt.choices:
        return f"{base}_combo"
    if opt.kind is bool:
        return f"{base}_check"
    if opt.kind is int:
        return f"{base}_spin"
    return f"{base}_edit"


def label_text(opt: Option) -> str:
    return opt.key.replace("_", " ")


class FieldLabel(QLabel):
    """A form label that acts for its buddy: a click toggles a check box, else focuses the
    editor (a plain QLabel only does that for a mnemonic)."""

    def mouseReleaseEvent(self, event) -> None:
        buddy = self.buddy()
        if (event.button() == Qt.MouseButton.LeftButton and buddy is not None
                and buddy.isEnabled() and self.rect().contains(event.position().toPoint())):
            if isinstance(buddy, QCheckBox):
                buddy.click()
            else:
                buddy.setFocus(Qt.FocusReason.MouseFocusReason)
        super().mouseReleaseEvent(event)


class RowCheckBox(QCheckBox):
    """A check box that takes the rest of its form row and toggles wherever it is clicked,
    not only on the small box."""

    def hitButton(self, pos) -> bool:
        return self.rect().contains(pos)


class OptionField(QObject):
    """One option's editor widget, with its label; emits `value_changed(key, value)`."""

    value_changed = Signal(str, object)

    def __init__(self, opt: Option, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.option = opt
        self.label = FieldLabel(label_text(opt))
        self.label.setToolTip(opt.help)
        self.widget = self._make_editor(opt)
        self.label.setBuddy(self.widget)
        self.widget.setObjectName(object_name(opt))
        self.widget.setToolTip(f"{opt.help} ({opt.valid_text()})")
        self.set_value(opt.default)

    def _make_editor(self, opt: Option) -> QWidget:
        if opt.choices:
            w = QComboBox()
            w.addItems(list(opt.choices))
            w.currentTextChanged.connect(self._on_editor_changed)
            return w
        if opt.kind is bool:
            w = RowCheckBox()
            w.toggled.connect(self._on_editor_changed)
            return w
        if opt.kind is int:
            w = QSpinBox()
            w.setRange(int(opt.minimum or 0), int(min(opt.maximum or INT_MAX, INT_MAX)))
            _, sep, meaning = opt.help.partition("0 = ")
            if sep and opt.minimum == 0:
                # short: the field sets the panel's width (the tooltip has it whole)
                w.setSpecialValueText(meaning.split(";")[0].replace("the ", "").split(" (")[0])
            w.setKeyboardTracking(False)  # one change per edit, not one per digit typed
            w.valueChanged.connect(self._on_editor_changed)
            return w
        w = QLineEdit()
        w.editingFinished.connect(self._on_editor_changed)
        return w

    def value(self) -> Any:
        w = self.widget
        if isinstance(w, QComboBox):
            return w.currentText()
        if isinstance(w, QCheckBox):
            return w.isChecked()
        if isinstance(w, QSpinBox):
            return w.value()
        return self.option.parse(w.text())

    def set_value(self, value: Any) -> None:
        """Show a value without reporting it back as a user change."""
        w = self.widget
        with QSignalBlocker(w):
            if isinstance(w, QComboBox):
                w.setCurrentText(str(value))
            elif isinstance(w, QCheckBox):
                w.setChecked(bool(value))
            elif isinstance(w, QSpinBox):
                w.setValue(int(value))
            else:
                w.setText(f"{value:g}" if isinstance(value, float) else str(value))
        self._show_valid(True)

    def set_choice_unavailable(self, choice: str, reason: str | None) -> None:
        """Grey one choice of a combo box out with `reason` as its tooltip (None: available
        again). A greyed choice cannot be picked; one already shown stays until changed."""
        w = self.widget
        if not isinstance(w, QComboBox):
            return
        index = w.findText(choice)
        item = w.model().item(index) if index >= 0 else None
        if item is None:
            return
        item.setEnabled(reason is None)
        item.setToolTip(reason or "")

    def _on_editor_changed(self, *_args) -> None:
        try:
            value = self.value()
        except ConfigError as exc:
            self._show_valid(False, str(exc))
            return
        self._show_valid(True)
        self.value_changed.emit(self.option.key, value)

    def _show_valid(self, ok: bool, message: str = "") -> None:
        if isinstance(self.widget, QLineEdit):
            self.widget.setProperty("invalid", not ok)  # styled in resources/*.qss
            self.widget.style().unpolish(self.widget)
            self.widget.style().polish(self.widget)
            tip = f"{self.option.help} ({self.option.valid_text()})"
            self.widget.setToolTip(tip if ok else message)
