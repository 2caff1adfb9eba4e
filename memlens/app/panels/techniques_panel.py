"""The techniques panel: each live technique, generated from TECHNIQUE_OPTIONS, always editable."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QFormLayout, QGroupBox, QLabel

from memlens.app.panels.option_fields import OptionField
from memlens.core.config import TechniqueToggles
from memlens.core.options import TECHNIQUE_OPTIONS
from memlens.core.technique_notes import TECHNIQUE_NOTES


class TechniquesPanel(QGroupBox):
    """Binds to TechniqueToggles. A user edit emits `technique_changed(key, value)`; the
    window passes it to the run's controls, which apply it at the next step boundary."""

    technique_changed = Signal(str, object)

    def __init__(self, toggles: TechniqueToggles | None = None, parent=None) -> None:
        super().__init__("Techniques (live: apply at the next step)", parent)
        self.fields: dict[str, OptionField] = {}
        form = QFormLayout(self)
        form.setContentsMargins(6, 4, 6, 4)
        form.setVerticalSpacing(3)
        for opt in TECHNIQUE_OPTIONS:
            field = OptionField(opt, self)
            field.value_changed.connect(self.technique_changed)
            note = TECHNIQUE_NOTES.get(opt.key)
            if note:  # what it does and what to expect, on the label and the editor
                tip = f"<p>{note}</p><p><i>{opt.key}: {opt.valid_text()}</i></p>"
                field.label.setToolTip(tip)
                field.widget.setToolTip(tip)
            form.addRow(field.label, field.widget)
            self.fields[opt.key] = field
        self.note = QLabel("")
        self.note.setObjectName("techniques_note")
        self.note.setWordWrap(True)
        self.note.hide()
        form.addRow(self.note)
        self.set_toggles(toggles or TechniqueToggles())

    def set_toggles(self, toggles: TechniqueToggles) -> None:
        for key, value in toggles.to_dict().items():
            self.fields[key].set_value(value)

    def set_value(self, key: str, value: Any) -> None:
        self.fields[key].set_value(value)

    def toggles(self) -> TechniqueToggles:
        t = TechniqueToggles()
        for key, field in self.fields.items():
            t = t.with_change(key, field.value())
        return t

    def show_note(self, text: str) -> None:
        self.note.setText(text)
        self.note.setVisible(bool(text))
