"""Which AMP choices this machine can run for the preset in the run panel, found off the GUI
thread (the probe imports torch and runs a few tiny layers: memlens.core.cpu_support)."""

from __future__ import annotations

import contextlib
import threading

from PySide6.QtCore import QObject, Signal

from memlens.core.config import RunConfig
from memlens.core.options import ConfigError


def amp_refusals(config: RunConfig) -> dict[str, str | None]:
    """{amp choice: why this machine cannot run it for `config`'s model, or None}. A model
    file is not looked into (choosing one runs none of its code): its run refuses what this
    machine cannot run."""
    from memlens.core.options import is_model_file
    from memlens.core.preflight import check_amp
    from memlens.core.training import resolve_device

    if is_model_file(config.preset):
        return {"bf16": None}
    try:
        device = resolve_device(config.device)
        check_amp(config.with_values({"amp": "bf16"}), device)
    except ConfigError as exc:
        return {"bf16": str(exc).removeprefix("amp=bf16: ")}
    except Exception:  # a model file that does not build: its run says what is wrong
        pass
    return {"bf16": None}


class _Answer(QObject):
    """Carries one check's answer from its thread: owned by that thread's closure, never by
    a window, so a window deleted while the check runs leaves the emitter alive (Qt drops
    the queued answer with the receiver) instead of a signal emitted on a deleted object."""

    done = Signal(str, object)


class AmpSupport(QObject):
    """Greys out, in the techniques panel, the AMP choices this machine cannot run for the
    run panel's preset (an LSTM under bf16 on a CPU without AVX512-BF16/AMX). `check()`
    asks off the GUI thread; `checked(preset, refusals)` answers on it."""

    checked = Signal(str, object)

    def __init__(self, run_panel, techniques_panel, parent=None) -> None:
        super().__init__(parent)
        self.run_panel, self.techniques_panel = run_panel, techniques_panel
        self.asked = self.answered = 0  # checks (the first one imports torch)
        self.checked.connect(self._on_checked)

    def check(self) -> None:
        config = self.run_panel.config()
        self.asked += 1
        answer = _Answer()
        answer.done.connect(self.checked)  # queued to the GUI thread; gone with `self`

        def work() -> None:
            refusals = amp_refusals(config)
            with contextlib.suppress(RuntimeError):
                answer.done.emit(config.preset, refusals)

        # Not a daemon: a window closed at once must not end the interpreter while this
        # thread is inside torch's import (a crash at exit); it ends in a few seconds.
        threading.Thread(target=work, name="memlens-amp-check").start()

    def _on_checked(self, preset: str, refusals: dict) -> None:
        self.answered += 1
        if preset != str(self.run_panel.fields["preset"].value()):
            return  # an answer for a preset the panel no longer shows
        field = self.techniques_panel.fields["amp"]
        for choice, reason in refusals.items():
            field.set_choice_unavailable(choice, reason)
