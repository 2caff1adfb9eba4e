"""The run panel: the run settings (generated from RUN_OPTIONS) and Start/Pause/Stop/Reset."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import QTimer, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QFormLayout,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
)

from memlens.app.elided_label import LinesLabel
from memlens.app.panels.option_fields import OptionField
from memlens.app.panels.preset_field import PresetField
from memlens.app.panels.window_state import WindowState
from memlens.core.config import RunConfig, TechniqueToggles
from memlens.core.model_file import ModelFileError, read_file_config
from memlens.core.options import RUN_OPTIONS

RESTART_HINT = "needs restart"
RESTART_MARK = "\u21bb"  # ↻: the hint in a compact panel (its tooltip says it whole)
RESTART_TIP = "Needs restart: this setting takes effect when you start the next run"
COMPACT_COMBO_CHARS = 9  # a compact panel's combo boxes: this wide, the list opens wider
NOTE_MS = 6000  # how long a note (RunPanel.say) replaces the state's text


SETTINGS_TITLE = "Settings (apply at Start)"
STATE_LINES = 2


class RunPanel(QGroupBox):
    """Binds to a RunConfig: shows it, edits it, and says which edits wait for a restart."""

    start_clicked = Signal()
    pause_clicked = Signal()
    stop_clicked = Signal()
    reset_clicked = Signal()
    value_changed = Signal(str, object)

    def __init__(self, config: RunConfig | None = None, parent=None) -> None:
        super().__init__(SETTINGS_TITLE, parent)
        self.fields: dict[str, OptionField] = {}
        self.hints: dict[str, QLabel] = {}
        self._running_config: RunConfig | None = None
        form = QFormLayout()
        form.setContentsMargins(6, 4, 6, 4)
        form.setVerticalSpacing(3)
        for opt in RUN_OPTIONS:
            field = self._make_field(opt)
            field.value_changed.connect(self._on_field_value_changed)
            hint = QLabel(RESTART_HINT)
            hint.setProperty("role", "restart_hint")  # styled in resources/*.qss
            hint.setToolTip(RESTART_TIP)
            # Its room is kept while hidden: the panel's width (and the dock's) counts it
            # from the start, so showing it never pushes the fields past the edge.
            policy = hint.sizePolicy()
            policy.setRetainSizeWhenHidden(True)
            hint.setSizePolicy(policy)
            hint.hide()
            row = QHBoxLayout()
            row.setSpacing(4)
            row.addWidget(field.widget, 1)
            row.addWidget(hint)
            form.addRow(field.label, row)
            self.fields[opt.key] = field
            self.hints[opt.key] = hint

        self.run_button = self._button("Start", "run_button", self.start_clicked,
                                       "Start a new run with these settings")
        self.pause_button = self._button("Pause", "pause_button", self.pause_clicked,
                                         "Pause after the current step / resume")
        self.stop_button = self._button("Stop", "stop_button", self.stop_clicked,
                                        "Stop the run; what was recorded stays")
        self.reset_button = self._button("Reset", "reset_button", self.reset_clicked,
                                         "Stop the run and clear the plots (pins stay)")
        buttons = QGridLayout()
        buttons.addWidget(self.run_button, 0, 0)
        buttons.addWidget(self.pause_button, 0, 1)
        buttons.addWidget(self.stop_button, 1, 0)
        buttons.addWidget(self.reset_button, 1, 1)
        # Two lines, always: a state that wraps to a second line (a saved run's folder)
        # moved the techniques panel under it by a line, under the user's pointer.
        self.state_label = LinesLabel("Ready", lines=STATE_LINES)
        self.state_label.setObjectName("state_label")
        outer = QFormLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addRow(form)
        outer.addRow(buttons)
        outer.addRow(self.state_label)
        if config is not None:
            self.set_config(config)
        self.set_state("idle")

    def set_compact(self, on: bool) -> None:
        """A narrow window's panel: each restart hint a mark, the combo boxes narrower."""
        for hint in self.hints.values():
            hint.setText(RESTART_MARK if on else RESTART_HINT)
        for field in self.fields.values():
            combo = field.widget
            if isinstance(combo, QComboBox):
                combo.setSizeAdjustPolicy(
                    QComboBox.AdjustToMinimumContentsLengthWithIcon if on
                    else QComboBox.AdjustToContentsOnFirstShow)
                combo.setMinimumContentsLength(COMPACT_COMBO_CHARS if on else 0)
        self.updateGeometry()

    def _make_field(self, opt) -> OptionField:
        if opt.key != "preset":
            return OptionField(opt, self)
        field = PresetField(opt, self)
        field.file_chosen.connect(self._on_model_file_chosen)
        return field

    def _on_model_file_chosen(self, path: str) -> None:
        """A model file's sizes are its own (0 = the file's default) and its CONFIG gives
        the settings it asks for; read from the source, nothing in the file runs here."""
        try:
            values = read_file_config(path)
        except ModelFileError as exc:
            self.state_label.setText(str(exc))
            return
        for key in ("batch_size", "width", "seq_len"):
            self.fields[key].set_value(0)
        for key, value in values.items():
            self.fields[key].set_value(value)
        self._update_hints()
        shown = ", ".join(f"{k}={v}" for k, v in values.items())
        self.state_label.setText(f"{Path(path).name}: " + (f"settings from its CONFIG: {shown}"
                                                          if shown else "no CONFIG"))

    def _button(self, text: str, name: str, signal, tip: str) -> QPushButton:
        b = QPushButton(text)
        b.setObjectName(name)
        b.setToolTip(tip)
        b.clicked.connect(signal.emit)
        return b

    # --- the model --------------------------------------------------------------------------
    def note_shown_run(self, shown: str | None) -> None:
        """Say what the settings are when the run on screen is not one they describe (a
        watched script, a framework's fit): `shown` names it; None: they are the run's."""
        if shown is None:
            self.setTitle(SETTINGS_TITLE)
            self.setToolTip("")
        else:
            self.setTitle(f"Settings for a new run (the run shown is {shown})")
            self.setToolTip(f"The run on screen is {shown}: it was not made with these "
                            "settings. They are what Start runs.")

    def set_config(self, config: RunConfig) -> None:
        values = config.to_dict()
        for key, field in self.fields.items():
            field.set_value(values[key])
        self._update_hints()

    def values(self) -> dict[str, Any]:
        return {key: field.value() for key, field in self.fields.items()}

    def config(self, techniques: TechniqueToggles | None = None) -> RunConfig:
        """The settings as a checked RunConfig (raises ConfigError on a bad value)."""
        cfg = RunConfig().with_values(self.values())
        return cfg if techniques is None else cfg.with_values(techniques.to_dict())

    def set_value(self, key: str, value: Any) -> None:
        self.fields[key].set_value(value)
        self._update_hints()

    def _on_field_value_changed(self, key: str, value: Any) -> None:
        self._update_hints()
        self.value_changed.emit(key, value)

    def _update_hints(self) -> None:
        running = self._running_config.to_dict() if self._running_config else None
        for key, hint in self.hints.items():
            try:
                value = self.fields[key].value()
            except ValueError:
                value = None
            hint.setVisible(running is not None and running[key] != value)

    # --- the run's state ----------------------------------------------------------------------
    def say(self, text: str) -> None:
        """A note under the buttons (wrapped, never cut) for NOTE_MS, then the state's text
        again (unless something else was written there meanwhile)."""
        before = self.state_label.text()
        self.state_label.setText(text)

        def restore() -> None:
            if self.state_label.text() == text:
                self.state_label.setText(before)

        QTimer.singleShot(NOTE_MS, self, restore)

    def set_state(self, state: WindowState, running_config: RunConfig | None = None,
                  message: str = "") -> None:
        state = WindowState(state)
        active = state.active
        self._running_config = running_config if active else None
        self.run_button.setEnabled(not active)
        self.pause_button.setEnabled(state.controllable)
        self.pause_button.setText("Resume" if state in (WindowState.PAUSED, WindowState.ERROR)
                                  else "Pause")
        self.stop_button.setEnabled(state.controllable)
        self.reset_button.setEnabled(state != "idle" or bool(message))
        self.state_label.setText(message or state.capitalize())
        self._update_hints()
