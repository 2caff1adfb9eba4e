"""The app on a CPU without bf16 LSTM (simulated by memlens's probe): the AMP choice greyed
with the reason for lstm, open for mlp; a live switch to bf16 refused and shown as kept."""

from __future__ import annotations

import pytest

from memlens.core.cpu_support import SIMULATE_ENV, bf16_support
from tests.app.drive import choose, click, wait_steps


@pytest.fixture
def no_bf16_lstm(monkeypatch):
    monkeypatch.setenv(SIMULATE_ENV, "lstm")
    bf16_support.cache_clear()
    yield
    monkeypatch.delenv(SIMULATE_ENV)
    bf16_support.cache_clear()


def bf16_item(window):
    combo = window.techniques_panel.fields["amp"].widget
    return combo.model().item(combo.findText("bf16"))


def test_bf16_is_greyed_for_lstm_with_the_reason_and_open_for_mlp(qtbot, window, no_bf16_lstm):
    with qtbot.waitSignal(window.amp_support.checked, timeout=30_000):
        choose(window, "lstm")
    item = bf16_item(window)
    assert not item.isEnabled()
    assert "cannot run an LSTM under bf16" in item.toolTip()
    with qtbot.waitSignal(window.amp_support.checked, timeout=30_000):
        choose(window, "mlp")
    assert bf16_item(window).isEnabled() and bf16_item(window).toolTip() == ""
    # every check asked has answered (the benchmarks wait for this before measuring)
    assert window.amp_support.answered == window.amp_support.asked >= 2


def test_a_live_switch_to_bf16_on_lstm_is_refused_and_the_panel_shows_amp_off(
        qtbot, window, no_bf16_lstm):
    choose(window, "lstm")
    click(qtbot, window.run_panel.run_button)
    wait_steps(qtbot, window, 2)
    window.techniques_panel.fields["amp"].widget.setCurrentText("bf16")  # as if picked
    qtbot.waitUntil(lambda: any(e.kind == "refused" for e in window.history.events()),
                    timeout=30_000)
    qtbot.waitUntil(lambda: window.techniques_panel.fields["amp"].value() == "off",
                    timeout=10_000)
    assert "refused" in window.techniques_panel.note.text()
    assert window.running  # the run goes on
    window.stop_run()
