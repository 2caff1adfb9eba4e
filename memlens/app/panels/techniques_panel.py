"""The techniques panel: each technique, generated from TECHNIQUE_OPTIONS, always editable;
its title says what an edit acts on (techniques_target), and a line says which differ from
the defaults, so settings left from an earlier run never carry over unseen."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from PySide6.QtCore import QSignalBlocker, Signal
from PySide6.QtWidgets import QFormLayout, QGroupBox, QHBoxLayout, QLabel, QPushButton

from memlens.app.panels.option_fields import OptionField, label_text
from memlens.core.config import TechniqueToggles
from memlens.core.options import TECHNIQUE_OPTIONS, format_value
from memlens.core.technique_notes import TECHNIQUE_NOTES


class TechniquesTarget(StrEnum):
    """What an edit in the panel acts on; the title says it."""

    LIVE = "live"  # the run going here: applied at its next step
    NEXT_RUN = "next run"  # nothing runs here: the next Start takes them
    # A script another process runs, followed here: the panel cannot reach it, so an edit
    # is for the next run started here, as NEXT_RUN.
    WATCHED = "watched"
    # A script File > Watch a script… runs: an edit goes to it at its next step boundary
    SCRIPT = "script"


TITLES = {
    TechniquesTarget.LIVE: "Techniques (live: apply at the next step)",
    TechniquesTarget.NEXT_RUN: "Techniques (for the next run)",
    TechniquesTarget.WATCHED: "Techniques (for a new run: not the watched script's)",
    TechniquesTarget.SCRIPT: "Techniques (watched script: apply at the next step boundary)",
}
DEFAULTS = TechniqueToggles()


def changed_from_defaults(toggles: TechniqueToggles) -> dict[str, Any]:
    """The techniques whose values are not the defaults, by key."""
    defaults = DEFAULTS.to_dict()
    return {k: v for k, v in toggles.to_dict().items() if v != defaults[k]}


class TechniquesPanel(QGroupBox):
    """Binds to TechniqueToggles. A user edit emits `technique_changed(key, value)`; the
    window passes it to the run's controls, which apply it at the next step boundary."""

    technique_changed = Signal(str, object)

    def __init__(self, toggles: TechniqueToggles | None = None, parent=None) -> None:
        super().__init__(TITLES[TechniquesTarget.NEXT_RUN], parent)
        self.setObjectName("techniques_panel")
        self.target = TechniquesTarget.NEXT_RUN
        self.fields: dict[str, OptionField] = {}
        form = QFormLayout(self)
        form.setContentsMargins(6, 4, 6, 4)
        form.setVerticalSpacing(3)
        for opt in TECHNIQUE_OPTIONS:
            field = OptionField(opt, self)
            field.value_changed.connect(self.technique_changed)
            field.value_changed.connect(lambda *_: self._show_changed())
            note = TECHNIQUE_NOTES.get(opt.key)
            if note:  # what it does and what to expect, on the label and the editor
                tip = f"<p>{note}</p><p><i>{opt.key}: {opt.valid_text()}</i></p>"
                field.label.setToolTip(tip)
                field.widget.setToolTip(tip)
            form.addRow(field.label, field.widget)
            self.fields[opt.key] = field
        self.changed_label = QLabel("")
        self.changed_label.setObjectName("techniques_changed")
        self.changed_label.setWordWrap(True)
        self.defaults_button = QPushButton("Defaults")
        self.defaults_button.setObjectName("techniques_defaults_button")
        self.defaults_button.setToolTip("Set every technique back to its default")
        self.defaults_button.clicked.connect(self._on_defaults_clicked)
        row = QHBoxLayout()
        row.addWidget(self.changed_label, 1)
        row.addWidget(self.defaults_button)
        form.addRow(row)
        self.note = QLabel("")
        self.note.setObjectName("techniques_note")
        self.note.setWordWrap(True)
        self.note.hide()
        form.addRow(self.note)
        self.set_toggles(toggles or TechniqueToggles())

    def set_target(self, target: TechniquesTarget) -> None:
        """Say what an edit acts on (the window decides: techniques_target)."""
        self.target = TechniquesTarget(target)
        self.setTitle(TITLES[self.target])
        self._show_changed()

    def set_toggles(self, toggles: TechniqueToggles) -> None:
        for key, value in toggles.to_dict().items():
            self.fields[key].set_value(value)
        self._show_changed()

    def reset_to_defaults(self, note: str = "") -> None:
        """Every technique at its default, without a change signal (no run is told)."""
        self.set_toggles(DEFAULTS)
        self.show_note(note)

    def set_value(self, key: str, value: Any) -> None:
        self.fields[key].set_value(value)
        self._show_changed()

    def toggles(self) -> TechniqueToggles:
        t = TechniqueToggles()
        for key, field in self.fields.items():
            t = t.with_change(key, field.value())
        return t

    def show_note(self, text: str) -> None:
        self.note.setText(text)
        self.note.setVisible(bool(text))

    def _show_changed(self) -> None:
        """Name the techniques that are not at their defaults, and mark their labels."""
        try:
            changed = changed_from_defaults(self.toggles())
        except ValueError:
            changed = {}
        for key, field in self.fields.items():
            field.label.setProperty("changed", key in changed)
            field.label.style().unpolish(field.label)
            field.label.style().polish(field.label)
        names = ", ".join(f"{label_text(self.fields[k].option)} {format_value(v)}"
                          for k, v in changed.items())
        self.changed_label.setText(f"Not the defaults: {names}" if changed
                                   else "All at their defaults")
        self.defaults_button.setEnabled(bool(changed) and self.target != TechniquesTarget.LIVE)

    def _on_defaults_clicked(self) -> None:
        with QSignalBlocker(self):
            self.reset_to_defaults("Techniques back to their defaults")
