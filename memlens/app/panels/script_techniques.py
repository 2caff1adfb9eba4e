"""The Techniques panel while it drives a watched script (File > Watch a script…): only the
techniques a watch can toggle are live, each says in its tooltip what memlens does to the
script and to its results (core.watch.toggles), a toggle with nothing to act on is greyed
with the reason, and a line under the fields says what the script does itself, as the
watch saw it (run.json's `techniques`, core.watch.script_techniques)."""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import QLabel

from memlens.app.panels.techniques_panel import TechniquesPanel, TechniquesTarget
from memlens.core.options import format_value
from memlens.core.technique_notes import TECHNIQUE_NOTES
from memlens.core.watch.toggles import SCRIPT, WATCH_KEYS, WATCH_NOTES, results_text

NOT_A_WATCH_TOGGLE = ("Not toggled on a watched script: memlens cannot change this in a "
                      "script it did not write.")


def watch_tooltip(key: str, values: tuple) -> str:
    results = "".join(f"<li>{format_value(v)}: {results_text(key, v)}</li>" for v in values)
    return (f"<p>{TECHNIQUE_NOTES.get(key, '')}</p><p><b>On this script:</b> "
            f"{WATCH_NOTES[key]}</p><p>Results:</p><ul>{results}</ul>")


_VALUES = {"zero_grad": ("set_to_none", "zeros", "off"), "detach_state": (True,),
           "no_grad_eval": (True,), "eval_mode": (True,), "amp": ("bf16", "fp16")}


class ScriptTechniquesView:
    """Puts `panel` into its watch mode (`enter`), shows a watched run's techniques
    (`show`) and gives the panel back as it was (`leave`)."""

    def __init__(self, panel: TechniquesPanel) -> None:
        self.panel = panel
        self.uses = QLabel("")
        self.uses.setObjectName("script_uses")
        self.uses.setWordWrap(True)
        self.uses.hide()
        panel.layout().addRow(self.uses)
        self._saved: dict[str, tuple[bool, str, str]] | None = None
        self.shown: dict | None = None  # the run.json `techniques` last shown

    @property
    def active(self) -> bool:
        return self._saved is not None

    def enter(self) -> None:
        if self._saved is not None:
            return
        p = self.panel
        self._saved = {k: (f.widget.isEnabled(), f.widget.toolTip(), f.label.toolTip())
                       for k, f in p.fields.items()}
        p.set_target(TechniquesTarget.SCRIPT)  # the window sets it again as states change
        for key, field in p.fields.items():
            tip = (watch_tooltip(key, _VALUES[key]) if key in WATCH_KEYS
                   else NOT_A_WATCH_TOGGLE)
            field.widget.setToolTip(tip)
            field.label.setToolTip(tip)
            field.widget.setEnabled(key in WATCH_KEYS)
        self.uses.setText("Waiting for the script's first steps…")
        self.uses.show()

    def show(self, techniques: Any) -> None:
        """run.json's `techniques` of the watched run: the values in force, what the
        script does, what is unavailable and why."""
        if self._saved is None or not isinstance(techniques, dict) or techniques == self.shown:
            return
        self.shown = techniques
        fields = self.panel.fields
        for key, value in (techniques.get("in_force") or {}).items():
            if key in fields and key in WATCH_KEYS and value != SCRIPT:
                fields[key].set_value(value)
        unavailable = techniques.get("unavailable") or {}
        for key in WATCH_KEYS:
            why = unavailable.get(key)
            field = fields[key]
            field.widget.setEnabled(why is None)
            tip = watch_tooltip(key, _VALUES[key])
            field.widget.setToolTip(tip if why is None else f"<p><b>Unavailable:</b> {why}</p>"
                                    + tip)
        uses = techniques.get("uses") or {}
        lines = [f"• {uses[k]}" for k in WATCH_KEYS if uses.get(k)]
        lines += [f"• {k} unavailable: {why}" for k, why in unavailable.items()]
        self.uses.setText("What the script does itself:\n" + "\n".join(lines))

    def leave(self) -> None:
        if self._saved is None:
            return
        for key, (enabled, tip, label_tip) in self._saved.items():
            field = self.panel.fields[key]
            field.widget.setEnabled(enabled)
            field.widget.setToolTip(tip)
            field.label.setToolTip(label_tip)
        self._saved, self.shown = None, None
        self.uses.hide()
